"""One pooled HTTP client per backend, built at start-up: the transport seam of the gateway."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from app.config import BackendConfig
from app.errors import GatewayError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnreachable

# Backend headers a client may see; everything else (cookies, server banners, hop-by-hop and
# body framing) stays on the backend's side of the gateway.
_RELAYED_HEADERS = frozenset({"x-request-id", "openai-processing-ms", "retry-after"})
_RELAYED_PREFIXES = ("x-ratelimit-",)


@dataclass(frozen=True, slots=True)
class Backend:
    """A configured backend with its client: what the rest of the pipeline addresses."""

    name: str
    config: BackendConfig
    client: httpx.AsyncClient

    @property
    def address(self) -> str:
        return self.client.base_url.host

    @property
    def port(self) -> int | None:
        return self.client.base_url.port


def build_backend(name: str, config: BackendConfig) -> Backend:
    """Create the backend's pooled client; must run inside the event loop that will use it."""
    headers = {"accept-encoding": "identity", "user-agent": "slipstream"}
    if config.api_key is not None:
        headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=config.max_concurrency, keepalive_timeout=30, ttl_dns_cache=300),
        auto_decompress=False,
        trust_env=False,
    )
    t = config.timeouts
    client = httpx.AsyncClient(
        transport=AiohttpTransport(client=session),
        base_url=config.base_url.rstrip("/") + "/",
        headers=headers,
        timeout=httpx.Timeout(connect=t.connect_s, read=t.read_s, write=t.read_s, pool=t.connect_s + t.read_s),
        trust_env=False,
    )
    return Backend(name, config, client)


async def open_response(backend: Backend, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> httpx.Response:
    """Send one request and return the response with its body still unread (a stream)."""
    request = backend.client.build_request(method, path, content=body, headers=headers)
    with map_transport_errors(backend.name):
        return await backend.client.send(request, stream=True)


def response_headers(response: httpx.Response) -> dict[str, str]:
    """The backend's headers worth relaying to the client."""
    return {
        k: v for k, v in response.headers.items() if k in _RELAYED_HEADERS or k.startswith(_RELAYED_PREFIXES)
    }


class map_transport_errors:
    """Turn transport exceptions into gateway errors that never mention the backend's key or URL path."""

    __slots__ = ("_name",)

    def __init__(self, backend_name: str) -> None:
        self._name = backend_name

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or isinstance(exc, GatewayError):
            return False
        name = self._name
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            raise UpstreamTimeout(f"backend {name} timed out") from None
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            # httpx-aiohttp maps a dropped connection (ClientConnectionError) to ConnectTimeout, so the
            # cause decides between "could not connect" and "connection lost".
            if isinstance(exc.__cause__, aiohttp.ServerDisconnectedError):
                raise UpstreamProtocolError(f"backend {name} closed the connection") from None
            if isinstance(exc.__cause__, (aiohttp.ServerTimeoutError, aiohttp.ConnectionTimeoutError)):
                raise UpstreamTimeout(f"backend {name} timed out") from None
            raise UpstreamUnreachable(f"backend {name} is unreachable") from None
        if isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError, aiohttp.ClientPayloadError)):
            raise UpstreamProtocolError(f"backend {name} closed the connection mid-response") from None
        if isinstance(exc, (httpx.HTTPError, aiohttp.ClientError, OSError)):
            raise UpstreamUnreachable(f"backend {name} failed: {type(exc).__name__}") from None
        return False
