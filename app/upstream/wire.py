"""The upstream hop's HTTP/1.1 client: one POST per attempt over pooled keep-alive connections, parsed by
httptools (llhttp, the C parser uvicorn already serves clients with).

Why not aiohttp's ClientSession here: a proxied call is one POST to a base URL fixed at start-up, with
headers the gateway mostly knows in advance, and its answer either read whole or relayed chunk by chunk.
aiohttp's general client (cookie jar, redirects, request and payload objects, per-call header merging,
a stream reader) cost 70-95 µs of CPU per call on this box against 16-18 µs for this narrow one
(/tmp-free micro-bench: 8,000 POSTs at c=16 to shared/peer-bench's fake backend, client pinned to one
core), about a fifth of the gateway's CPU per JSON request. Health probes, discovery and the tools keep
aiohttp: they are off the hot path and want its generality.

What it does: keep-alive connections per backend (LIFO, so the warmest is reused; one idle longer than
KEEPALIVE_S is dropped), TLS for https, the request head built once per (path, accept) and written with
the body in one write, responses framed by Content-Length, chunked encoding or the connection's end,
and back-pressure on a stream the client reads slowly. A connection whose answer was not read to the end
is closed, never reused: closing is how a backend learns to stop generating.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from app.upstream.proxy import Proxy, ProxyRefused, tunnel

KEEPALIVE_S = 30.0
# A stream buffered beyond this (the client reads slower than the backend writes) pauses reading from
# the backend until the relay catches up, as TCP would.
HIGH_WATER = 256 * 1024


class WireError(Exception):
    """A transport failure on the upstream hop (mapped to a GatewayError by app.upstream.client)."""


class ConnectFailed(WireError):
    """The backend could not be reached (refused, unroutable, TLS handshake failed). `detail`: why, where an
    operator can act on it (an untrusted certificate, a proxy that refused): never a URL or credential."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class ConnectTimeout(WireError):
    """The backend did not accept a connection within the connect timeout."""


class Disconnected(WireError):
    """The backend closed the connection before its answer's head."""


class BrokenBody(WireError):
    """The backend closed the connection, or sent bad framing, in the middle of its answer."""


class BadResponse(WireError):
    """The backend's bytes are not an HTTP/1.1 response."""


class StreamIdle(TimeoutError):
    """The backend sent nothing for the stream's idle limit, or the stream's time ran out (the caller, who
    knows which limit it set, words it)."""


class WireResponse:
    """One answer: `status` and `headers` once returned by `WirePool.post`, then its body through `read()`
    or `chunks()` (once), then `release()` (back to the pool if the body was read to its end) or `close()`."""

    __slots__ = ("_buffered", "_chunks", "_conn", "_done", "_error", "_limits", "_waiter", "_waiting_since", "_watch",
                 "headers", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _NO_HEADERS
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: WireError | None = None
        self._waiter: asyncio.Future[None] | None = None
        # A stream's silence limit: one timer per stream, moved only when it fires, not per chunk (a
        # token-by-token stream reads hundreds of times; rescheduling a timeout twice a read cost more
        # than the read). `_waiting_since` is when the reader began to wait (None: it is busy).
        self._limits: tuple[float, float] | None = None  # (idle seconds, end: time.monotonic())
        self._waiting_since: float | None = None
        self._watch: asyncio.TimerHandle | None = None

    async def read(self) -> bytes:
        """The whole body."""
        # Taken as it arrives, like chunks(): left in the buffer, a body past HIGH_WATER would pause
        # reading from the backend and never be done.
        parts: list[bytes] = []
        while True:
            if self._chunks:
                parts.extend(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                conn = self._conn
                if conn is not None and conn.paused:
                    conn.resume()
            if self._done:
                break
            await self._wait()
        self._raise_if_broken()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def chunks(self, idle_s: float | None = None, end: float | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives: everything buffered since the last step, joined. With `idle_s`, StreamIdle
        when the backend is silent that long while this waits (the time the caller takes between steps does
        not count), or once time.monotonic() passes `end`."""
        if idle_s is not None:
            self._limits = (idle_s, end if end is not None else float("inf"))
        while True:
            if self._chunks:
                data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                conn = self._conn
                if conn is not None and conn.paused:
                    conn.resume()
                yield data
                continue
            if self._done:
                self._raise_if_broken()
                return
            if self._limits is None:
                await self._wait()
                continue
            self._waiting_since = time.monotonic()
            if self._watch is None:
                self._arm(self._waiting_since)
            try:
                await self._wait()
            finally:
                self._waiting_since = None

    def _arm(self, now: float) -> None:
        assert self._limits is not None  # armed only for a stream with limits
        idle_s, end = self._limits
        since = self._waiting_since if self._waiting_since is not None else now
        delay = max(0.0, min(since + idle_s, end) - now)
        loop = asyncio.get_running_loop()
        self._watch = loop.call_at(loop.time() + delay, self._on_watch)

    def _on_watch(self) -> None:
        self._watch = None
        since = self._waiting_since
        if since is None or self._limits is None:
            return  # the reader is busy: its next wait arms the watch again
        idle_s, end = self._limits
        now = time.monotonic()
        if now >= min(since + idle_s, end) - 0.001:  # (timers may fire a clock tick early)
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(StreamIdle())
            return
        self._arm(now)  # the reader began waiting again since: look when that wait runs out

    def release(self) -> None:
        """Done with the answer: its connection goes back to the pool if the body was read to its end and
        the backend keeps the connection alive, else it is closed."""
        self._unwatch()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finished(reuse=self._done and self._error is None)

    def close(self) -> None:
        """Done with the answer, read or not: its connection is closed."""
        self._unwatch()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finished(reuse=False)

    def _unwatch(self) -> None:
        self._limits = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise self._error

    # --- fed by the connection -------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _end(self, error: WireError | None = None) -> None:
        if not self._done:
            self._done, self._error = True, error
            self._wake()


_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class _Connection(asyncio.Protocol):
    """One keep-alive connection to a backend; serves one request at a time."""

    __slots__ = ("_head", "_headers", "_keep_alive", "_parser", "_pool", "_response", "closed", "idle_since", "paused",
                 "transport")

    def __init__(self, pool: WirePool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: WireResponse | None = None
        self._head: asyncio.Future[None] | None = None  # the answer's head: status and headers
        self._headers: list[tuple[bytes, bytes]] = []
        self.closed = False
        self._keep_alive = False  # whether the last complete answer left the connection open for the next
        self.paused = False
        self.idle_since = 0.0

    def start(self, request: bytes) -> tuple[WireResponse, asyncio.Future[None]]:
        assert self.transport is not None  # connected
        self._response = response = WireResponse(self)
        self._head = head = asyncio.get_running_loop().create_future()
        self._headers = []
        self._keep_alive = False
        self.transport.write(request)
        return response, head

    def finished(self, reuse: bool) -> None:
        """The response's owner is done with it."""
        self._response, self._head = None, None
        if self.paused:
            self.resume()
        if reuse and not self.closed and self._keep_alive:
            self._pool.put_back(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.closed = True
        transport = self.transport
        if transport is not None:
            if transport.get_write_buffer_size():
                # Part of the request is still unsent: close() would wait until the backend read it all
                # (forever, from one that is stuck). abort() drops it and ends the connection now.
                transport.abort()
            else:
                transport.close()

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._response is None:
            self.abort()  # bytes nobody asked for: the connection's framing cannot be trusted any more
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"malformed HTTP response: {exc}"), BrokenBody(f"malformed framing: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.lost(self)
        response = self._response
        if response is None or response._done:
            return
        head = self._head
        if exc is None and head is not None and head.done() and _ends_with_connection(response.headers):
            # A body framed by the connection's end: an orderly close is its end; a reset (exc set)
            # truncated it.
            response._end()
            return
        self._fail(Disconnected("the backend closed the connection"),
                   BrokenBody("the backend closed the connection mid-response"))

    def _fail(self, before_head: WireError, in_body: WireError) -> None:
        head, response = self._head, self._response
        if head is not None and not head.done():
            head.set_exception(before_head)
        elif response is not None:
            response._end(in_body)

    # --- httptools callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        response = self._response
        if response is not None and response._done:
            # A second message after the answer, or the start of one: not the answer's body, and left in
            # the parser it would be read as the head of the next request's answer. The error stops the
            # parse here (data_received closes the connection); the answer itself stays whole.
            raise BadResponse("bytes after the answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        response, head = self._response, self._head
        if response is None or head is None or head.done():
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real head follows
            self._headers = []
            return
        response.status = status
        response.headers = CIMultiDictProxy(CIMultiDict(
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in self._headers))
        head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        response = self._response
        if response is not None and response.status >= 200:
            # Asked now: the parser forgets the message's flags once it is ready for the next one.
            self._keep_alive = self._parser.should_keep_alive()
            response._end()


def _ends_with_connection(headers: CIMultiDictProxy[str]) -> bool:
    """Whether a body is framed by the connection's end (no Content-Length, not chunked)."""
    return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()


class WirePool:
    """Keep-alive connections to one backend, and its POST."""

    def __init__(self, host: str, port: int, tls: bool, base_path: str, headers: dict[str, str],
                 keepalive_s: float = KEEPALIVE_S, ssl_context: ssl.SSLContext | None = None,
                 proxy: Proxy | None = None) -> None:
        self._host, self._port = host, port
        self._keepalive_s = keepalive_s
        # Built once per backend (app.upstream.client: with its ca_bundle, if any), never per connection.
        self._ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self._proxy = proxy
        default_port = 443 if tls else 80
        self._authority = host if port == default_port else f"{host}:{port}"
        if ":" in host and not host.startswith("["):  # an IPv6 literal
            self._authority = f"[{host}]" if port == default_port else f"[{host}]:{port}"
        self._base_path = base_path.rstrip("/")
        if proxy is not None and not tls:
            # Forwarded through the proxy: the request line names the whole URL (RFC 9112 3.2.2, absolute-form).
            self._base_path = f"http://{self._authority}{self._base_path}"
            if proxy.authorization:
                headers = {**headers, "proxy-authorization": proxy.authorization}
        self._fixed = b"".join(_header_line(k, v) for k, v in headers.items())
        self._heads: dict[tuple[str, str], bytes] = {}
        self._idle: deque[_Connection] = deque()  # the warmest last (reused first), the oldest first
        self._live: set[_Connection] = set()
        self._closed = False

    async def post(self, path: str, body: bytes, accept: str, connect_s: float,
                   extra_headers: dict[str, str] | None = None) -> WireResponse:
        """Send the request; return the answer once its head (status, headers) is in. Cancelled or failed
        before then, the connection is closed (which is what tells the backend to stop)."""
        head = self._heads.get((path, accept))
        if head is None:
            head = self._heads[(path, accept)] = (
                b"POST %s HTTP/1.1\r\nhost: %s\r\naccept: %s\r\n" % (
                    f"{self._base_path}/{path.lstrip('/')}".encode("latin-1"), self._authority.encode("latin-1"), accept.encode("latin-1"))
                + self._fixed)
        if extra_headers:
            head += b"".join(_header_line(k, v) for k, v in extra_headers.items())
        request = b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body)
        conn = self._reusable() or await self._connect(connect_s)
        response, answered = conn.start(request)
        try:
            await answered
        except BaseException:
            conn.finished(reuse=False)
            raise
        return response

    def put_back(self, conn: _Connection) -> None:
        if self._closed:
            conn.abort()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def lost(self, conn: _Connection) -> None:
        self._live.discard(conn)

    def close(self) -> None:
        """Close every connection, idle or in use."""
        self._closed = True
        for conn in list(self._live):
            conn.abort()
        self._idle.clear()

    def _reusable(self) -> _Connection | None:
        idle, now = self._idle, time.monotonic()
        # The oldest are swept from the bottom too: LIFO reuse never reaches them while a warmer one
        # serves the traffic, and after a burst they would stay open for good.
        while idle and (idle[0].closed or now - idle[0].idle_since >= self._keepalive_s):
            idle.popleft().abort()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_s:
                return conn
            conn.abort()
        return None

    async def _connect(self, connect_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        proxy = self._proxy
        try:
            async with asyncio.timeout(connect_s):
                if proxy is None:
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self), self._host, self._port, ssl=self._ssl,
                        server_hostname=self._host if self._ssl is not None else None)
                elif self._ssl is not None:
                    sock = await tunnel(proxy, self._host, self._port)
                    _, conn = await loop.create_connection(lambda: _Connection(self), sock=sock, ssl=self._ssl,
                                                           server_hostname=self._host)
                else:
                    _, conn = await loop.create_connection(lambda: _Connection(self), proxy.host, proxy.port)
        except TimeoutError:
            raise ConnectTimeout("the backend did not accept a connection in time") from None
        except ProxyRefused as exc:
            raise ConnectFailed("could not connect through the proxy", f"its proxy: {exc}") from None
        except ssl.SSLCertVerificationError as exc:
            # The usual cause behind a private CA or a self-signed server: say so (backends.<name>.ca_bundle).
            raise ConnectFailed("could not connect: SSLCertVerificationError",
                                f"its TLS certificate is not trusted ({exc.verify_message})") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"could not connect: {type(exc).__name__}") from None
        self._live.add(conn)
        return conn


def _header_line(name: str, value: str) -> bytes:
    """One request header line; a name or value that could end the line early is refused (a client's
    header passed on to a backend must never become two headers, or a second request)."""
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
        raise ValueError(f"header {name!r} has a line break or a colon in its name")
    return f"{name}: {value}\r\n".encode("latin-1", "backslashreplace")
