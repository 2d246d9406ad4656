"""A chat completions answer as a Responses answer: the JSON object, and the stream as Responses events.

The stream is translated as it arrives, one chat chunk at a time: the first content delta leaves as the first
`response.output_text.delta` in the same write, and `response.completed` (with usage) is sent only once the chat
stream ended complete. A chat stream that breaks ends the Responses stream with an error event instead.
"""

from __future__ import annotations

import time
import uuid

import orjson

from app.protocols.translated_stream import another_call

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def shell(response_id: str, alias: str, body: dict, created_at: int | None = None) -> dict:
    """The response object around the output: the request's settings echoed, as OpenAI's answers carry them."""
    asked_text = body.get("text")
    text: dict = asked_text if isinstance(asked_text, dict) else {}
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()),
        "status": "in_progress", "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": alias, "output": [], "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"), "reasoning": body.get("reasoning"),
        "store": body.get("store", True), "temperature": body.get("temperature"),
        "text": {"format": {"type": "text"}, **text}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "top_p": body.get("top_p"), "truncation": body.get("truncation") or "disabled",
        "usage": None, "user": body.get("user"), "metadata": body.get("metadata") or {},
        "top_logprobs": body.get("top_logprobs"), "max_tool_calls": body.get("max_tool_calls"),
        "safety_identifier": body.get("safety_identifier"), "prompt_cache_key": body.get("prompt_cache_key"),
        "prompt_cache_retention": body.get("prompt_cache_retention"), "background": False,
    }


def usage_of(chat_usage: dict | None) -> dict | None:
    """Chat usage (prompt/completion tokens) in Responses' names."""
    if not isinstance(chat_usage, dict):
        return None
    inp, out = int(chat_usage.get("prompt_tokens") or 0), int(chat_usage.get("completion_tokens") or 0)
    details = chat_usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    odetails = chat_usage.get("completion_tokens_details")
    reasoning = odetails.get("reasoning_tokens") if isinstance(odetails, dict) else None
    return {"input_tokens": inp, "input_tokens_details": {"cached_tokens": int(cached or 0), "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": int(reasoning or 0)},
            "total_tokens": inp + out}


def _reason_of(value: object) -> str | None:
    """A chat choice's finish_reason. One that is not a string (a list or an object, from servers that put one there)
    still says the answer ended, not why: "other", neither a cut nor a filter."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else "other"


def _finish(response: dict, finish_reason: str | None) -> None:
    reason = _INCOMPLETE.get(finish_reason or "")
    response["status"] = "incomplete" if reason else "completed"
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["completed_at"] = int(time.time())


def from_chat(chat: dict, response: dict) -> dict:
    """The Responses object for a whole chat completion; `response` is the shell (app.protocols.responses.from_chat.shell)."""
    choices = chat.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    asked_message = choice.get("message")
    message: dict = asked_message if isinstance(asked_message, dict) else {}
    output: list[dict] = []
    reasoning = reasoning_text(message)
    if reasoning:
        output.append(_reasoning_item(new_id("rs"), reasoning, "completed"))
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(_message_item(new_id("msg"), content, "completed", _logprobs(choice)))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:  # OpenAI's refusal: a message whose part is a refusal, as Responses says one
        output.append(_refusal_item(new_id("msg"), refusal, "completed"))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        output.append(_call_item(new_id("fc"), call.get("id") or new_id("call"), fn.get("name") or "",
                                 fn.get("arguments") or "", "completed"))
    finish_reason = _reason_of(choice.get("finish_reason"))
    if output and finish_reason in _INCOMPLETE:
        output[-1]["status"] = "incomplete"  # the item the cut fell in (the last one generated), as OpenAI marks it
    out = {**response, "output": output, "usage": usage_of(chat.get("usage"))}
    _finish(out, finish_reason)
    return out


def reasoning_text(message: dict) -> str | None:
    """A chat message's (or delta's) chain of thought: `reasoning_content` (llama.cpp, DeepSeek, older vLLM) or
    `reasoning` (vLLM since it removed reasoning_content, OpenRouter), whichever is text."""
    for name in ("reasoning_content", "reasoning"):
        text = message.get(name)
        if isinstance(text, str) and text:
            return text
    return None


def _logprobs(choice: dict) -> list:
    """A chat choice's (or chunk's) token log-probabilities: the same objects as Responses' output_text carries
    (token, logprob, bytes, top_logprobs)."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return content if isinstance(content, list) else []


def _message_item(item_id: str, text: str, status: str, logprobs: list | None = None) -> dict:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}]
            if status != "in_progress" else []}


def _refusal_item(item_id: str, text: str, status: str) -> dict:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "refusal", "refusal": text}] if status != "in_progress" else []}


def _reasoning_item(item_id: str, text: str, status: str) -> dict:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def event(payload: dict) -> bytes:
    """One Responses SSE event: its type named on the event line too, as OpenAI sends it."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class _Open:
    """An output item being streamed: its index, id, kind and the text (or arguments) so far."""

    __slots__ = ("call_id", "id", "index", "kind", "logprobs", "name", "parts")

    def __init__(self, index: int, item_id: str, kind: str, call_id: str = "", name: str = "") -> None:
        self.index, self.id, self.kind = index, item_id, kind
        self.parts: list[str] = []
        self.logprobs: list = []  # an output text's token log-probabilities so far (when asked for)
        self.call_id, self.name = call_id, name


class ChatStreamTranslator:
    """Chat completion chunks in, Responses events out, in order, with sequence numbers.

    `start()` gives response.created and response.in_progress; `feed(chunk)` the events for one chat chunk
    (item added, content part added, deltas); `finish()` closes the open items and gives response.completed
    (or response.incomplete) with usage. `response` is the final object once finished.
    """

    def __init__(self, response: dict) -> None:
        self.response = response
        self._seq = 0
        self._output: list[dict] = []
        self._open: _Open | None = None
        self._calls: dict[int, _Open] = {}  # chat tool-call index -> the function_call item now at that index
        self._all_calls: list[_Open] = []  # every function_call item, in order (an index may start another call)
        self._finish_reason: str | None = None
        self._usage: dict | None = None
        self.first_text = False  # whether an output_text delta has been sent (TTFT)

    def _ev(self, payload: dict) -> bytes:
        payload["sequence_number"] = self._seq
        self._seq += 1
        return event(payload)

    def start(self) -> bytes:
        return (self._ev({"type": "response.created", "response": self.response})
                + self._ev({"type": "response.in_progress", "response": self.response}))

    def feed(self, chunk: dict) -> bytes:
        out: list[bytes] = []
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_text(delta)
            if reasoning:
                out.append(self._text("reasoning", reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(self._text("message", content, _logprobs(choice)))
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                out.append(self._text("refusal", refusal))
            for call in delta.get("tool_calls") or ():
                out.append(self._call_delta(call))
            if reason := _reason_of(choice.get("finish_reason")):
                self._finish_reason = reason
        return b"".join(out)

    def _text(self, kind: str, text: str, logprobs: list | None = None) -> bytes:
        out = b""
        cur = self._open
        if cur is None or cur.kind != kind:
            out += self._close_open()
            cur = self._open = _Open(len(self._output), new_id("rs" if kind == "reasoning" else "msg"), kind)
            item = (_message_item(cur.id, "", "in_progress") if kind == "message" else
                    _refusal_item(cur.id, "", "in_progress") if kind == "refusal" else
                    _reasoning_item(cur.id, "", "in_progress"))
            self._output.append(item)
            out += self._ev({"type": "response.output_item.added", "output_index": cur.index, "item": item})
            part = ({"type": "output_text", "text": "", "annotations": [], "logprobs": []} if kind == "message" else
                    {"type": "refusal", "refusal": ""} if kind == "refusal" else {"type": "reasoning_text", "text": ""})
            out += self._ev({"type": "response.content_part.added", "item_id": cur.id, "output_index": cur.index,
                             "content_index": 0, "part": part})
        cur.parts.append(text)
        if kind == "message":
            self.first_text = True
            if logprobs:  # asked for: this delta's own (rare; the template below is the hot path)
                cur.logprobs.extend(logprobs)
                return out + self._ev({"type": "response.output_text.delta", "item_id": cur.id, "output_index": cur.index,
                                       "content_index": 0, "delta": text, "logprobs": logprobs})
            # The one event per token: written from a template (same bytes as _ev would give), not a dict dumped.
            seq, self._seq = self._seq, self._seq + 1
            return out + (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"'
                          + cur.id.encode() + b'","output_index":%d,"content_index":0,"delta":' % cur.index
                          + orjson.dumps(text) + b',"logprobs":[],"sequence_number":%d}\n\n' % seq)
        kind_event = "response.refusal.delta" if kind == "refusal" else "response.reasoning_text.delta"
        return out + self._ev({"type": kind_event, "item_id": cur.id, "output_index": cur.index,
                               "content_index": 0, "delta": text})

    def _call_delta(self, call: dict) -> bytes:
        out = b""
        index = call.get("index", 0)
        fn = call.get("function") or {}
        cur = self._calls.get(index)
        if cur is None or another_call(call.get("id"), cur.call_id):
            out += self._close_open()
            cur = _Open(len(self._output), new_id("fc"), "function_call", call.get("id") or new_id("call"),
                        fn.get("name") or "")
            self._calls[index] = cur
            self._all_calls.append(cur)
            item = _call_item(cur.id, cur.call_id, cur.name, "", "in_progress")
            self._output.append(item)
            out += self._ev({"type": "response.output_item.added", "output_index": cur.index, "item": item})
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            cur.parts.append(args)
            out += self._ev({"type": "response.function_call_arguments.delta", "item_id": cur.id,
                             "output_index": cur.index, "delta": args})
        return out

    def _close_open(self, cut_index: int = -1) -> bytes:
        cur, self._open = self._open, None
        if cur is None:
            return b""
        text = "".join(cur.parts)
        status = "incomplete" if cur.index == cut_index else "completed"
        if cur.kind == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": cur.logprobs}
            item = _message_item(cur.id, text, status, cur.logprobs)
            out = self._ev({"type": "response.output_text.done", "item_id": cur.id, "output_index": cur.index,
                            "content_index": 0, "text": text, "logprobs": cur.logprobs})
        elif cur.kind == "refusal":
            part = {"type": "refusal", "refusal": text}
            item = _refusal_item(cur.id, text, status)
            out = self._ev({"type": "response.refusal.done", "item_id": cur.id, "output_index": cur.index,
                            "content_index": 0, "refusal": text})
        else:
            part = {"type": "reasoning_text", "text": text}
            item = _reasoning_item(cur.id, text, status)
            out = self._ev({"type": "response.reasoning_text.done", "item_id": cur.id, "output_index": cur.index,
                            "content_index": 0, "text": text})
        out += self._ev({"type": "response.content_part.done", "item_id": cur.id, "output_index": cur.index,
                         "content_index": 0, "part": part})
        self._output[cur.index] = item
        return out + self._ev({"type": "response.output_item.done", "output_index": cur.index, "item": item})

    def finish(self) -> bytes:
        """The closing events, once the chat stream ended (complete, or cut by the length cap or a filter)."""
        # A cut answer: the item the cut fell in is the last one begun (every earlier one was followed by
        # another), and it alone says `incomplete`, as OpenAI marks it.
        cut_index = len(self._output) - 1 if self._finish_reason in _INCOMPLETE else -1
        out = self._close_open(cut_index)
        for cur in self._all_calls:
            args = "".join(cur.parts)
            item = _call_item(cur.id, cur.call_id, cur.name, args, "incomplete" if cur.index == cut_index else "completed")
            self._output[cur.index] = item
            out += self._ev({"type": "response.function_call_arguments.done", "item_id": cur.id,
                             "output_index": cur.index, "arguments": args})
            out += self._ev({"type": "response.output_item.done", "output_index": cur.index, "item": item})
        self._calls.clear()
        self._all_calls.clear()
        final = {**self.response, "output": self._output, "usage": usage_of(self._usage)}
        _finish(final, self._finish_reason)
        self.response = final
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return out + self._ev({"type": kind, "response": final})

    @property
    def sequence(self) -> int:
        return self._seq

    @property
    def finished_reason(self) -> str | None:
        """The chat stream's finish reason, once it said one."""
        return self._finish_reason
