"""A lean Redis client for the limiter's one command (EVALSHA): one connection, calls pipelined.

Measured with bench/limiter.py on the 2-core box, redis-py's asyncio client cost about 300-400 us of
CPU per admission plus settlement (pool checkout, connection bookkeeping, its parser), as much as the
whole gateway spends on a request. Here every call writes its command at once on one shared
connection and waits for its reply; Redis answers in order, so replies are matched first in, first
out. Commands issued in the same turn of the event loop leave in one write (one system call). A call
that times out leaves its slot in the queue and its late reply is dropped.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from urllib.parse import unquote, urlparse

# Replies owed on one connection beyond which it is taken as stuck (a server that stopped answering)
# and dropped, rather than left to grow a queue of calls that will all time out.
_STUCK_AFTER = 256


class RespError(Exception):
    """An error reply from Redis (`-ERR ...`, `-NOSCRIPT ...`)."""


class RespConnectionError(ConnectionError):
    """The connection failed, closed, or a reply did not come in time."""


class RespClient:
    def __init__(self, url: str, timeout_s: float, connect_timeout_s: float) -> None:
        u = urlparse(url)
        self._host, self._port = u.hostname or "127.0.0.1", u.port or 6379
        self._ssl = ssl.create_default_context() if u.scheme == "rediss" else None
        self._username = unquote(u.username) if u.username else None
        self._password = unquote(u.password) if u.password else None
        path = (u.path or "/").strip("/")
        self._db = int(path) if path.isdigit() else 0
        self._timeout_s, self._connect_timeout_s = timeout_s, connect_timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[asyncio.Future] = deque()
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Future | None = None
        self._out: list[bytes] = []

    async def call(self, *args: str | bytes | float) -> object:
        """Send one command and return its reply (bytes, int, list, None); raises RespError or RespConnectionError."""
        return await self.call_encoded(encode(args))

    async def call_encoded(self, command: bytes) -> object:
        """`call` for a command already in RESP (see `encode` and `bulk`)."""
        if self._writer is None:
            await self._connect()
        future = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(command)
        try:
            reply = await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            if len(self._pending) > _STUCK_AFTER:
                self._drop(RespConnectionError("redis stopped answering"))  # reconnect on the next call
            raise RespConnectionError(f"no reply from redis within {self._timeout_s * 1000:.0f} ms") from None
        if isinstance(reply, RespError):
            raise reply
        return reply

    async def _connect(self) -> asyncio.StreamWriter:
        # Calls that arrive while connecting wait for the same connection.
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        self._connecting = asyncio.get_running_loop().create_future()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl), self._connect_timeout_s)
            self._reader_task = asyncio.get_running_loop().create_task(self._read_replies(reader))
            self._writer = writer
            if self._password is not None:
                await self._handshake(("AUTH", self._username, self._password) if self._username else ("AUTH", self._password))
            if self._db:
                await self._handshake(("SELECT", self._db))
        except (OSError, TimeoutError, RespError) as exc:
            self._drop(RespConnectionError(f"cannot connect to redis at {self._host}:{self._port}: {exc!r}"))
            self._connecting.set_exception(RespConnectionError(str(exc)))
            self._connecting.exception()  # retrieved: no "never retrieved" warning
            self._connecting = None
            raise RespConnectionError(f"cannot connect to redis at {self._host}:{self._port}: {exc!r}") from None
        self._connecting.set_result(writer)
        self._connecting = None
        return writer

    def _flush(self) -> None:
        if self._out and self._writer is not None:
            self._writer.write(b"".join(self._out))
        self._out.clear()

    async def _handshake(self, args: tuple) -> None:
        future = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        assert self._writer is not None  # called by _connect, after it opened the stream
        self._writer.write(encode(args))
        reply = await asyncio.wait_for(future, self._connect_timeout_s)
        if isinstance(reply, RespError):
            raise reply

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                reply = await _read(reader)
                future = self._pending.popleft()
                if not future.done():
                    future.set_result(reply)
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            self._drop(RespConnectionError(f"redis connection lost: {exc!r}"))
        except asyncio.CancelledError:
            self._drop(RespConnectionError("redis client closed"))
            raise

    def _drop(self, exc: Exception) -> None:
        """Forget the connection; every call waiting on it fails (the next call reconnects)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._out.clear()
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(exc)
                future.exception()

    async def aclose(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        self._drop(RespConnectionError("redis client closed"))


def encode(args) -> bytes:
    """A command in RESP: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(map(bulk, args))


def bulk(a: str | bytes | float) -> bytes:
    b = a if type(a) is bytes else str(a).encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


async def _read(reader: asyncio.StreamReader):
    line = await reader.readuntil(b"\r\n")
    kind, rest = line[:1], line[1:-2]
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = await reader.readexactly(n + 2)
        return data[:-2]
    if kind == b":":
        return int(rest)
    if kind == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [await _read(reader) for _ in range(n)]
    if kind == b"+":
        return rest
    if kind == b"-":
        return RespError(rest.decode(errors="replace"))
    raise ValueError(f"unexpected reply from redis: {line[:40]!r}")
