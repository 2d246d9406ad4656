"""The interface every client API implements, and the parsed request the core carries.

A client protocol owns what its API decides; the core (admission, cache, routing, dispatch, relay, the HTTP
front) asks it instead of branching on the API. See the package docstring for the contract.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from app.errors import GatewayError, InvalidRequest

if TYPE_CHECKING:
    from app.config import BackendConfig
    from app.record import Usage


class Assembler(Protocol):
    """Rebuilds a stream's JSON answer from its events' data, fed in order."""

    broken: bool

    def feed(self, data: bytes) -> None: ...

    def finish_reasons(self) -> list[str | None]: ...

    def result(self) -> dict: ...

# About four characters a token for English text. Every consumer of a prompt's size (admission's
# reservation, routing's prediction, the latency model) reads the one estimate built from it.
CHARS_PER_TOKEN = 4
# orjson serialises at most 254 levels; a deeper body parses but could never be sent upstream (nor
# keyed for the cache), so it is refused at parse time, before any slot is taken.
MAX_DEPTH = 128


class EventKind(enum.IntFlag):
    """What one stream event means to the core (a protocol's `classify`); an event may be several."""

    NONE = 0
    CONTENT = 1  # carries generated content: the first such event is the protocol's TTFT
    USAGE = 2  # carries token counts
    FINISH = 4  # carries a finish (stop) reason
    ERROR = 8  # an error event: the stream is over and failed
    END = 16  # the protocol's terminal event ([DONE], message_stop): the stream is complete


@dataclass(frozen=True, slots=True)
class PromptSize:
    """One request's size as every stage reads it (an estimate from its length, never usage)."""

    prompt_tokens: int  # estimated from the prompt's characters
    output_cap: int | None  # the client's output limit per choice (None: none given, or -1 "no limit")
    choices: int  # how many answers the request asks for
    exact_output: bool = False  # the output is forced to exactly `output_cap` tokens (ignore_eos / min_tokens)
    generates: bool = True  # False for embeddings: no output to reserve or predict

    def reservation(self, expected_output: int) -> int:
        """Tokens admission reserves: the prompt plus the output cap (or the alias's expectation) per choice."""
        if not self.generates:
            return self.prompt_tokens
        return self.prompt_tokens + (self.output_cap or expected_output) * self.choices


@dataclass(frozen=True, slots=True)
class LimitFigure:
    """The tightest limit of one kind ("requests" or "tokens") that applies to a call, for its headers."""

    kind: str
    limit: int
    remaining: int
    reset_s: float


@dataclass(frozen=True, slots=True)
class Upstream:
    """How one attempt calls one backend: the path, the body, extra headers, and what turns the backend's
    answer into this API's answer (None: it already is one, the request passed through)."""

    path: str
    body: bytes
    headers: dict[str, str]
    adapt: Callable[[Any], Any] | None = None


@dataclass(slots=True)
class ParsedRequest:
    """A client's body, parsed just enough to act on; everything else passes through verbatim."""

    protocol: ClientProtocol
    alias: str
    body: dict
    stream: bool
    # Whether the client asked for the final usage chunk (OpenAI's stream_options.include_usage).
    client_wants_usage: bool
    size: PromptSize = field(default_factory=lambda: PromptSize(1, None, 1))
    headers: dict[str, str] = field(default_factory=dict)  # client headers a native backend must see

    def upstream_body(self, backend_model: str, request_usage: bool) -> bytes:
        """The body for a backend that speaks this API: the alias mapped to its model name."""
        return self.protocol.upstream_body(self, backend_model, request_usage)

    def upstream_stream_body(self, backend_model: str) -> bytes:
        """The body of a JSON client's call streamed upstream (with usage), to be assembled back."""
        return orjson.dumps({**self.body, "model": backend_model, "stream": True,
                             "stream_options": {"include_usage": True}})


class ClientProtocol:
    """One client API. Subclasses set the class attributes and override what their API does differently."""

    name = ""  # the API's name in config (`apis:`) and logs: chat, completions, embeddings, messages
    value = ""  # the path under /v1/ (also what a backend that speaks it natively is called on)
    operation = ""  # gen_ai.operation.name
    streams = True  # whether `stream: true` is allowed
    # Whether a JSON client's call may be streamed upstream and assembled back (app.dispatch).
    assembles = False
    # How its streams are relayed: "openai" (`data:` chunks ending in [DONE], usage hidden unless asked for)
    # or "events" (named events relayed whole, classified by `classify`).
    relay = "openai"
    # The relay's stream format (app.relay.format.StreamFormat): how its events frame and classify.
    sse: Any = None
    # Bytes every terminal event of the stream contains: a cheap test before `classify` (b"": always classify).
    end_marker = b""
    # Whether its turns are stored and chained by the gateway (the Responses API: app.conversations).
    stateful = False
    # The header this API's clients read a call's id from, where it is not x-request-id (which every answer carries):
    # the anthropic SDK's `_request_id` and errors' `request_id` read Anthropic's `request-id`.
    id_header: str | None = None

    # How this API words the three checks every request gets (Anthropic's SDK-style wording differs).
    model_required = "'model' is required and must be a non-empty string"
    stream_not_bool = "'stream' must be a boolean"
    stream_unsupported = "'stream' is not supported on /v1/{api}"

    def __repr__(self) -> str:
        return f"<protocol {self.name}>"

    # --- the request ----------------------------------------------------------------------------
    def parse(self, raw: bytes) -> ParsedRequest:
        """Validate the fields the gateway acts on; raise InvalidRequest (this API's 400) naming the bad one."""
        body = load_object(raw)
        alias = body.get("model")
        if not isinstance(alias, str) or not alias:
            raise InvalidRequest(self.model_required, param="model")
        stream = body.get("stream", False)
        if stream is None:
            stream = False
        if not isinstance(stream, bool):
            raise InvalidRequest(self.stream_not_bool, param="stream")
        if stream and not self.streams:
            raise InvalidRequest(self.stream_unsupported.format(api=self.value), param="stream")
        wants_usage = self.check(body, stream)
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # cheap bound first: deep bodies are rare
            check_depth(body)
        req = ParsedRequest(self, alias, body, stream, wants_usage)
        req.size = self.prompt_size(body)
        return req

    def check(self, body: dict, stream: bool) -> bool:
        """This API's own fields; returns whether the client asked for stream usage."""
        return False

    def prompt_chars(self, body: dict) -> int:
        """The characters of the prompt's text (the size estimate's input)."""
        return 0

    def output_cap(self, body: dict) -> int | None:
        return None

    def choices(self, body: dict) -> int:
        return 1

    def prompt_size(self, body: dict) -> PromptSize:
        """The one size estimate every stage reads (admission, routing, prediction)."""
        cap = self.output_cap(body)
        exact = bool(cap) and (body.get("ignore_eos") is True or body.get("min_tokens") == cap)
        return PromptSize(max(1, self.prompt_chars(body) // CHARS_PER_TOKEN), cap, self.choices(body), exact)

    def stops(self, body: dict) -> object:
        """The request's stop sequences, if any (an answer's length depends on them)."""
        return body.get("stop")

    def prefix_text(self, body: dict) -> str | None:
        """The prompt as one canonical text for prefix-cache affinity (None: not routed by prefix)."""
        return None

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        """For the semantic cache: (the last user turn's plain text, the earlier turns as messages with a
        `role` and plain-text `content` where they have one), or None when the request is not eligible."""
        return None

    def user_texts(self, body: dict) -> list[str]:
        """The text of every user turn, oldest first, including turns `cache_turns` refuses (images, tool
        calls and results, thinking): what the cache's category classifier reads. Parts without text are
        skipped."""
        return user_turn_texts(body.get("messages"))

    def credentials(self, headers: Mapping[str, str]) -> str | None:
        """The Authorization value the gateway checks (Bearer <key>), from this API's auth headers."""
        return headers.get("authorization")

    def pass_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """Client headers a backend that speaks this API natively must see."""
        return {}

    def upstream_body(self, req: ParsedRequest, backend_model: str, request_usage: bool) -> bytes:
        body = req.body
        body["model"] = backend_model
        return orjson.dumps(body)

    def upstream(self, req: ParsedRequest, backend: BackendConfig, streamed: bool) -> Upstream:
        """How to call this backend for the request: natively (its body unchanged apart from `model`), or,
        where a protocol translates, in an API the backend speaks. `streamed`: the call is streamed."""
        if req.stream or not streamed:
            body = req.upstream_body(backend.model, backend.stream_usage)
        else:
            body = req.upstream_stream_body(backend.model)
        return Upstream(self.value, body, req.headers)

    # --- the stream -----------------------------------------------------------------------------
    def classify(self, data: bytes) -> EventKind:
        """What an upstream event's data means (cheap byte tests; exact where they cannot be)."""
        return EventKind.NONE

    def usage(self, obj: dict) -> Usage | None:
        """The token counts in an answer or a usage event, in the gateway's terms."""
        return None

    def stream_usage(self, data: bytes, so_far: Usage | None) -> Usage | None:
        """A stream's usage after this usage event (events may report parts of it)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return so_far
        return (self.usage(obj) if isinstance(obj, dict) else None) or so_far

    def stop_reason(self, data: bytes) -> str | None:
        """The finish (stop) reason a FINISH event carries."""
        return None

    def finish_reasons(self, body: dict) -> list[str]:
        """The finish (stop) reasons of a whole answer, one per choice."""
        return []

    def cache_finish_reasons(self, body: dict) -> list[str | None]:
        """Each answer's finish reason in OpenAI's words (stop, length, tool_calls, content_filter), which the
        cache policy's `finish_reasons` names; None for an answer without one."""
        return []

    def assembler(self) -> Assembler:
        """A fresh assembler of this API's stream into the JSON answer it stands for (cache fill, capture,
        a JSON client served from an upstream stream)."""
        raise NotImplementedError(f"{self.name} answers are not streamed")

    # --- answers the gateway makes ----------------------------------------------------------------
    def error_body(self, err: GatewayError) -> bytes:
        """The error as this API's JSON body."""
        return err.json()

    def error_status(self, err: GatewayError) -> int:
        """The HTTP status this API gives the error."""
        return err.status

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        """The error as this API's stream event: what a stream that fails midway ends with. `after`: the last
        bytes with events the client got (for an API that numbers its events, to continue the count)."""
        return b"data: " + err.json() + b"\n\n"

    def stream_over(self, tail: bytes) -> bool:
        """Whether the last bytes sent end the stream (its terminal event, or an error event)."""
        return tail.endswith(b"data: [DONE]\n\n") or tail.startswith(b'data: {"error"')

    def error_headers(self, err: GatewayError) -> dict[str, str]:
        """Headers this API's clients read on an error (retry hints)."""
        headers = err.headers
        if "x-should-retry" not in headers:
            retry = err.should_retry
            headers["x-should-retry"] = "true" if retry else "false"
            if retry and "retry-after" not in headers:
                headers["retry-after"] = "1"
        return headers

    def ratelimit_headers(self, figures: list[LimitFigure]) -> dict[str, str]:
        """The rate-limit state as this API's clients read it, on answers and on 429s."""
        return {}

    def replay(self, body: dict, include_usage: bool) -> list[bytes]:
        """The stream events a stored JSON answer would have been sent as, terminal event included."""
        raise NotImplementedError(self.name)

    def served_again(self, body: dict, suffix: str, semantic: bool, asked: dict | None = None) -> None:
        """A stored answer made honest for this request, in place: a fresh id (ending in `suffix`), and its
        usage: an exact hit's prompt is all cached; a semantic hit counts only its answer (no model read
        this prompt, and its count is not guessed). `asked` is this request's body, for an API whose answer
        echoes request fields that the cache key leaves out."""

    def answer_text(self, body: dict) -> str | None:
        """The first answer's text, for content capture."""
        return None


def user_turn_texts(turns: object) -> list[str]:
    """The text parts of the `role: user` turns in a list of messages (chat, Messages, Responses items)."""
    if not isinstance(turns, list):
        return []
    out = []
    for m in turns:
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(content, str) and content:
            out.append(content)
    return out


def load_object(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", code="invalid_json")
    return body


def check_depth(body: dict) -> None:
    stack: list[tuple[object, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"request body is nested more than {MAX_DEPTH} levels deep", code="invalid_json")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def positive_int(value: object) -> int | None:
    """An integer above zero, else None (-1 is llama.cpp's "no limit", not a size)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def reset_seconds(reset_s: float) -> float:
    return max(0.0, math.ceil(reset_s * 1000) / 1000)
