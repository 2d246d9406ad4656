"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens), in Anthropic's wire format.

A request goes unchanged (apart from `model`) to a backend that speaks Messages natively; to any other
it is translated to chat completions and back (app/protocols/messages_chat.py, with its table of what
maps and what is refused). Streams are named events (`event: message_start` ... `message_stop`); errors
are `{"type":"error","error":{"type","message"}}` with Anthropic's types and statuses, so the anthropic
SDK raises the matching exception class; a stream that fails midway ends with `event: error`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import orjson

from app.errors import GatewayError, InvalidRequest
from app.protocols import messages_chat
from app.protocols.base import (
    ClientProtocol,
    EventKind,
    LimitFigure,
    ParsedRequest,
    PromptSize,
    Upstream,
    is_int,
    positive_int,
)
from app.protocols.chat import SEP, plain_text
from app.protocols.fresh_ids import fresh_message_ids
from app.protocols.messages_chat import event, named_ignored, system_text
from app.protocols.messages_native import native_body
from app.record import Usage

if TYPE_CHECKING:
    from app.config import BackendConfig

# Headers an Anthropic client sends that a native backend must see (the API version, opted-in betas).
PASS_HEADERS = ("anthropic-version", "anthropic-beta")

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors). The gateway's own
# "overloaded" answers (busy backends, an unreachable limiter) are Anthropic's 529 overloaded_error.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
          504: "timeout_error", 529: "overloaded_error"}
_ROLES = ("user", "assistant")
# Stop reasons in OpenAI's words, as the cache policy names them.
_OPENAI_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                  "refusal": "content_filter"}
# Anthropic's error_code (in error.details) for a `thread` request it cannot hold.
THREAD_UNSUPPORTED = "thread_unsupported_request"
_TOO_LONG = "prompt is too long"
_WITH_OUTPUT = "input length and `max_tokens` exceed context limit"
# Backends' words for an overflow that counts the output asked for (vLLM: "... in the completion", TGI:
# "`inputs` tokens + `max_new_tokens`"); llama.cpp's counts the prompt alone.
_OUTPUT_PART = re.compile(r"completion|max_new_tokens|max_tokens", re.IGNORECASE)
_EVENT_TYPE = re.compile(rb'"type"\s*:\s*"([a-z_]+)"')
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
# The stream's event types. An event's data names its type at the top level, but servers order keys
# differently (llama.cpp's JSON sorts them), so a nested block's "type" may come first; nested types
# ("message", "text", "text_delta", "tool_use", "overloaded_error", ...) never take these names, and
# quotes inside strings are escaped, so the first of these found is the event's own.
EVENT_TYPES = frozenset({b"message_start", b"content_block_start", b"content_block_delta", b"content_block_stop",
                         b"message_delta", b"message_stop", b"ping", b"error"})


def event_type(data: bytes) -> bytes:
    """The event's type (b"" when it names none of the stream's)."""
    if data.startswith(b'{"type":"'):  # as llama.cpp and this gateway write them: the type first, no regex
        name = data[9:data.find(b'"', 9)]
        if name in EVENT_TYPES:
            return name
    for m in _EVENT_TYPE.finditer(data):
        if m.group(1) in EVENT_TYPES:
            return m.group(1)
    return b""


class MessagesSse:
    """How a Messages stream frames and classifies for the relay (app.relay.format.StreamFormat): named
    events whose name is their data's `type`, ending with message_stop (no [DONE])."""

    done = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    model_first = True

    def frame(self, data: bytes) -> bytes:
        return b"event: " + (event_type(data) or b"message") + b"\ndata: " + data + b"\n\n"

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        return MESSAGES.error_event(err)

    def is_error(self, data: bytes) -> bool:
        # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
        return data.find(b'"error"') != -1 and event_type(data) == b"error"

    def has_usage(self, data: bytes) -> bool:
        return data.find(b'"usage"') != -1

    def finish_reasons(self, data: bytes) -> list[bytes]:
        if data.find(b'"stop_reason"') == -1 or event_type(data) != b"message_delta":
            return []
        reason = MESSAGES.stop_reason(data)
        return [reason.encode()] if reason else []

    def model(self, data: bytes) -> re.Match[bytes] | None:
        return _MODEL.search(data) if data.find(b'"message_start"') != -1 and event_type(data) == b"message_start" else None

    def is_content(self, data: bytes) -> bool:
        return data.find(b'"content_block_delta"') != -1 and event_type(data) == b"content_block_delta"


class MessagesProtocol(ClientProtocol):
    name = "messages"
    value = "messages"
    operation = "chat"
    relay = "events"
    sse = MessagesSse()
    end_marker = b'"message_stop"'
    id_header = "request-id"

    model_required = "model: Field required (a non-empty string)"
    stream_not_bool = "stream: Input should be a valid boolean"
    stream_unsupported = "stream: not supported on /v1/{api}"

    # --- the request ----------------------------------------------------------------------------
    def check(self, body: dict, stream: bool) -> bool:
        max_tokens = body.get("max_tokens")
        if self.needs_max_tokens and max_tokens is None:
            raise InvalidRequest("max_tokens: Field required", param="max_tokens")
        if max_tokens is not None and (not is_int(max_tokens) or max_tokens < 1):
            raise InvalidRequest("max_tokens: Input should be an integer greater than or equal to 1", param="max_tokens")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("messages: Input should be a non-empty list", param="messages")
        for i, m in enumerate(messages):
            where = f"messages.{i}"
            if not isinstance(m, dict):
                raise InvalidRequest(f"{where}: Input should be an object", param=where)
            if m.get("role") not in _ROLES:
                raise InvalidRequest(f"{where}.role: Input should be 'user' or 'assistant'", param=f"{where}.role")
            _check_blocks(m.get("content"), f"{where}.content")
            if m.get("content") in ("", []) and not (i == len(messages) - 1 and m["role"] == "assistant"):
                # Anthropic's own rule, in its words: a chat backend answered such a turn, and a native one was
                # sent a request Anthropic refuses (an empty turn in the history, a bug the client should see).
                raise InvalidRequest(f"{where}: all messages must have non-empty content except for the optional "
                                     "final assistant message", param=where)
        system = body.get("system")
        if system is not None and not isinstance(system, str):
            _check_blocks(system, "system")
            for j, block in enumerate(system):
                if block.get("type") != "text":
                    raise InvalidRequest(f"system.{j}.type: only text blocks are allowed in system", param=f"system.{j}")
        stops = body.get("stop_sequences")
        if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)):
            raise InvalidRequest("stop_sequences: Input should be a list of strings", param="stop_sequences")
        if stops and "" in stops:  # every answer contains it: backends stop at once and answer nothing
            raise InvalidRequest("stop_sequences: each stop sequence must be non-empty", param="stop_sequences")
        tools = body.get("tools")
        if tools is not None:
            if not isinstance(tools, list):
                raise InvalidRequest("tools: Input should be a list", param="tools")
            for j, tool in enumerate(tools):
                if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                    raise InvalidRequest(f"tools.{j}.name: Field required (a string)", param=f"tools.{j}.name")
        for name in ("tool_choice", "thinking", "metadata"):
            value = body.get(name)
            if value is not None and not isinstance(value, dict):
                raise InvalidRequest(f"{name}: Input should be an object", param=name)
        metadata = body.get("metadata")
        if metadata is not None and not isinstance(metadata.get("user_id"), str | None):
            raise InvalidRequest("metadata.user_id: Input should be a valid string", param="metadata.user_id")
        choice = body.get("tool_choice")
        if choice is not None and choice.get("type") not in ("auto", "any", "tool", "none"):
            raise InvalidRequest("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                                 param="tool_choice.type")
        thinking = body.get("thinking")
        if thinking is not None and thinking.get("type") not in ("enabled", "disabled", "adaptive"):
            raise InvalidRequest("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'",
                                 param="thinking.type")
        for name in ("temperature", "top_p"):
            value = body.get(name)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise InvalidRequest(f"{name}: Input should be a number", param=name)
        top_k = body.get("top_k")
        if top_k is not None and not is_int(top_k):
            raise InvalidRequest("top_k: Input should be an integer", param="top_k")
        if body.get("thread") is not None:
            # Server-held conversations: the gateway keeps none, and a backend that did could not be chosen for
            # every turn. Passed on or dropped, a `continue` turn (only the new messages) reached the model without
            # its history; Anthropic's refusal for a request it cannot thread makes the anthropic SDK's tool runner
            # send every turn whole instead, and tells any other caller why.
            raise InvalidRequest("thread: this gateway does not hold conversations; send the whole conversation "
                                 "without 'thread'", param="thread", code=THREAD_UNSUPPORTED)
        return False

    needs_max_tokens = True

    def prompt_chars(self, body: dict) -> int:
        chars = len(system_text(body.get("system")))
        for m in body["messages"]:
            chars += block_chars(m.get("content"))
        return chars

    def output_cap(self, body: dict) -> int | None:
        return positive_int(body.get("max_tokens"))

    def stops(self, body: dict) -> object:
        return body.get("stop_sequences")

    def prefix_text(self, body: dict) -> str:
        """Tools, then the system prompt, then every turn, as a chat template lays them out."""
        parts = []
        if body.get("tools"):
            parts.append("tools" + SEP + orjson.dumps(body["tools"], option=orjson.OPT_SORT_KEYS).decode())
        system = body.get("system")
        if system:
            parts.append("system" + SEP + SEP + system_text(system))
        for m in body["messages"]:
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                b["text"] if b.get("type") == "text" and isinstance(b.get("text"), str)
                else orjson.dumps(b, option=orjson.OPT_SORT_KEYS).decode() for b in content)
            parts.append(f"{m['role']}{SEP}{SEP}{text}")
        return SEP.join(parts) + SEP

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        messages = body["messages"]
        last = messages[-1]
        text = plain_text(last.get("content"))
        if last.get("role") != "user" or text is None or body.get("thinking"):
            return None
        if any(plain_text(m.get("content")) is None for m in messages):
            return None  # tool use, tool results, images: exact matching only
        earlier: list = [{"role": m["role"], "content": plain_text(m["content"])} for m in messages[:-1]]
        system = body.get("system")
        if system:
            # The system prompt stays in the scope word for word (a turn with more than role and text).
            earlier.insert(0, {"role": "system", "content": system})
        return text, earlier

    def upstream(self, req: ParsedRequest, backend: BackendConfig, streamed: bool) -> Upstream:
        """Passthrough first: a backend that speaks Messages gets the body unchanged apart from `model`, with
        the client's anthropic-version and anthropic-beta headers; any other gets it as chat completions,
        and its answer is translated back (app/protocols/messages_chat.py)."""
        if backend.speaks("messages"):
            native = native_body(req.body)
            if native is None:
                return Upstream(self.value, self.upstream_body(req, backend.model, False), req.headers)
            # The gateway's own (unsigned) thinking blocks from a chat backend's turns are left out: Anthropic
            # refuses them (app/protocols/messages_native.py).
            kept, dropped = native
            return Upstream(self.value, orjson.dumps({**kept, "model": backend.model}), req.headers,
                            (lambda result: named_ignored(result, dropped)) if dropped else None)
        count_only = not self.streams
        body = messages_chat.chat_body(req, backend.model, req.stream, count_only, backend.flavor,
                                         backend.stream_usage)
        alias, thinking = req.alias, messages_chat.thinks(req.body)
        ignored = messages_chat.ignored_fields(req.body, backend.flavor)
        return Upstream("chat/completions", body, {},
                        lambda result: messages_chat.translated(result, alias, count_only, thinking, ignored))

    def credentials(self, headers: Mapping[str, str]) -> str | None:
        """Anthropic clients send their key as x-api-key; Authorization: Bearer works as well."""
        auth = headers.get("authorization")
        if auth is None and (key := headers.get("x-api-key")) is not None:
            return f"Bearer {key}"
        return auth

    def pass_headers(self, headers: dict[str, str]) -> dict[str, str]:
        return {k: headers[k] for k in PASS_HEADERS if k in headers}

    # --- the stream -----------------------------------------------------------------------------
    def classify(self, data: bytes) -> EventKind:
        kind = event_type(data)
        if kind == b"content_block_delta":
            return EventKind.CONTENT
        if kind == b"message_delta":
            return EventKind.FINISH | EventKind.USAGE if data.find(b'"stop_reason"') != -1 else EventKind.USAGE
        if kind == b"message_start":
            return EventKind.USAGE
        if kind == b"message_stop":
            return EventKind.END
        if kind == b"error":
            return EventKind.ERROR
        return EventKind.NONE

    def usage(self, obj: dict) -> Usage | None:
        usage = obj.get("usage")
        if usage is None and isinstance(obj.get("message"), dict):  # message_start
            usage = obj["message"].get("usage")
        if not isinstance(usage, dict):
            return None
        return Usage(input_tokens(usage), int(usage.get("output_tokens") or 0))

    def stream_usage(self, data: bytes, so_far: Usage | None) -> Usage | None:
        """A usage event folded into what the stream reported before: message_start says the input (and a
        first output count), message_delta the cumulative output (and, lately, the input again)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return so_far
        usage = obj.get("usage") if isinstance(obj, dict) else None
        if usage is None and isinstance(obj, dict) and isinstance(obj.get("message"), dict):
            usage = obj["message"].get("usage")
        if not isinstance(usage, dict):
            return so_far
        prompt = input_tokens(usage) if "input_tokens" in usage else (so_far.prompt_tokens if so_far else 0)
        output = usage.get("output_tokens")
        completion = output if isinstance(output, int) else (so_far.completion_tokens if so_far else 0)
        return Usage(prompt, completion)

    def stop_reason(self, data: bytes) -> str | None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        delta = obj.get("delta") if isinstance(obj, dict) else None
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        return reason if isinstance(reason, str) else None

    def finish_reasons(self, body: dict) -> list[str]:
        reason = body.get("stop_reason")
        return [reason] if isinstance(reason, str) else []

    def cache_finish_reasons(self, body: dict) -> list[str | None]:
        return [_OPENAI_FINISH.get(str(body.get("stop_reason")))]

    def assembler(self) -> MessageAssembler:
        return MessageAssembler()

    # --- answers the gateway makes ----------------------------------------------------------------
    def error_status(self, err: GatewayError) -> int:
        if err.type == "overloaded_error" or err.status == 529:
            return 529
        return err.status

    def error_type(self, err: GatewayError) -> str:
        status = self.error_status(err)
        if err.type in _TYPES.values() and (err.type != "invalid_request_error" or status < 500):
            if err.type == "invalid_request_error" and status == 404:
                return "not_found_error"
            if err.type == "invalid_request_error" and status == 413:
                return "request_too_large"
            return err.type
        if status == 429:
            return "rate_limit_error"
        return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")

    def error_body(self, err: GatewayError) -> bytes:
        message = err.message
        if err.code == "context_length_exceeded" and not message.lower().startswith((_TOO_LONG, _WITH_OUTPUT)):
            # Anthropic's errors carry no code: its clients tell a context overflow by these words (Anthropic
            # says "prompt is too long: N tokens > M maximum", or, where the prompt fits without the output
            # asked for, "input length and `max_tokens` exceed context limit: ..."); the backend's words follow.
            message = f"{_WITH_OUTPUT if _OUTPUT_PART.search(message) else _TOO_LONG}: {message}"
        error: dict = {"type": self.error_type(err), "message": message}
        if err.code == THREAD_UNSUPPORTED:
            error["details"] = {"error_code": THREAD_UNSUPPORTED}  # what the anthropic SDK reads to stop threading
        return orjson.dumps({"type": "error", "error": error})

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        return b"event: error\ndata: " + self.error_body(err) + b"\n\n"

    def stream_over(self, tail: bytes) -> bool:
        return tail.endswith(b'{"type":"message_stop"}\n\n') or b"event: error\n" in tail

    def error_headers(self, err: GatewayError) -> dict[str, str]:
        headers = super().error_headers(err)
        if self.error_status(err) in (429, 529) and "retry-after" not in headers:
            headers["retry-after"] = "1"
        return headers

    def ratelimit_headers(self, figures: list[LimitFigure]) -> dict[str, str]:
        out: dict[str, str] = {}
        now = time.time()
        for f in figures:
            reset = datetime.fromtimestamp(now + f.reset_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            out[f"anthropic-ratelimit-{f.kind}-limit"] = str(f.limit)
            out[f"anthropic-ratelimit-{f.kind}-remaining"] = str(f.remaining)
            out[f"anthropic-ratelimit-{f.kind}-reset"] = reset
        return out

    def replay(self, body: dict, include_usage: bool) -> list[bytes]:
        return message_events(body)

    def served_again(self, body: dict, suffix: str, semantic: bool, asked: dict | None = None) -> None:
        body["id"] = f"msg_cache_{suffix}"
        fresh_message_ids(body)  # its tool_use blocks'
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return
        output = int(usage.get("output_tokens") or 0)
        # Anthropic counts a prompt read from its cache as cache_read_input_tokens, not input_tokens.
        read = 0 if semantic else input_tokens(usage)
        body["usage"] = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": read,
                         "output_tokens": output}

    def answer_text(self, body: dict) -> str | None:
        texts = [b.get("text") for b in body.get("content") or () if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(t for t in texts if isinstance(t, str)) or None


class CountTokensProtocol(MessagesProtocol):
    """/v1/messages/count_tokens: the same body, no output; answered {"input_tokens": N}."""

    value = "messages/count_tokens"
    operation = "count_tokens"
    streams = False
    relay = "openai"
    needs_max_tokens = False

    def prompt_size(self, body: dict) -> PromptSize:
        return PromptSize(max(1, self.prompt_chars(body) // 4), None, 1, generates=False)

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        return None

    def usage(self, obj: dict) -> Usage | None:
        tokens = obj.get("input_tokens")
        return Usage(tokens, 0) if isinstance(tokens, int) else None


class MessageAssembler:
    """Rebuilds a Message from its stream's events (for the cache and content capture)."""

    def __init__(self) -> None:
        self.message: dict = {}
        self.blocks: dict[int, dict] = {}
        self.partial_json: dict[int, list[str]] = {}
        self.broken = False
        self.stopped = False

    def feed(self, data: bytes) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.broken = True
            return
        if not isinstance(event, dict):
            self.broken = True
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.message = dict(event["message"])
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[int(event.get("index", 0))] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            i, delta = int(event.get("index", 0)), event.get("delta") or {}
            block = self.blocks.setdefault(i, {"type": "text", "text": ""})
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + (delta.get("text") or "")
            elif dtype == "input_json_delta":
                self.partial_json.setdefault(i, []).append(delta.get("partial_json") or "")
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + (delta.get("thinking") or "")
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + (delta.get("signature") or "")
            elif dtype == "citations_delta":
                block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence", "stop_details", "container"):  # Anthropic's, at the end
                if key in delta and (delta[key] is not None or key.startswith("stop_")):
                    self.message[key] = delta[key]
            if isinstance(event.get("usage"), dict):
                self.message.setdefault("usage", {}).update(
                    {k: v for k, v in event["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            self.broken = True

    def finish_reasons(self) -> list[str | None]:
        return [self.message.get("stop_reason")]

    def result(self) -> dict:
        content = []
        for i, block in sorted(self.blocks.items()):
            if i in self.partial_json:
                text = "".join(self.partial_json[i])
                try:
                    block["input"] = orjson.loads(text) if text else {}
                except orjson.JSONDecodeError:
                    self.broken = True
            content.append(block)
        return {**self.message, "content": content}


def message_events(body: dict) -> list[bytes]:
    """The Messages stream a whole Message stands for: message_start, each block's start/deltas/stop,
    message_delta (stop reason, usage), message_stop."""
    usage = dict(body.get("usage") or {})
    start = {k: v for k, v in body.items()
             if k not in ("content", "stop_reason", "stop_sequence", "stop_details", "usage")}
    start.update({"content": [], "stop_reason": None, "stop_sequence": None,
                  "usage": {**usage, "output_tokens": min(1, int(usage.get("output_tokens") or 0))}})
    events = [event("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(body.get("content") or ()):
        btype = block.get("type")
        if btype == "text":
            events.append(event("content_block_start", {"type": "content_block_start", "index": i,
                                                        "content_block": {"type": "text", "text": ""}}))
            if block.get("text"):
                events.append(event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                            "delta": {"type": "text_delta", "text": block["text"]}}))
            for citation in block.get("citations") or ():  # as Anthropic streams them, one event each
                events.append(event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                            "delta": {"type": "citations_delta", "citation": citation}}))
        elif btype == "tool_use":
            events.append(event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}}))
            events.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": orjson.dumps(block.get("input") or {}).decode()}}))
        elif btype == "thinking":
            events.append(event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "thinking", "thinking": "", "signature": ""}}))
            events.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "thinking_delta", "thinking": block.get("thinking") or ""}}))
            if block.get("signature"):
                events.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "signature_delta", "signature": block["signature"]}}))
        else:  # redacted thinking and anything else: the whole block at its start
            events.append(event("content_block_start", {"type": "content_block_start", "index": i,
                                                        "content_block": block}))
        events.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
    # How it ended, as Anthropic says it at the end: the SDK takes stop_details (a refusal's category) from here, not
    # from message_start, and a container's state where one was used.
    delta = {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")}
    delta.update({k: body[k] for k in ("stop_details", "container") if body.get(k) is not None})
    events.append(event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(event("message_stop", {"type": "message_stop"}))
    return events


def input_tokens(usage: dict) -> int:
    """All the prompt's tokens: Anthropic's input_tokens leave out those read from or written to its cache."""
    return sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                 "cache_creation_input_tokens"))


def block_chars(content: object) -> int:
    if isinstance(content, str):
        return len(content)
    chars = 0
    for b in content if isinstance(content, list) else ():
        btype = b.get("type")
        if btype == "text" and isinstance(b.get("text"), str):
            chars += len(b["text"])
        elif btype == "tool_use":
            chars += len(orjson.dumps(b.get("input") or {}))
        elif btype == "tool_result":
            chars += block_chars(b.get("content") or "")
        elif btype == "thinking" and isinstance(b.get("thinking"), str):
            chars += len(b["thinking"])
    return chars


def _check_blocks(content: object, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}: Input should be a string or a list of content blocks", param=where)
    for j, block in enumerate(content):
        at = f"{where}.{j}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{at}: Input should be an object with a string 'type'", param=at)
        btype = block["type"]
        if btype == "text" and not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{at}.text: Input should be a valid string", param=f"{at}.text")
        if btype == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
            raise InvalidRequest(f"{at}: a tool_use block needs a string 'id' and 'name'", param=at)
        if btype == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise InvalidRequest(f"{at}.tool_use_id: Field required", param=f"{at}.tool_use_id")
            inner = block.get("content")
            if inner is not None:
                _check_blocks(inner, f"{at}.content")
        if btype == "image" and not isinstance(block.get("source"), dict):
            raise InvalidRequest(f"{at}.source: Field required", param=f"{at}.source")


MESSAGES = MessagesProtocol()
COUNT_TOKENS = CountTokensProtocol()
