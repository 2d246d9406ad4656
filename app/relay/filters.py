"""The relay's filters, after Envoy's encoder filters: each job the relay does besides framing is one filter.

A filter sees every upstream data event in chain order and returns what goes on down the chain:

    on_data(data) -> data | None   the event, changed or not; None drops it (or holds it back)
    on_end(result)                 once, when the relay is over, with what it came to (app.relay.result)

Two optional methods, looked up once per chain, never per event: `flush() -> data | None` gives back an
event the filter held when the stream completes (before the end event), and `incomplete() -> str | None`
says why a stream that ended without its end event ([DONE]) is not complete after all. The facts a
filter finds (the model's name, usage, finish reasons) it writes into its own field of the relay's
result, and nowhere else. A chain is a tuple built once per request, holding only the filters that
have work to do for it (no cache fill when nothing is stored, no capture while content capture is off).
How an event classifies (usage? finish? the model?) is the stream format's to say (app.relay.format).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import orjson

from app.protocols import ClientProtocol, EventKind
from app.protocols.base import Assembler
from app.record import Usage
from app.relay.format import StreamFormat
from app.relay.result import RelayResult
from app.upstream.adapters import NO_REPORT, BackendReport

# Every this many data events, a stream's recent decode speed is reported (an early TPOT sample).
PROGRESS_EVENTS = 8


class Filter(Protocol):
    def on_data(self, data: bytes) -> bytes | None: ...

    def on_end(self, result: RelayResult) -> None: ...


class ModelName:
    """Notes the model the backend names in its first event; renames it in every event to the alias the
    client asked for (as a cache hit does), not whatever the backend calls it (llama.cpp without --alias:
    its GGUF path)."""

    __slots__ = ("_alias", "_format", "_rename", "_result", "_seen")

    def __init__(self, result: RelayResult, alias: str | None, fmt: StreamFormat) -> None:
        self._result, self._alias, self._format = result, alias, fmt
        self._rename: tuple[bytes, bytes] | None = None
        self._seen = False

    def on_data(self, data: bytes) -> bytes | None:
        if not self._seen:
            m = self._format.model(data)
            self._seen = m is not None or self._format.model_first
            name = self._result.response_model = m.group(1).decode() if m else None
            if m and self._alias is not None and name != self._alias:
                self._rename = (m.group(0), b'"model":' + orjson.dumps(self._alias))
        return data if self._rename is None else data.replace(*self._rename)

    def on_end(self, result: RelayResult) -> None:
        pass


class BackendReports:
    """Hands the backend's own report in a chunk (llama.cpp's timings, cached tokens) to `report`, as the
    backend's adapter reads it (the attempt's owner keeps it: app.dispatch.attempt)."""

    __slots__ = ("_adapter", "_report")

    def __init__(self, report: Callable[[BackendReport], None], adapter) -> None:
        self._report, self._adapter = report, adapter

    def on_data(self, data: bytes) -> bytes | None:
        # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
        if data.find(b'"timings"') != -1 or data.find(b'"cached_tokens"') != -1:
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                return data
            self._report(self._adapter.report_from_body(obj) if isinstance(obj, dict) else NO_REPORT)
        return data

    def on_end(self, result: RelayResult) -> None:
        pass


class Progress:
    """Reports (events so far, now) every PROGRESS_EVENTS data events: the latency model's early TPOT."""

    __slots__ = ("_report", "events")

    def __init__(self, report: Callable[[int, float], None]) -> None:
        self.events = 0
        self._report = report

    def on_data(self, data: bytes) -> bytes | None:
        self.events += 1
        if self.events % PROGRESS_EVENTS == 0:
            self._report(self.events, time.perf_counter())
        return data

    def on_end(self, result: RelayResult) -> None:
        pass


class CacheFill:
    """Assembles the streamed answer; hands it to `save` only when the stream ended complete."""

    __slots__ = ("_save", "assembler")

    def __init__(self, assembler: Assembler, save: Callable[[dict], None]) -> None:
        self.assembler = assembler  # the client protocol's (app.protocols: ClientProtocol.assembler)
        self._save = save

    def on_data(self, data: bytes) -> bytes | None:
        self.assembler.feed(data)
        return data

    def on_end(self, result: RelayResult) -> None:
        if result.complete and not self.assembler.broken:
            self._save(self.assembler.result())


class CaptureAnswer:
    """Content capture for a stream: the answer as the client got it, in `answer` once the relay ended
    (complete or not). Only in the chain while content capture is on."""

    __slots__ = ("answer", "assembler")

    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler
        self.answer: dict | None = None

    def on_data(self, data: bytes) -> bytes | None:
        self.assembler.feed(data)
        return data

    def on_end(self, result: RelayResult) -> None:
        self.answer = self.assembler.result()


class FinishReasons:
    """Collects each choice's finish reason; a stream the backend closed without [DONE] is complete only
    if all `choices` finished (n > 1 asks for several)."""

    __slots__ = ("_choices", "_find", "_reasons")

    def __init__(self, result: RelayResult, fmt: StreamFormat, choices: int = 1) -> None:
        self._reasons, self._find, self._choices = result.finish_reasons, fmt.finish_reasons, choices

    def on_data(self, data: bytes) -> bytes | None:
        reasons = self._find(data)
        if reasons:
            self._reasons.extend(r.decode() for r in reasons)
        return data

    def incomplete(self) -> str | None:
        return "ended the stream before it was complete" if len(self._reasons) < self._choices else None

    def on_end(self, result: RelayResult) -> None:
        pass


class UsageFilter:
    """Records the usage report; hides it (or its whole chunk) from a client that did not ask for it.

    A client that did not ask for usage still gets llama.cpp's `timings`, which ride on the usage chunk it
    must not see: the finishing chunk is held back until that chunk (or anything else) follows. A client
    that asked gets `extension()` (the gateway's timing summary) in the usage, when given. Which chunk
    finishes is what FinishReasons, earlier in the chain, just counted: no second scan per event.
    """

    __slots__ = ("_extension", "_has_usage", "_held", "_reasons", "_result", "_seen", "_wanted")

    def __init__(self, result: RelayResult, fmt: StreamFormat, client_wants_usage: bool,
                 extension: Callable[[], dict] | None = None) -> None:
        self._result, self._has_usage, self._wanted, self._extension = result, fmt.has_usage, client_wants_usage, extension
        self._reasons = result.finish_reasons
        self._seen = 0  # finish reasons counted when the last event passed
        self._held: bytes | None = None

    def on_data(self, data: bytes) -> bytes | None:
        held = self._held
        seen, self._seen = self._seen, len(self._reasons)
        if self._has_usage(data):
            hidden = data
            shown = self._take_usage(data)
            if shown is None:
                if held is None:
                    return None
                self._held = None
                return _with_timings(held, hidden)
            data = shown
        if self._seen != seen and not self._wanted and data.find(b'"timings"') == -1:
            self._held = data  # until the next event: llama.cpp sends the usage chunk right after
            return held
        if held is not None:
            self._held = None
            return held + b"\n\ndata: " + data
        return data

    def flush(self) -> bytes | None:
        held, self._held = self._held, None
        return held

    def on_end(self, result: RelayResult) -> None:
        pass

    def _take_usage(self, data: bytes) -> bytes | None:
        """The SSE data to send: none, one payload, or two joined by an event break (a split usage chunk)."""
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return data
        usage = chunk.get("usage") if isinstance(chunk, dict) else None
        if not isinstance(usage, dict):
            return data
        self._result.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        if self._wanted:
            if self._extension is not None:
                usage["slipstream_timing"] = self._extension()
            if not chunk.get("choices"):
                return data if self._extension is None else orjson.dumps(chunk)
            # Usage riding on a choice chunk (llama.cpp's /v1/completions): split it off into its own
            # chunk with `choices: []`, as OpenAI sends it and SDKs expect.
            del chunk["usage"]
            tail = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
            return orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps({**tail, "choices": [], "usage": usage})
        if not chunk.get("choices"):
            return None
        del chunk["usage"]
        return orjson.dumps(chunk)


def _with_timings(chunk: bytes, usage_chunk: bytes) -> bytes:
    """The finishing chunk with the backend's `timings` from the usage chunk the client does not see."""
    if usage_chunk.find(b'"timings"') == -1:
        return chunk
    try:
        timings = orjson.loads(usage_chunk).get("timings")
        obj = orjson.loads(chunk)
    except (orjson.JSONDecodeError, AttributeError):
        return chunk
    if not isinstance(obj, dict) or timings is None:
        return chunk
    obj["timings"] = timings
    return orjson.dumps(obj)


class StreamUsage:
    """Usage for a stream of named events (Anthropic Messages): each usage event, folded into what the
    stream reported before, as the client protocol reads it (`stream_usage`); nothing is hidden."""

    __slots__ = ("_protocol", "_result")

    def __init__(self, result: RelayResult, protocol: ClientProtocol) -> None:
        self._result, self._protocol = result, protocol

    def on_data(self, data: bytes) -> bytes | None:
        if data.find(b'"usage"') != -1 and self._protocol.classify(data) & EventKind.USAGE:
            self._result.usage = self._protocol.stream_usage(data, self._result.usage)
        return data

    def on_end(self, result: RelayResult) -> None:
        pass


class EndEvent:
    """A protocol whose stream ends with a named event (Messages' message_stop), not [DONE]: the upstream's
    end event is held here and sent by the loop as the format's `done` once the stream is over; a stream
    that closed without it is not complete."""

    __slots__ = ("_marker", "_pass", "_protocol", "_seen")

    def __init__(self, protocol: ClientProtocol) -> None:
        # The protocol's `end_marker`: bytes every end event contains, a cheap test before it is classified.
        self._protocol, self._marker, self._seen = protocol, protocol.end_marker, False
        # A format without a `done` of its own ends with the upstream's end event itself, passed on: Responses'
        # response.completed carries the whole answer and its usage.
        self._pass = not (protocol.sse is not None and protocol.sse.done)

    def on_data(self, data: bytes) -> bytes | None:
        if self._marker in data and self._protocol.classify(data) & EventKind.END:
            self._seen = True
            return data if self._pass else None
        return data

    def incomplete(self) -> str | None:
        return None if self._seen else "ended the stream before its end event"

    def on_end(self, result: RelayResult) -> None:
        pass
