"""Relay an upstream event stream to the client, event by event, as it arrives.

The relay is also where a stream's truth is decided: a stream that breaks before [DONE] ends
with an error event (the openai SDK raises it), never a clean-looking truncation.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.errors import GatewayError, UpstreamProtocolError, sse_error_event
from app.record import Outcome, RequestRecord, Usage
from app.upstream.adapters import NO_REPORT, BackendReport
from app.upstream.attempt import EventStream, redact
from app.upstream.sse import DONE, event_data

_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([^"]+)"')
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
MODEL_FIELD = _MODEL
_DONE_EVENT = b"data: [DONE]\n\n"
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no"}


class Observer(Protocol):
    """A relay side job (cache assembly, progress, ...): sees each data event, then how the stream ended."""

    def on_event(self, data: bytes) -> None: ...

    def on_end(self, complete: bool) -> None: ...


async def relay_events(
    stream: EventStream, client_wants_usage: bool, record: RequestRecord,
    on_report: Callable[[BackendReport], None] | None = None, observers: tuple[Observer, ...] = (), usage_extension: Callable[[], dict] | None = None, choices: int = 1,
    alias: str | None = None,
) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes, ending with [DONE] or an error event, never silently.

    Observers see every data chunk as the backend sent it and, once the relay ends, whether the stream
    was complete. `usage_extension`, when given, adds its result to the usage chunk as `slipstream_timing`.
    `choices` is how many finish reasons make a stream complete when a backend omits [DONE] (n > 1).
    Closing the upstream is not the relay's job: the attempt's owner does it (app.dispatch.attempt).
    `on_report` receives the backend's own reports found in chunks (llama.cpp timings, cached tokens).
    `alias`, when given, replaces the backend's model name in every chunk (the name the client asked for).
    """
    complete = False
    rename: tuple[bytes, bytes] | None = None
    # A client that did not ask for usage still gets llama.cpp's `timings`, which ride on the usage chunk
    # it must not see: the finishing chunk is held back until that chunk (or anything else) follows.
    held: bytes | None = None
    try:
        async for batch in stream.batches():
            # Events that arrived in one read leave in one write: as soon as they exist, no later.
            out = []
            for event in batch:
                data = event_data(event)
                if data is None:
                    out.append(event + b"\n\n")  # comments and keep-alives pass through
                    continue
                if data == DONE:
                    complete = True
                    break
                if not record.first_token:
                    record.first_token = time.perf_counter()
                    m = _MODEL.search(data)
                    record.response_model = m.group(1).decode() if m else None
                    if m and alias is not None and record.response_model != alias:
                        rename = (m.group(0), b'"model":' + orjson.dumps(alias))
                if rename is not None:
                    data = data.replace(*rename)
                for o in observers:
                    o.on_event(data)
                if on_report is not None and (b'"timings"' in data or b'"cached_tokens"' in data):
                    on_report(_body_report(stream, data))
                if data.startswith(b'{"error"'):
                    record.outcome, record.error_type = Outcome.STREAM_BROKEN, "upstream_error_event"
                    out.append(b"data: " + redact(data, stream.backend) + b"\n\n")
                    yield b"".join(out)
                    return
                if b'"usage"' in data:
                    hidden = data
                    data = _take_usage(data, client_wants_usage, record, usage_extension)
                    if data is None:
                        if held is not None:
                            out.append(_event(_with_timings(held, hidden), stream))
                            held = None
                        continue
                if held is not None:
                    out.append(_event(held, stream))
                    held = None
                if b'"finish_reason"' in data:
                    reasons = _FINISH_REASON.findall(data)
                    record.finish_reasons.extend(m.decode() for m in reasons)
                    if reasons and not client_wants_usage and b'"timings"' not in data:
                        held = data  # until the next event: llama.cpp sends the usage chunk right after
                        continue
                out.append(_event(data, stream))
            if held is not None and complete:
                out.append(_event(held, stream))
                held = None
            if complete:
                out.append(_DONE_EVENT)
            if out:
                yield b"".join(out)
            if complete:
                break
        if not complete:
            if len(record.finish_reasons) < choices:
                raise UpstreamProtocolError(f"backend {stream.backend.name} ended the stream before it was complete")
            complete = True
            yield (_event(held, stream) if held is not None else b"") + _DONE_EVENT  # a backend that closed after its final chunks without [DONE]
    except GatewayError as err:
        complete = False
        record.outcome, record.error_type, record.status = Outcome.STREAM_BROKEN, err.code or err.type, err.status
        yield sse_error_event(err)
    except asyncio.CancelledError:
        complete = False
        record.outcome = Outcome.CLIENT_GONE
        raise
    finally:
        record.finished = time.perf_counter()
        ok = complete and record.outcome is Outcome.OK
        for o in observers:
            o.on_end(ok)


def _event(data: bytes, stream: EventStream) -> bytes:
    return b"data: " + redact(data, stream.backend) + b"\n\n"


def _with_timings(chunk: bytes, usage_chunk: bytes) -> bytes:
    """The finishing chunk with the backend's `timings` from the usage chunk the client does not see."""
    if b'"timings"' not in usage_chunk:
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


def _body_report(stream: EventStream, data: bytes) -> BackendReport:
    """The backend's own report in a chunk (llama.cpp's timings, cached tokens), as its adapter reads it."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return NO_REPORT
    return stream.backend.adapter.report_from_body(obj) if isinstance(obj, dict) else NO_REPORT


def _take_usage(data: bytes, client_wants_usage: bool, record: RequestRecord,
                usage_extension: Callable[[], dict] | None = None) -> bytes | None:
    """Record a usage report; hide it (or its whole chunk) from a client that did not ask for it.

    Returns the SSE data to send: none, one payload, or two joined by an event break (a split usage chunk).
    """
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    usage = chunk.get("usage") if isinstance(chunk, dict) else None
    if not isinstance(usage, dict):
        return data
    record.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    if client_wants_usage:
        if usage_extension is not None:
            usage["slipstream_timing"] = usage_extension()
        if not chunk.get("choices"):
            return data if usage_extension is None else orjson.dumps(chunk)
        # Usage riding on a choice chunk (llama.cpp's /v1/completions): split it off into its own
        # chunk with `choices: []`, as OpenAI sends it and SDKs expect.
        del chunk["usage"]
        tail = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        return orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps({**tail, "choices": [], "usage": usage})
    if not chunk.get("choices"):
        return None
    del chunk["usage"]
    return orjson.dumps(chunk)


class SSEResponse(Response):
    """A streaming response that relays chunks as they come and stops the relay when the client leaves.

    `on_close` runs exactly once when the response is over, on every path: the relay finished, the
    client left, the relay never started (the client was gone first), or the server is stopping.
    """

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict[str, str],
                 on_close: Callable[[], None] | None = None) -> None:
        self.status_code = 200
        self.background = None
        self.body_iterator = chunks
        self.on_close = on_close
        self.raw_headers = [(k.encode("latin-1"), header_value(v)) for k, v in {**SSE_HEADERS, **headers}.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = _SendState()
        try:
            relay = asyncio.ensure_future(self._relay(send, state))
            watch = asyncio.ensure_future(wait_for_disconnect(receive))
            try:
                await asyncio.wait((relay, watch), return_when=asyncio.FIRST_COMPLETED)
            finally:
                watch.cancel()
                if not relay.done():
                    # The client is gone (or the server is stopping): cancelling the relay closes the
                    # upstream connection at once, which frees the backend's slot.
                    relay.cancel()
                await asyncio.gather(relay, watch, return_exceptions=True)
                if state.started and not state.ended and not (watch.done() and not watch.cancelled()):
                    # Stopped with the client still there (shutdown past its grace period): say so.
                    await _end_with_error(send, state)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            if self.on_close is not None:
                close, self.on_close = self.on_close, None
                close()
        if self.background is not None:
            await self.background()

    async def _relay(self, send: Send, state: _SendState) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            state.started = True
            async for chunk in self.body_iterator:
                state.tail = chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            state.ended = True
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


class _SendState:
    __slots__ = ("started", "ended", "tail")

    def __init__(self) -> None:
        self.started = self.ended = False
        self.tail = b""


async def _end_with_error(send: Send, state: _SendState) -> None:
    if state.tail.endswith(_DONE_EVENT) or state.tail.startswith(b'data: {"error"'):
        body = b""
    else:
        body = sse_error_event(GatewayError("the gateway stopped this stream before it was complete",
                                            code="stream_interrupted", status=503))
    try:
        async with asyncio.timeout(1.0):
            await send({"type": "http.response.body", "body": body, "more_body": False})
        state.ended = True
    except Exception:  # the connection is going away anyway
        pass


def header_value(value: str) -> bytes:
    """A header value as bytes; text that is not latin-1 (a backend's header, a model's name) is escaped,
    never allowed to fail the response after its slot was taken."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("ascii", "backslashreplace")


def safe_headers(headers: dict[str, str]) -> dict[str, str]:
    """The headers with every value latin-1 safe (for starlette's Response, which encodes them)."""
    for k, v in headers.items():
        if not v.isascii():
            return {k: header_value(v).decode("latin-1") for k, v in headers.items()}
    return headers


async def replay(events: list[bytes]) -> AsyncIterator[bytes]:
    """Stream prepared events (a cached answer) through SSEResponse."""
    for event in events:
        yield event


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
