"""Bounded HTTP intake: uvicorn's httptools protocol with the limits a shared gateway needs.

uvicorn bounds neither how long a client may take to send its headers or body (slowloris), nor
their size (httptools buffers an unterminated header whole), nor how many idle keep-alive
connections it holds (each costs a file descriptor). This subclass adds, per connection:
- a header read timeout from the connection's (or request's) first byte, and a body read timeout;
- a maximum header size (431 when exceeded);
- a cap on idle keep-alive connections (the oldest idle one is closed) and on all connections
  (derived from the process's file limit unless set), so new clients always get a descriptor.
Malformed HTTP gets OpenAI's error shape, on a connection that is then closed.

It also writes each response's head together with the first part of its body: uvicorn writes the
head on `http.response.start` and the body on the next message, two syscalls where one does (about a
tenth of the gateway's CPU per JSON answer on peer-bench; see `HeadWithBody`).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.relay.loop import CLIENT_GONE, ClientGone

log = logging.getLogger("slipstream.intake")


@dataclass(frozen=True, slots=True)
class IntakeLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_header_bytes: int = 64 * 1024
    max_idle_connections: int = 256
    max_connections: int | None = None  # None: half the process's file-descriptor limit

    def connection_cap(self) -> int:
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        # The other half is for backend connections, the cache, logs.
        return max(16, soft // 2) if soft != resource.RLIM_INFINITY else 32768


def configure(server) -> type[BoundedHttpToolsProtocol]:
    """Set this process's limits from `server` (a ServerConfig); returns the protocol class for uvicorn."""
    global LIMITS
    LIMITS = IntakeLimits(server.header_timeout_s, server.body_timeout_s, server.max_header_bytes,
                          server.max_idle_connections, server.max_connections)
    return BoundedHttpToolsProtocol


# Set once per process before serving (app.cli, app.http.server.app_from_environment): uvicorn builds the
# protocol per connection from a class, and worker processes cannot receive a class built at run time.
LIMITS = IntakeLimits()

_STATUS_TEXT = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large",
                503: b"Service Unavailable"}


def error_bytes(status: int, message: str, code: str) -> bytes:
    """A complete HTTP/1.1 response carrying an OpenAI-style error, closing the connection."""
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error" if status < 500 else "overloaded_error",
                                   "param": None, "code": code}})
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, _STATUS_TEXT[status]),
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body),
        body,
    ))


class HeadWithBody:
    """A response's transport, as its cycle sees it: the first write (the head uvicorn writes on
    `http.response.start`) is held and goes out with the next write (the body), in one syscall.

    The head waits no longer than the current turn of the event loop: a flush is scheduled for the
    case where no body follows at once (a stream whose first event is still on its way), and `close`
    writes it first. Everything else is the connection's transport.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop: asyncio.AbstractEventLoop | None = loop  # until the first write
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            if self._loop is not None:  # the first write: hold it until the body comes
                self._loop.call_soon(self.flush)
                self._held, self._loop = data, None
                return
            self._transport.write(data)
            return
        self._held = None
        self._transport.write(held + data)

    def flush(self) -> None:
        held, self._held, self._loop = self._held, None, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header/body read timeouts, a header size cap and connection caps."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._limits = LIMITS
        # The current read limit: when it runs out (loop time) and what then. One timer per connection
        # checks it, moved only when a limit would run out before the timer fires: arming and clearing a
        # limit per request (head, then body) costs two float stores, not two timers made and cancelled.
        self._due: float | None = None
        self._on_due: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._in_head = True  # reading a request's head (request line and headers)
        self._head_bytes = 0
        self._in_body = False
        # One idle set per server, kept on uvicorn's per-server state (which has no slot for it).
        idle = getattr(self.server_state, "slipstream_idle", None)
        if idle is None:
            idle = self.server_state.slipstream_idle = {}  # type: ignore[attr-defined]  # insertion-ordered
        self._idle: dict[BoundedHttpToolsProtocol, None] = idle
        self._gone: deque[ClientGone] = deque()  # the requests whose answers are not complete, oldest first

    # connections
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self._limits.connection_cap():
            if self._idle:
                oldest = next(iter(self._idle))
                self._idle.pop(oldest, None)
                oldest.transport.close()
            else:
                self._reject(503, "the gateway is at its connection limit; retry shortly", "too_many_connections")
                return
        self._arm(self._limits.header_timeout_s, self._head_timeout)

    def connection_lost(self, exc) -> None:
        self._idle.pop(self, None)
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)
        gone, self._gone = self._gone, deque()
        for request in gone:
            request.fire()

    # reading
    def data_received(self, data: bytes) -> None:
        if self._idle:
            self._idle.pop(self, None)
        if self._in_head and self._due is None:
            self._arm(self._limits.header_timeout_s, self._head_timeout)
        super().data_received(data)
        if self._in_head and self.parser is not None:
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_header_bytes and not self.transport.is_closing():
                self._reject(431, f"request headers exceed {self._limits.max_header_bytes} bytes", "headers_too_large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes = False, 0
        self._disarm()
        gone = ClientGone()
        self.scope["extensions"] = {CLIENT_GONE: gone}  # type: ignore[dict-item]  # ASGI types extensions as dicts
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]
            self._gone.append(gone)
        self._in_body = True
        self._arm(self._limits.body_timeout_s, self._body_timeout)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._gone:
            self._gone.popleft()
        super().on_response_complete()
        self._in_head = True
        if self.transport.is_closing() or self.pipeline:
            return
        self._idle[self] = None
        if len(self._idle) > self._limits.max_idle_connections:
            oldest = next(iter(self._idle))
            self._idle.pop(oldest, None)
            oldest.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._reject(400, f"malformed HTTP request: {msg}", "invalid_http")

    # limits
    def _head_timeout(self) -> None:
        if self._in_head and not self.transport.is_closing() and (self._head_bytes or self.cycle is None):
            self._reject(408, f"request headers not received within {self._limits.header_timeout_s:g}s",
                         "request_timeout")

    def _body_timeout(self) -> None:
        if self._in_body and not self.transport.is_closing():
            cycle = self.cycle
            if cycle is not None:
                cycle.disconnected = True  # the app sees the client as gone
                cycle.message_event.set()
            if cycle is None or not cycle.response_started:
                self._reject(408, f"request body not received within {self._limits.body_timeout_s:g}s", "request_timeout")
            else:
                self.transport.close()

    def _reject(self, status: int, message: str, code: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(error_bytes(status, message, code))
            self.transport.close()

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        due = self.loop.time() + seconds
        self._due, self._on_due = due, callback
        if self._timer is None or self._timer_at > due:
            self._schedule(due)

    def _disarm(self) -> None:
        self._due = self._on_due = None  # the timer, if pending, finds nothing due and lapses

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self.loop.call_at(at, self._tick), at

    def _tick(self) -> None:
        self._timer = None
        due = self._due
        if due is None:
            return
        if self.loop.time() < due - 0.001:  # (timers may fire a clock tick early)
            self._schedule(due)  # the limit was armed again since: look when it runs out
            return
        callback = self._on_due
        self._due = self._on_due = None
        if callback is not None:
            callback()
