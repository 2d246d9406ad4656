"""Relay an upstream event stream to the client, event by event, as it arrives.

The relay is also where a stream's truth is decided: a stream that breaks before [DONE] ends
with an error event (the openai SDK raises it), never a clean-looking truncation.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.cache.assemble import StreamAssembler
from app.errors import GatewayError, UpstreamProtocolError, sse_error_event
from app.record import Outcome, RequestRecord, Usage
from app.telemetry.timing import from_llamacpp
from app.upstream.attempt import EventStream
from app.upstream.sse import DONE, event_data

_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([^"]+)"')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"]+)"')
_DONE_EVENT = b"data: [DONE]\n\n"
# Every this many data events, a stream's recent decode speed is reported (an early TPOT sample).
PROGRESS_EVENTS = 8
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no"}


async def relay_events(
    stream: EventStream, client_wants_usage: bool, record: RequestRecord, finish: Callable[[], None],
    collect: StreamAssembler | None = None, usage_extension: Callable[[], dict] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes; always closes the upstream stream and calls `finish` once.

    `collect`, when given, sees every data chunk as the backend sent it (to cache the finished answer).
    `usage_extension`, when given, adds its result to the usage chunk as `slipstream_timing`.
    `progress`, when given, is called with (events, now) every PROGRESS_EVENTS data events.
    """
    complete = False
    events = 0
    attempt = record.attempt_log[-1] if record.attempt_log else None
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
                events += 1
                if events % PROGRESS_EVENTS == 0 and progress is not None:
                    progress(events, time.perf_counter())
                if collect is not None:
                    collect.feed(data)
                if b'"timings"' in data and attempt is not None:
                    attempt.report = _llamacpp_report(data) or attempt.report
                if data.startswith(b'{"error"'):
                    record.outcome, record.error_type = Outcome.STREAM_BROKEN, "upstream_error_event"
                    out.append(b"data: " + data + b"\n\n")
                    yield b"".join(out)
                    return
                if b'"usage"' in data:
                    data = _take_usage(data, client_wants_usage, record, usage_extension)
                    if data is None:
                        continue
                if b'"finish_reason"' in data:
                    record.finish_reasons.extend(m.decode() for m in _FINISH_REASON.findall(data))
                out.append(b"data: " + data + b"\n\n")
            if complete:
                out.append(_DONE_EVENT)
            if out:
                yield b"".join(out)
            if complete:
                break
        if not complete:
            if not record.finish_reasons:
                raise UpstreamProtocolError(f"backend {stream.backend.name} ended the stream before it was complete")
            yield _DONE_EVENT  # a backend that closed after its final chunk without [DONE]
    except GatewayError as err:
        record.outcome, record.error_type, record.status = Outcome.STREAM_BROKEN, err.code or err.type, err.status
        yield sse_error_event(err)
    except asyncio.CancelledError:
        record.outcome = Outcome.CLIENT_GONE
        raise
    finally:
        record.finished = time.perf_counter()
        if attempt is not None:
            attempt.end = stream.timing.end or record.finished
        await stream.aclose()
        finish()


def _llamacpp_report(data: bytes):
    try:
        return from_llamacpp(orjson.loads(data))
    except (orjson.JSONDecodeError, AttributeError):
        return None


def _take_usage(data: bytes, client_wants_usage: bool, record: RequestRecord,
                usage_extension: Callable[[], dict] | None = None) -> bytes | None:
    """Record a usage report; hide it (or its whole chunk) from a client that did not ask for it."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    usage = chunk.get("usage") if isinstance(chunk, dict) else None
    if not isinstance(usage, dict):
        return data
    record.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    if client_wants_usage:
        if usage_extension is None:
            return data
        usage["slipstream_timing"] = usage_extension()
        return orjson.dumps(chunk)
    if not chunk.get("choices"):
        return None
    del chunk["usage"]
    return orjson.dumps(chunk)


class SSEResponse(Response):
    """A streaming response that relays chunks as they come and stops the relay when the client leaves."""

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        self.status_code = 200
        self.background = None
        self.body_iterator = chunks
        self.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in {**SSE_HEADERS, **headers}.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relay = asyncio.ensure_future(self._relay(send))
        watch = asyncio.ensure_future(_wait_for_disconnect(receive))
        try:
            await asyncio.wait((relay, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not relay.done():
                # The client is gone (or the server is stopping): cancelling the relay closes the
                # upstream connection at once, which frees the backend's slot.
                relay.cancel()
            await asyncio.gather(relay, watch, return_exceptions=True)
        if self.background is not None:
            await self.background()

    async def _relay(self, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def replay(events: list[bytes]) -> AsyncIterator[bytes]:
    """Stream prepared events (a cached answer) through SSEResponse."""
    for event in events:
        yield event


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
