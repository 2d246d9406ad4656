"""One upstream attempt: send the request, and either read the whole answer or open its event stream.

Everything that can fail before the first byte reaches the client raises here, so callers
(retries, fallback) can still act; once a stream is returned, the client is committed to it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from app.errors import UpstreamProtocolError, UpstreamStatus
from app.upstream.client import Backend, map_transport_errors, open_response, response_headers
from app.upstream.sse import EventSplitter

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
    status: int
    body: bytes
    headers: dict[str, str]
    timing: AttemptTiming


@dataclass(slots=True)
class EventStream:
    """An open upstream SSE stream; iterate `events()` once, then `aclose()` (always)."""

    backend: Backend
    headers: dict[str, str]
    timing: AttemptTiming
    _response: aiohttp.ClientResponse
    _first: list[bytes]
    _splitter: EventSplitter = field(default_factory=EventSplitter)

    async def events(self) -> AsyncIterator[bytes]:
        """Each complete SSE event as the backend sends it; raises a GatewayError if the stream breaks."""
        for event in self._first:
            yield event
        self._first = []
        with map_transport_errors(self.backend.name):
            async for chunk in self._response.content.iter_any():
                for event in self._splitter.feed(chunk):
                    yield event
        self.timing.end = time.perf_counter()
        if self._splitter.pending.strip():
            yield self._splitter.pending  # a last event without its blank line: the caller judges it

    async def aclose(self) -> None:
        # Closing an unfinished response drops its connection, which is what tells the backend to stop;
        # a finished one goes back to the pool.
        if self.timing.end:
            self._response.release()
        else:
            self._response.close()


async def call_json(backend: Backend, path: str, body: bytes) -> JsonReply:
    """A complete non-streaming exchange; a backend error status raises UpstreamStatus."""
    timing = AttemptTiming(time.perf_counter())
    response = await open_response(backend, path, body, _JSON)
    timing.headers = time.perf_counter()
    try:
        with map_transport_errors(backend.name):
            data = await response.read()
    except BaseException:
        response.close()
        raise
    response.release()
    timing.end = time.perf_counter()
    if response.status >= 400:
        raise _status_error(response, data, backend)
    return JsonReply(response.status, data, response_headers(response), timing)


async def open_stream(backend: Backend, path: str, body: bytes) -> EventStream:
    """Open a streaming exchange and wait for its first event, so early failures still raise here."""
    timing = AttemptTiming(time.perf_counter())
    response = await open_response(backend, path, body, _SSE)
    timing.headers = time.perf_counter()
    try:
        if response.status >= 400:
            with map_transport_errors(backend.name):
                data = await response.read()
            raise _status_error(response, data, backend)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            with map_transport_errors(backend.name):
                data = await response.read()
            # Some servers answer an error with 200 and a JSON body even when asked to stream.
            raise UpstreamStatus.from_response(502, data, backend.name) if b'"error"' in data else UpstreamProtocolError(
                f"backend {backend.name} did not answer with an event stream"
            )
        splitter = EventSplitter()
        first: list[bytes] = []
        with map_transport_errors(backend.name):
            async for chunk in response.content.iter_any():
                first = splitter.feed(chunk)
                if first:
                    break
        if not first:
            raise UpstreamProtocolError(f"backend {backend.name} closed the stream before sending any event")
        timing.first_event = time.perf_counter()
    except BaseException:
        response.close()
        raise
    return EventStream(backend, response_headers(response), timing, response, first, splitter)


def _status_error(response: aiohttp.ClientResponse, data: bytes, backend: Backend) -> UpstreamStatus:
    err = UpstreamStatus.from_response(response.status, data, backend.name)
    retry_after = response.headers.get("retry-after")
    if retry_after:
        err.headers["retry-after"] = retry_after
    return err
