"""OpenAI chat completions (/v1/chat/completions): messages in, a message (or its deltas) out."""

from __future__ import annotations

import orjson

from app.errors import InvalidRequest
from app.protocols.openai import OpenAIProtocol
from app.upstream.assemble import CHUNK_FIELDS, DELTA_OWN, StreamAssembler

SEP = "\x1e"


class ChatProtocol(OpenAIProtocol):
    name = "chat"
    value = "chat/completions"
    operation = "chat"
    assembles = True
    id_prefix = "chatcmpl"

    def check_shape(self, body: dict) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty array", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InvalidRequest(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
            check_content(m.get("content"), f"messages[{i}].content")

    def prompt_chars(self, body: dict) -> int:
        chars = 0
        for m in body["messages"]:
            content = m.get("content")
            if isinstance(content, str):
                chars += len(content)
            elif isinstance(content, list):
                chars += sum(len(p["text"]) for p in content if isinstance(p.get("text"), str))
        return chars

    def prefix_text(self, body: dict) -> str:
        return canonical_messages(body.get("tools"), body["messages"])

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        messages = body["messages"]
        last = messages[-1]
        text = plain_text(last.get("content"))
        if last.get("role") != "user" or text is None or any(has_media(m.get("content")) for m in messages):
            return None
        # Only the last turn's text is compared: a turn that says more (the `name` of a participant, which the
        # model reads: "What is my name?" from alice and from bob) is held by the exact cache alone, as an
        # earlier turn with a name stays in the scope word for word.
        if any(value not in (None, "", [], {}) for key, value in last.items() if key not in ("role", "content")):
            return None
        return text, messages[:-1]

    def replay(self, body: dict, include_usage: bool) -> list[bytes]:
        base = {k: body[k] for k in CHUNK_FIELDS if k in body}
        base["object"] = "chat.completion.chunk"
        events = []

        def emit(choices: list, **extra) -> None:
            events.append(b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n")

        for choice in body.get("choices", []):
            i = choice.get("index", 0)
            message = choice.get("message") or {}
            content = message.get("content")
            # As a backend opens its stream: the role, and `content: null` where the answer has no text (a tool
            # call, a refusal), so the client's accumulated message has the same `content` as the JSON answer.
            emit([{"index": i, "delta": {"role": message.get("role", "assistant"), "content": "" if isinstance(content, str) else None},
                   "logprobs": None, "finish_reason": None}])
            # The message's other texts (reasoning first, as a reasoning model streams it; a refusal), then its
            # content and tool calls, each in one delta. The answer's log-probabilities (kept when it was stored)
            # ride with its content (or refusal, or calls), all at once.
            deltas: list[dict] = [{key: value} for key, value in message.items()
                      if key not in DELTA_OWN and key != "refusal" and isinstance(value, str) and value]
            if content:
                deltas.append({"content": content})
            if isinstance(message.get("refusal"), str) and message["refusal"]:
                deltas.append({"refusal": message["refusal"]})
            if message.get("tool_calls"):
                deltas.append({"tool_calls": [{"index": k, **tc} for k, tc in enumerate(message["tool_calls"])]})
            logprobs = choice.get("logprobs")
            for delta in deltas:
                rides = None
                if next(iter(delta)) in ("content", "refusal", "tool_calls"):
                    rides, logprobs = logprobs, None
                emit([{"index": i, "delta": delta, "logprobs": rides, "finish_reason": None}])
            # The choice's own fields (vLLM's `stop_reason`) come with its finish reason, as on its last chunk.
            extra = {k: v for k, v in choice.items() if k not in ("index", "message", "logprobs", "finish_reason")}
            emit([{"index": i, "delta": {}, "logprobs": logprobs, "finish_reason": choice.get("finish_reason"), **extra}])
        if include_usage and isinstance(body.get("usage"), dict):
            emit([], usage=body["usage"])
        events.append(b"data: [DONE]\n\n")
        return events

    def assembler(self) -> StreamAssembler:
        return StreamAssembler(chat=True)

    def answer_text(self, body: dict) -> str | None:
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = first.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        return text if isinstance(text, str) else None


def check_content(content: object, param: str) -> None:
    """A message's content: a string, null (an assistant turn with tool calls), or an array of parts,
    each an object with a string `type`, and a string `text` for text parts."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or an array of content parts", param=param)
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{where}' must be an object with a string 'type'", param=where)
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")


def canonical_messages(tools: object, messages: list) -> str:
    """The prompt as one string, in the order a chat template lays it out: tools first, then every
    message (role, name, content; non-text parts as JSON) in order."""
    parts = []
    if tools:
        parts.append("tools" + SEP + orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode())
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p["text"] if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                              else orjson.dumps(p, option=orjson.OPT_SORT_KEYS).decode() for p in content)
        elif not isinstance(content, str):
            content = "" if content is None else orjson.dumps(content).decode()
        extra = ""
        if m.get("tool_calls"):
            extra = orjson.dumps(m["tool_calls"], option=orjson.OPT_SORT_KEYS).decode()
        parts.append(f"{m.get('role')}{SEP}{m.get('name') or ''}{SEP}{content}{extra}")
    return SEP.join(parts) + SEP


def plain_text(content: object) -> str | None:
    """A turn's text when it is nothing but text (a string, or text parts joined by newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "\n".join(str(p.get("text", "")) for p in content)
    return None


def has_media(content: object) -> bool:
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") != "text" for p in content)


CHAT = ChatProtocol()
