"""One upstream attempt: send the request, and either read the whole answer or open its event stream.

Everything that can fail before the first byte reaches the client raises here, so callers
(retries, fallback) can still act; once a stream is returned, the client is committed to it.
Timeouts: connect (the session), first token and idle gap (streams), total (every call), all capped
by the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from app.config import Timeouts
from app.deadline import Deadline
from app.errors import (
    FirstTokenTimeout,
    GatewayError,
    UpstreamMisconfigured,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from app.upstream.adapters import NO_REPORT, BackendReport
from app.upstream.client import (
    Backend,
    map_transport_errors,
    open_response,
    response_headers,
)
from app.upstream.sse import EventSplitter
from app.upstream.wire import StreamIdle, WireResponse

log = logging.getLogger("slipstream.upstream")

_JSON = "application/json"
_SSE = "text/event-stream"


@dataclass(slots=True)
class AttemptTiming:
    """Gateway-measured instants of one attempt (time.perf_counter seconds)."""

    start: float
    headers: float = 0.0
    first_event: float = 0.0
    end: float = 0.0


@dataclass(slots=True)
class JsonReply:
    backend: Backend
    status: int
    body: bytes
    headers: dict[str, str]
    timing: AttemptTiming
    report: BackendReport = NO_REPORT  # from the backend's timing headers; body reports are parsed later
    data: dict | None = None  # the body, parsed once (call_json checks that it is a JSON object)
    # Whether the body's usage is the backend's count: always, for a backend's own answer. A translation to an
    # API whose usage is required (Messages) writes zeros where the backend reported none; those are no count.
    usage_reported: bool = True

    def close(self) -> None:
        """Nothing to give back: the body was read whole and the connection returned to the pool."""


@dataclass(slots=True)
class EventStream:
    """An open upstream SSE stream; iterate `batches()` once, then `aclose()` (always)."""

    backend: Backend
    headers: dict[str, str]
    timing: AttemptTiming
    _response: WireResponse
    _first: list[bytes]
    _splitter: EventSplitter
    _idle_s: float
    _end: float  # time.monotonic() by which the attempt must be over (total timeout or deadline)
    _deadline_bound: bool = field(default=False)
    # Whether the usage the relay reads in it is the backend's count: always, for a backend's own stream. A
    # translation (app.protocols.translated_stream) may have had none to carry; the pipeline then keeps the
    # admission estimate rather than record its placeholder zeros.
    usage_reported = True

    async def batches(self) -> AsyncIterator[list[bytes]]:
        """The complete SSE events of each read, as the backend sends them; raises a GatewayError if the
        stream breaks. Events that arrived together stay together, so they can be relayed in one write."""
        if self._first:
            yield self._first
        self._first = []
        name, secret = self.backend.name, self.backend.secret
        try:
            with map_transport_errors(name):
                # The idle limit measures the backend's silence, not the time the client takes to read.
                async for chunk in self._response.chunks(self._idle_s, self._end):
                    events = self._splitter.feed(chunk)
                    if events:
                        yield redact_events(events, secret) if secret else events
        except StreamIdle:
            if time.monotonic() >= self._end - 0.001:
                raise _total_timeout(name, self._deadline_bound) from None
            raise UpstreamTimeout(
                f"backend {name} sent nothing for {self._idle_s:g}s mid-stream", code="stream_idle_timeout"
            ) from None
        self.timing.end = time.perf_counter()
        if self._splitter.pending.strip():
            # A last event without its blank line: the caller judges it.
            yield redact_events([self._splitter.pending], secret) if secret else [self._splitter.pending]

    def close(self) -> None:
        # Closing an unfinished response drops its connection, which is what tells the backend to stop;
        # a finished one goes back to the pool. Finished means the body's framing ended, not that this
        # iterator did: the relay stops at [DONE], and the chunked stream's last chunk usually came with
        # it (before, every streamed call opened a new connection to the backend for that reason).
        if self.backend.adapter.reuses_stream_connections:
            self._response.release()  # closes the connection unless the body was complete
        else:
            self._response.close()

    async def aclose(self) -> None:
        self.close()


async def call_json(backend: Backend, path: str, body: bytes, timeouts: Timeouts, deadline: Deadline,
                    extra_headers: dict[str, str] | None = None) -> JsonReply:
    """A complete non-streaming exchange; a backend error status raises UpstreamStatus."""
    timing = AttemptTiming(time.perf_counter())
    limit = deadline.cap(timeouts.total_s)
    response = None
    try:
        async with asyncio.timeout(limit):
            response = await open_response(backend, path, body, _JSON, timeouts.connect_s, extra_headers)
            timing.headers = time.perf_counter()
            with map_transport_errors(backend.name):
                data = await response.read()
    except TimeoutError:
        if response is not None:
            response.close()
        raise _total_timeout(backend.name, limit < timeouts.total_s) from None
    except BaseException:
        if response is not None:
            response.close()
        raise
    response.release()
    timing.end = time.perf_counter()
    data = redact(data, backend)  # here, once: nothing after the transport sees a backend's secret
    if response.status != 200:
        raise status_error(response.status, response.headers.get("retry-after"), data, backend)
    parsed = json_object(data, backend)
    report = backend.adapter.report_from_headers(response.headers)
    return JsonReply(backend, response.status, data, response_headers(response), timing, report, parsed)


async def open_stream(backend: Backend, path: str, body: bytes, timeouts: Timeouts, deadline: Deadline,
                      extra_headers: dict[str, str] | None = None) -> EventStream:
    """Open a streaming exchange and wait for its first event, so early failures still raise here."""
    timing = AttemptTiming(time.perf_counter())
    total = deadline.cap(timeouts.total_s)
    end = time.monotonic() + total
    first_limit = min(timeouts.first_token_s, total)
    response = None
    try:
        async with asyncio.timeout(first_limit):
            response = await open_response(backend, path, body, _SSE, timeouts.connect_s, extra_headers)
            timing.headers = time.perf_counter()
            first, splitter = await _first_events(response, backend)
    except TimeoutError:
        if response is not None:
            response.close()
        if first_limit < timeouts.first_token_s:
            raise _total_timeout(backend.name, total < timeouts.total_s) from None
        raise FirstTokenTimeout(backend.name, timeouts.first_token_s) from None
    except BaseException:
        if response is not None:
            response.close()
        raise
    timing.first_event = time.perf_counter()
    if backend.secret:
        first = redact_events(first, backend.secret)
    return EventStream(
        backend, response_headers(response), timing, response, first, splitter, timeouts.idle_s, end,
        total < timeouts.total_s,
    )


async def _first_events(response: WireResponse, backend: Backend) -> tuple[list[bytes], EventSplitter]:
    if response.status != 200:
        with map_transport_errors(backend.name):
            data = await response.read()
        raise status_error(response.status, response.headers.get("retry-after"), data, backend)
    if not response.headers.get("content-type", "").startswith(_SSE):
        with map_transport_errors(backend.name):
            data = await response.read()
        # Some servers answer an error with 200 and a JSON body even when asked to stream.
        if b'"error"' in data:
            raise backend.adapter.classify_error(502, redact(data, backend), backend.name)
        raise UpstreamProtocolError(f"backend {backend.name} did not answer with an event stream")
    splitter = EventSplitter()
    with map_transport_errors(backend.name):
        async for chunk in response.chunks():
            first = splitter.feed(chunk)
            if first:
                return first, splitter
    raise UpstreamProtocolError(f"backend {backend.name} closed the stream before sending any event")


def _total_timeout(name: str, deadline_bound: bool) -> UpstreamTimeout:
    if deadline_bound:
        return UpstreamTimeout(f"the request's deadline passed while waiting for backend {name}", code="deadline_exceeded")
    return UpstreamTimeout(f"backend {name} timed out", code="upstream_timeout")


def status_error(status: int, retry_after: str | None, data: bytes, backend: Backend) -> GatewayError:
    """The error for any status but 200: the backend's own 4xx/5xx kept (classified by its adapter:
    OpenAI code, request-caused or not), anything else unshaped.

    A backend's 401/403 says the gateway holds a bad key: the client gets a generic 502 (the detail
    goes to the log only), never the backend's message, which may echo the key.
    """
    if status in (401, 403):
        log.error("backend %s rejected the gateway's credentials (HTTP %d): %s", backend.name, status,
                  redact(data[:500], backend).decode("utf-8", "replace"))
        return UpstreamMisconfigured(f"backend {backend.name} is misconfigured at the gateway")
    if status < 400:
        # A redirect, 201, 204...: not an answer an OpenAI client can read, and never followed.
        return UpstreamProtocolError(f"backend {backend.name} answered HTTP {status}, not an OpenAI response")
    err = backend.adapter.classify_error(status, redact(data, backend), backend.name)
    if retry_after:
        err.headers["retry-after"] = retry_after
    return err


def json_object(data: bytes, backend: Backend) -> dict:
    """The body of a 200 as a JSON object, or UpstreamProtocolError: nothing unshaped reaches a client."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError(f"backend {backend.name} answered with a body that is not JSON") from None
    # A Responses object carries `"error": null` when all went well: only a set error is one.
    if not isinstance(parsed, dict) or parsed.get("error") is not None:
        if isinstance(parsed, dict):  # an error wearing a 200: some servers do that
            raise backend.adapter.classify_error(502, redact(data, backend), backend.name)
        raise UpstreamProtocolError(f"backend {backend.name} answered with JSON that is not an object")
    return parsed


def redact_events(events: list[bytes], secret: bytes) -> list[bytes]:
    """The events with the backend's key blanked out: the transport redacts every event it hands on, so
    no consumer (relay, cache, collector) has to."""
    # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
    return [e.replace(secret, b"[redacted]") if e.find(secret) != -1 else e for e in events]


def redact(data: bytes, backend: Backend) -> bytes:
    """The bytes with the backend's configured key blanked out (a backend that echoes headers leaks it)."""
    secret = backend.secret
    if secret and secret in data:
        return data.replace(secret, b"[redacted]")
    return data
