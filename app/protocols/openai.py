"""What OpenAI's three APIs (chat, completions, embeddings) share: stream_options, n, max_tokens, usage in
prompt/completion tokens, `data:`-only streams that end with [DONE], and the x-ratelimit-* headers."""

from __future__ import annotations

import math
import re
import time
from typing import Any

from app.errors import GatewayError, InvalidRequest, sse_error_event
from app.protocols.base import ClientProtocol, EventKind, LimitFigure, is_int, positive_int
from app.protocols.fresh_ids import fresh_chat_ids
from app.record import Usage

_DONE = b"[DONE]"
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([^"]+)"')
MODEL_FIELD = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
_NONE: list[bytes] = []
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
# Generated text, a tool call or reasoning, non-empty (llama.cpp opens with an empty role delta).
_CONTENT = re.compile(rb'"(?:content|text|reasoning_content|arguments)"\s*:\s*"[^"]|"tool_calls"\s*:\s*\[\{')


class OpenAISse:
    """How OpenAI's chat and text completions streams frame and classify for the relay
    (app.relay.format.StreamFormat): `data: {...}` events ending with `data: [DONE]`. The same rules serve
    `OpenAIProtocol.classify`."""

    done = b"data: [DONE]\n\n"
    model_first = True

    def frame(self, data: bytes) -> bytes:
        return b"data: " + data + b"\n\n"

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        return sse_error_event(err)

    def is_error(self, data: bytes) -> bool:
        return data.startswith(b'{"error"')

    def has_usage(self, data: bytes) -> bool:
        # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
        return data.find(b'"usage"') != -1

    def finish_reasons(self, data: bytes) -> list[bytes]:
        # Every chunk of a stream but the last says `"finish_reason":null`, which cannot match: such a
        # chunk (one choice: the key's first occurrence is its last) skips the regex, ~3,100 instructions
        # a call even so. A slice and rfind are the cheapest checks (callgrind: startswith and find with
        # a start offset parse their arguments the slow way, ~1,200 each).
        at = data.find(b'"finish_reason"')
        if at == -1 or data[at + 15:at + 20] == b":null" and data.rfind(b'"finish_reason"') == at:
            return _NONE
        return _FINISH_REASON.findall(data, at)

    def model(self, data: bytes) -> re.Match[bytes] | None:
        return MODEL_FIELD.search(data)

    def is_content(self, data: bytes) -> bool:
        return True  # the first data event, as the latency model has always measured OpenAI streams


OPENAI_SSE = OpenAISse()


def duration(seconds: float) -> str:
    """A Go-style duration as OpenAI's reset headers carry it: 17ms, 1s, 1.5s, 6m0s, 1h2m3s."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    seconds = math.ceil(seconds * 1000) / 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    s = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{s}"
    if minutes:
        return f"{int(minutes)}m{s}"
    return s


class OpenAIProtocol(ClientProtocol):
    sse: Any = OPENAI_SSE

    def check(self, body: dict, stream: bool) -> bool:
        wants_usage = False
        opts = body.get("stream_options")
        if opts is not None:
            if not isinstance(opts, dict):
                raise InvalidRequest("'stream_options' must be an object", param="stream_options")
            if not stream:
                raise InvalidRequest("'stream_options' is only allowed when 'stream' is true", param="stream_options")
            wants_usage = opts.get("include_usage") is True
        self.check_shape(body)
        n = body.get("n")
        if n is not None and (not is_int(n) or n < 1):
            raise InvalidRequest("'n' must be a positive integer", param="n")
        # Only the type is checked: the range is the backend's to judge (llama.cpp takes -1 for "no limit").
        for name in ("max_tokens", "max_completion_tokens"):
            value = body.get(name)
            if value is not None and not is_int(value):
                raise InvalidRequest(f"'{name}' must be an integer", param=name)
        return wants_usage

    def check_shape(self, body: dict) -> None:
        """The API's own required fields."""

    def output_cap(self, body: dict) -> int | None:
        # max_completion_tokens replaced max_tokens (OpenAI deprecated the latter): it wins when both are given.
        cap = body.get("max_completion_tokens")
        return positive_int(cap if cap is not None else body.get("max_tokens"))

    def choices(self, body: dict) -> int:
        n = body.get("n")
        return n if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 128 else 1

    def upstream_body(self, req, backend_model: str, request_usage: bool) -> bytes:
        body = req.body
        body["model"] = backend_model
        if req.stream and request_usage and not req.client_wants_usage:
            opts = body.get("stream_options")
            body["stream_options"] = {**opts, "include_usage": True} if isinstance(opts, dict) else {"include_usage": True}
        return super().upstream_body(req, backend_model, False)

    def classify(self, data: bytes) -> EventKind:
        if data == _DONE:
            return EventKind.END
        if OPENAI_SSE.is_error(data):
            return EventKind.ERROR
        kind = EventKind.NONE
        if _CONTENT.search(data):
            kind |= EventKind.CONTENT
        if OPENAI_SSE.finish_reasons(data):
            kind |= EventKind.FINISH
        if OPENAI_SSE.has_usage(data) and _USAGE.search(data):
            kind |= EventKind.USAGE
        return kind

    def usage(self, obj: dict) -> Usage | None:
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            return None
        return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))

    def finish_reasons(self, body: dict) -> list[str]:
        return [c["finish_reason"] for c in body.get("choices") or ()
                if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)]

    def cache_finish_reasons(self, body: dict) -> list[str | None]:
        return [c.get("finish_reason") if isinstance(c, dict) else None for c in body.get("choices") or ()]

    def ratelimit_headers(self, figures: list[LimitFigure]) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in figures:
            out[f"x-ratelimit-limit-{f.kind}"] = str(f.limit)
            out[f"x-ratelimit-remaining-{f.kind}"] = str(f.remaining)
            out[f"x-ratelimit-reset-{f.kind}"] = duration(f.reset_s)
        return out

    id_prefix = "cmpl"

    def served_again(self, body: dict, suffix: str, semantic: bool, asked: dict | None = None) -> None:
        body["id"] = f"{self.id_prefix}-cache-{suffix}"
        body["created"] = int(time.time())
        fresh_chat_ids(body)  # its tool calls' ids (completions have none)
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return
        if semantic:
            completion = int(usage.get("completion_tokens") or 0)
            body["usage"] = {"prompt_tokens": 0, "completion_tokens": completion, "total_tokens": completion,
                             "prompt_tokens_details": {"cached_tokens": 0}}
            if isinstance(usage.get("completion_tokens_details"), dict):
                # The answer's own breakdown (reasoning_tokens, ...) is this answer's as much as its count.
                body["usage"]["completion_tokens_details"] = usage["completion_tokens_details"]
        else:
            usage["prompt_tokens_details"] = {**(usage.get("prompt_tokens_details") or {}),
                                              "cached_tokens": usage.get("prompt_tokens", 0)}


def prompt_chars(value: object) -> int:
    """A `prompt` or `input` field's characters: strings, or token ids (one token each: four characters)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) if isinstance(v, str) else len(v) * 4 if isinstance(v, list) else 4 for v in value)
    return 0


def is_prompt(value: object) -> bool:
    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    if all(isinstance(v, str) for v in value):
        return True
    if all(is_int(v) for v in value):
        return True
    return all(isinstance(v, list) and v and all(is_int(t) for t in v) for v in value)
