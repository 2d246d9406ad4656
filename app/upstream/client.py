"""The pooled HTTP clients of each backend, built at start-up: the transport seam of the gateway.

A proxied call goes over the backend's `wire` (app.upstream.wire: a narrow HTTP/1.1 POST on httptools,
a fifth of aiohttp's CPU per call). Health probes, discovery and the tools use its aiohttp `session`,
off the hot path. httpx was dropped earlier: its own transport collapses under concurrency here
(shared/NOTES.md), and building its request objects cost about a third of the gateway's CPU per call.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import warnings
from dataclasses import dataclass
from typing import Literal

import aiohttp
from yarl import URL

from app.config import BackendConfig
from app.errors import (
    GatewayError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.upstream.adapters import Adapter, adapter_for
from app.upstream.proxy import Proxy
from app.upstream.wire import (
    BadResponse,
    BrokenBody,
    ConnectFailed,
    ConnectTimeout,
    Disconnected,
    StreamIdle,
    WireError,
    WirePool,
    WireResponse,
)

# Backend headers a client may see; everything else (cookies, server banners, hop-by-hop and
# body framing) stays on the backend's side of the gateway.
_RELAYED_HEADERS = ("x-request-id", "openai-processing-ms", "retry-after")
_RELAYED_PREFIX = "x-ratelimit-"


@dataclass(frozen=True, slots=True)
class Backend:
    """A configured backend with its pooled session: what the rest of the pipeline addresses."""

    name: str
    config: BackendConfig
    session: aiohttp.ClientSession
    base: URL
    headers: dict[str, str]
    urls: dict[str, URL]
    adapter: Adapter  # what this kind of server does its own way
    wire: WirePool  # the proxied calls' connections
    secret: bytes | None = None  # the configured API key, to redact from anything relayed
    proxy: Proxy | None = None  # the HTTP proxy it is reached through (backends.<name>.proxy)

    @property
    def host(self) -> str:
        return self.base.host or ""

    @property
    def port(self) -> int:
        return self.base.port or (443 if self.base.scheme == "https" else 80)

    @property
    def first_hop(self) -> tuple[str, int]:
        """Where a connection to this backend goes first: its proxy, if it has one (what /readyz probes)."""
        return (self.proxy.host, self.proxy.port) if self.proxy is not None else (self.host, self.port)

    def url(self, path: str) -> URL:
        # Endpoint URLs are joined once and reused: yarl's join is not free on the hot path.
        url = self.urls.get(path)
        if url is None:
            url = self.urls[path] = self.base.joinpath(path, encoded=True)
        return url

    async def aclose(self) -> None:
        self.wire.close()
        await self.session.close()


def streams_json(backend: Backend) -> bool:
    """Whether a JSON client's chat or text completion to this backend is streamed upstream and assembled
    (only where the stream's usage is asked for, so the answer keeps it): its first token is then seen."""
    if not backend.config.stream_usage:
        return False
    flag = backend.config.stream_upstream
    return backend.adapter.stream_upstream if flag is None else flag


def build_backend(name: str, config: BackendConfig) -> Backend:
    """Create the backend's pooled session; must run inside the event loop that will use it."""
    headers = {"accept-encoding": "identity", "user-agent": "slipstream", "content-type": "application/json"}
    if config.api_key is not None:
        headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"
    base = URL(config.base_url.rstrip("/"))
    tls = base.scheme == "https"
    # One TLS context and one proxy per backend, shared by the proxied calls (wire) and the probes (session):
    # the system's CAs, or only those of backends.<name>.ca_bundle. The environment's HTTPS_PROXY is never read
    # (trust_env=False): each backend names its own proxy, or has none.
    context = ssl.create_default_context(cafile=config.ca_bundle) if tls else None
    proxy_url = URL(config.proxy.get_secret_value()) if config.proxy is not None else None
    proxy = Proxy.from_url(str(proxy_url)) if proxy_url is not None else None
    with warnings.catch_warnings():
        # aiohttp takes a session-wide proxy login only as proxy_auth, which it marks deprecated (for v4) in
        # favour of per-request proxy_headers; the probes' few calls do not pass headers of their own.
        warnings.simplefilter("ignore", DeprecationWarning)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=config.max_concurrency, keepalive_timeout=30, ttl_dns_cache=300,
                                           ssl=context if context is not None else True),
            # Read, first-token and total limits are enforced per attempt (app.upstream.attempt).
            timeout=_connect_timeout(config.timeouts.connect_s),
            auto_decompress=False,
            trust_env=False,
            skip_auto_headers=("user-agent",),
            proxy=proxy_url.with_user(None) if proxy_url is not None else None,
            proxy_auth=aiohttp.BasicAuth.from_url(proxy_url) if proxy_url is not None else None,
        )
    secret = config.api_key.get_secret_value().encode() if config.api_key is not None else None
    # The host as the wire carries it: an internationalised name in its ASCII (IDNA) form, for the Host header.
    wire = WirePool(base.raw_host or "", base.port or (443 if tls else 80), tls, base.raw_path, headers,
                    ssl_context=context, proxy=proxy)
    return Backend(name, config, session, base, headers, {}, adapter_for(config.flavor), wire, secret or None, proxy)


async def open_response(backend: Backend, path: str, body: bytes, accept: str, connect_s: float,
                        extra_headers: dict[str, str] | None = None) -> WireResponse:
    """POST a body and return the response with its body still unread."""
    with map_transport_errors(backend.name):
        return await backend.wire.post(path, body, accept, connect_s, extra_headers)


@functools.cache
def _connect_timeout(connect_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=None)


def response_headers(response: WireResponse) -> dict[str, str]:
    """The backend's headers worth relaying to the client."""
    out = {}
    for key, value in response.headers.items():
        k = key.lower()
        if k in _RELAYED_HEADERS or k.startswith(_RELAYED_PREFIX):
            # The gateway's own x-request-id names the call in its traces; the backend's stays visible.
            out["x-upstream-request-id" if k == "x-request-id" else k] = value
    return out


class map_transport_errors:
    """Turn transport exceptions into gateway errors that never mention the backend's key or URL."""

    __slots__ = ("_name",)

    def __init__(self, backend_name: str) -> None:
        self._name = backend_name

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc is None or isinstance(exc, (GatewayError, asyncio.CancelledError, StreamIdle)):
            return False  # (a stream's silence is its caller's to word: it knows which limit it set)
        name = self._name
        if isinstance(exc, WireError):
            raise _wire_error(name, exc) from None
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            raise UpstreamTimeout(f"backend {name} did not accept a connection in time", code="connect_timeout") from None
        if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            raise UpstreamTimeout(f"backend {name} timed out") from None
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise UpstreamUnreachable(f"backend {name} is unreachable") from None
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            raise UpstreamProtocolError(f"backend {name} closed the connection") from None
        if isinstance(exc, aiohttp.ClientPayloadError):
            raise UpstreamProtocolError(f"backend {name} closed the connection mid-response") from None
        if isinstance(exc, (aiohttp.ClientError, OSError)):
            raise UpstreamUnreachable(f"backend {name} failed: {type(exc).__name__}") from None
        return False


def _wire_error(name: str, exc: WireError) -> GatewayError:
    """The proxied call's transport failures, worded as aiohttp's were (probes keep aiohttp's)."""
    if isinstance(exc, ConnectTimeout):
        return UpstreamTimeout(f"backend {name} did not accept a connection in time", code="connect_timeout")
    if isinstance(exc, ConnectFailed):
        return UpstreamUnreachable(f"backend {name} is unreachable" + (f": {exc.detail}" if exc.detail else ""))
    if isinstance(exc, Disconnected):
        return UpstreamProtocolError(f"backend {name} closed the connection")
    if isinstance(exc, BrokenBody):
        return UpstreamProtocolError(f"backend {name} closed the connection mid-response")
    if isinstance(exc, BadResponse):
        return UpstreamProtocolError(f"backend {name} did not answer with valid HTTP")
    return UpstreamUnreachable(f"backend {name} failed: {type(exc).__name__}")
