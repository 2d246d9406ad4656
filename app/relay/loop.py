"""Relay an upstream event stream to the client, event by event, as it arrives.

The loop keeps only what every stream needs: framing, the end event ([DONE]) and error events. Every
other job (the alias rename, usage capture and hiding, finish-reason completeness, the backend's
reports, progress samples, cache assembly, content capture) is a filter in a chain built once per
request (app.relay.filters). How events classify and frame is the client protocol's to say: the relay
takes a `StreamFormat` (app.relay.format; OpenAI's SSE by default), so a protocol adapter plugs in its
own framing, end and error events, and may append a filter that translates the chunks.

The relay is also where a stream's truth is decided: a stream that breaks before its end ends with an
error event (the openai SDK raises it), never a clean-looking truncation. What the stream came to is
one value, `Relay.result` (app.relay.result), read by the pipeline once the response is over. Secrets
are not the relay's concern: the transport redacts them from every event (app.upstream.attempt).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.errors import GatewayError, UpstreamProtocolError
from app.protocols import CHAT, ClientProtocol
from app.protocols.openai import OPENAI_SSE
from app.record import Outcome
from app.relay.filters import Filter
from app.relay.format import StreamFormat
from app.relay.result import RelayResult
from app.upstream.attempt import EventStream
from app.upstream.sse import DONE, event_data

__all__ = ["CLIENT_GONE", "ClientGone", "Relay", "SSEResponse", "client_gone_of", "replay",
           "wait_for_disconnect"]

_DONE_EVENT = b"data: [DONE]\n\n"
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no"}


CLIENT_GONE = "slipstream.client_gone"  # the ASGI scope extension that carries a request's ClientGone


class ClientGone:
    """The HTTP front's word that a request's client left before its answer was complete.

    The front (app.http.intake) puts one in each request's scope and fires it when the connection is
    lost; whoever is serving the request sets `callback` (typically: cancel my task) while it has work a
    departed client should stop. This replaces a watcher task per request that waited on `receive()`
    for `http.disconnect`: the protocol already knows, and telling it costs nothing until it happens.
    """

    __slots__ = ("callback", "lost")

    def __init__(self) -> None:
        self.callback: Callable[[], None] | None = None
        self.lost = False

    def fire(self) -> None:
        self.lost = True
        callback, self.callback = self.callback, None
        if callback is not None:
            callback()


def client_gone_of(scope: Scope) -> ClientGone | None:
    """The request's ClientGone, where the server gives one (not under another ASGI server or a test client)."""
    extensions = scope.get("extensions")
    return extensions.get(CLIENT_GONE) if extensions else None


class Relay:
    """One stream's relay: `events()` yields the client's bytes; `result` is what the stream came to.

    Closing the upstream is not the relay's job: the attempt's owner does it (app.dispatch.attempt).
    """

    __slots__ = ("_checks", "_flushers", "_steps", "filters", "format", "result", "stream")

    def __init__(self, stream: EventStream, filters: tuple[Filter, ...], result: RelayResult | None = None,
                 fmt: StreamFormat = OPENAI_SSE) -> None:
        self.stream, self.filters, self.format = stream, filters, fmt
        self.result = result if result is not None else RelayResult()
        # The optional filter methods, found once per chain rather than asked per event.
        self._flushers = tuple(i for i, f in enumerate(filters) if hasattr(f, "flush"))
        self._checks = tuple(f for f in filters if hasattr(f, "incomplete"))
        self._steps = tuple(f.on_data for f in filters)  # bound once: the per-event loop only calls

    async def events(self) -> AsyncIterator[bytes]:
        """Yield the client's bytes, ending with the end event or an error event, never silently."""
        result, fmt, filters, steps = self.result, self.format, self.filters, self._steps
        frame, is_error = fmt.frame, fmt.is_error
        complete = False
        sent = b""  # the last bytes with events yielded: an error event continues what they began
        try:
            async for batch in self.stream.batches():
                # Events that arrived in one read leave in one write: as soon as they exist, no later.
                out = []
                framed = False
                for event in batch:
                    data = event_data(event)
                    if data is None:
                        out.append(event + b"\n\n")  # comments and keep-alives pass through
                        continue
                    if data == DONE:
                        complete = True
                        break
                    if data[:1] != b"{" or data[-1:] != b"}":  # two byte tests are all a well-formed event costs
                        if data == b"null":
                            # An event with nothing in it (llama.cpp opens a prompt list's stream with one): not a
                            # first token, not the first chunk whose model is read, and not passed on (the openai
                            # SDK yields it as a None chunk).
                            continue
                        if not _json_object(data):
                            raise UpstreamProtocolError(f"backend {self.stream.backend.name} sent a stream event that is not JSON")
                    if not result.first_token and fmt.is_content(data):
                        result.first_token = time.perf_counter()
                    if is_error(data):
                        result.outcome, result.error_type = Outcome.STREAM_BROKEN, "upstream_error_event"
                        out.append(frame(data))
                        yield b"".join(out)
                        return
                    for step in steps:
                        data = step(data)
                        if data is None:
                            break
                    else:
                        out.append(frame(data))
                        framed = True
                if complete:
                    self._flush(out)
                    out.append(fmt.done)
                if out:
                    chunk = b"".join(out)
                    yield chunk
                    if framed:
                        sent = chunk
                if complete:
                    break
            if not complete:
                # A backend that closed after its final chunks without [DONE]: complete if no filter objects.
                for check in self._checks:
                    why = check.incomplete()
                    if why is not None:
                        raise UpstreamProtocolError(f"backend {self.stream.backend.name} {why}")
                complete = True
                out = []
                self._flush(out)
                out.append(fmt.done)
                yield b"".join(out)
        except GatewayError as err:
            complete = False
            result.outcome, result.error_type, result.status = Outcome.STREAM_BROKEN, err.code or err.type, err.status
            yield fmt.error_event(err, sent)
        except asyncio.CancelledError:
            complete = False
            result.outcome = Outcome.CLIENT_GONE
            raise
        finally:
            result.finished = time.perf_counter()
            result.complete = complete and result.outcome is Outcome.OK
            for f in filters:
                f.on_end(result)

    def _flush(self, out: list[bytes]) -> None:
        """Events the filters held back, each passed on through the filters after it, then framed."""
        filters = self.filters
        for i in self._flushers:
            data = filters[i].flush()  # type: ignore[attr-defined]
            for f in filters[i + 1:]:
                if data is None:
                    break
                data = f.on_data(data)
            if data is not None:
                out.append(self.format.frame(data))


def _json_object(data: bytes) -> bool:
    """Whether a data event not framed as `{...}` is still one the APIs spoken here send: a JSON object with
    whitespace around it. Anything else (a proxy's page, a broken server's half line) no client could read:
    relayed, the openai SDK raised a JSONDecodeError mid-stream, not the APIError of a stream that broke, and
    the gateway recorded the stream as complete."""
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False


class SSEResponse(Response):
    """A streaming response that relays chunks as they come and stops the relay when the client leaves.

    `on_close` runs exactly once when the response is over, on every path: the relay finished, the
    client left, the relay never started (the client was gone first), or the server is stopping.
    """

    def __init__(self, chunks: AsyncIterator[bytes], headers: dict[str, str],
                 on_close: Callable[[], None] | None = None, protocol: ClientProtocol = CHAT) -> None:
        self.protocol = protocol  # how a stream the gateway must stop ends: its error event
        # Set when the gateway itself stopped the stream (shutdown past its grace period) with the client
        # still there: `on_close` records that, not a client that left.
        self.interrupted = False
        self.status_code = 200
        self.background = None
        self.body_iterator = chunks
        self.on_close = on_close
        self.raw_headers = [(k.encode("latin-1"), header_value(v)) for k, v in {**SSE_HEADERS, **headers}.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = client_gone_of(scope)
        if gone is not None:
            await self._serve_in_task(gone, send)
            return
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
                    self.interrupted = True
                    await _end_with_error(send, state, self.protocol)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            if self.on_close is not None:
                close, self.on_close = self.on_close, None
                close()
        if self.background is not None:
            await self.background()

    async def _serve_in_task(self, gone: ClientGone, send: Send) -> None:
        """The relay run in the request's own task, cancelled by `gone` when the client leaves (which closes
        the upstream connection at once and frees the backend's slot)."""
        state = _SendState()
        task = asyncio.current_task()
        assert task is not None  # called from the request's own task
        left = False

        def on_gone() -> None:
            nonlocal left
            left = True
            task.cancel()

        try:
            if gone.lost:
                return  # gone before the answer began: nothing to relay
            gone.callback = on_gone
            try:
                await self._relay(send, state)
            except asyncio.CancelledError:
                if left:
                    task.uncancel()
                    return
                if state.started and not state.ended:
                    # Stopped with the client still there (shutdown past its grace period): say so.
                    self.interrupted = True
                    await _end_with_error(send, state, self.protocol)
                raise
        finally:
            gone.callback = None
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            if self.on_close is not None:
                close, self.on_close = self.on_close, None
                close()

    async def _relay(self, send: Send, state: _SendState) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            state.started = True
            async for chunk in self.body_iterator:
                if state.ended:
                    continue  # nothing follows the stream's last event; the iterator finishes its bookkeeping
                if chunk.find(b"data:") != -1:  # a chunk of comments alone (keep-alives) is not what ended the stream
                    state.tail = chunk
                if self.protocol.stream_over(chunk):
                    # The last event ends the response in the same write (one send and one syscall less
                    # per stream than an empty closing chunk after it).
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                    state.ended = True
                    continue
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not state.ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                state.ended = True
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


class _SendState:
    __slots__ = ("ended", "started", "tail")

    def __init__(self) -> None:
        self.started = self.ended = False
        self.tail = b""


async def _end_with_error(send: Send, state: _SendState, protocol: ClientProtocol) -> None:
    if protocol.stream_over(state.tail):
        body = b""
    else:
        body = protocol.error_event(GatewayError("the gateway stopped this stream before it was complete",
                                                 code="stream_interrupted", status=503), state.tail)
    try:
        async with asyncio.timeout(1.0):
            await send({"type": "http.response.body", "body": body, "more_body": False})
        state.ended = True
    except Exception:  # noqa: BLE001, S110 - the connection is going away anyway
        pass


def header_value(value: str) -> bytes:
    """A header value as bytes; text that is not latin-1 (a backend's header, a model's name) is escaped,
    never allowed to fail the response after its slot was taken."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("ascii", "backslashreplace")


async def replay(events: list[bytes]) -> AsyncIterator[bytes]:
    """Stream prepared events (a cached answer) through SSEResponse."""
    for event in events:
        yield event


async def wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
