"""An HTTP proxy between the gateway and one backend (`backends.<name>.proxy`): where the upstream hop connects
first, and the CONNECT tunnel an https backend is reached through.

An https backend is tunnelled (CONNECT host:port, then TLS with the backend itself, end to end: the proxy sees
neither the key nor the prompts); an http backend is forwarded (the proxy is sent the request with the absolute
URL), as HTTP clients do (httpx, curl, requests): proxies commonly allow CONNECT to port 443 only. Nothing here
repeats the proxy's URL or credentials in an error.
"""

from __future__ import annotations

import asyncio
import base64
import socket
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

_MAX_HEAD = 16 * 1024  # a CONNECT answer's head; more is not a proxy speaking HTTP


class ProxyRefused(OSError):
    """The proxy answered the CONNECT with something other than 2xx, or not in HTTP."""


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = None  # the Proxy-Authorization header's value, from the URL's user:password

    @classmethod
    def from_url(cls, url: str) -> Proxy:
        """A checked `http://[user:password@]host[:port]` URL (app.config checks it at load time)."""
        parts = urlsplit(url)
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return cls(parts.hostname or "", parts.port or 80, auth)


async def tunnel(proxy: Proxy, host: str, port: int) -> socket.socket:
    """A connected socket through `proxy` to host:port (CONNECT answered 2xx), ready for TLS. The caller bounds
    the time (its connect timeout covers the tunnel too)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
    last: OSError = OSError("the proxy's name resolves to no address")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        try:
            await _connect(loop, sock, proxy, host, port)
        except BaseException:
            sock.close()
            raise
        return sock
    raise last


async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket, proxy: Proxy, host: str, port: int) -> None:
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n"
    if proxy.authorization:
        head += f"proxy-authorization: {proxy.authorization}\r\n"
    await loop.sock_sendall(sock, (head + "\r\n").encode("latin-1"))
    answer = b""
    # Read to the end of the head only: what follows it is the backend's (TLS) and must stay in the socket.
    while not answer.endswith(b"\r\n\r\n"):
        byte = await loop.sock_recv(sock, 1)
        if not byte or len(answer) > _MAX_HEAD:
            raise ProxyRefused("the proxy closed the connection instead of answering CONNECT")
        answer += byte
    status_line = answer.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/") or not status_line[1].startswith(b"2"):
        status = status_line[1].decode("latin-1", "replace") if len(status_line) > 1 else "?"
        raise ProxyRefused(f"the proxy refused the tunnel (status {status})")
