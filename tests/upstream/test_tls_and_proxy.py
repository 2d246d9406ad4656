"""A backend behind a private CA (`ca_bundle`) and behind an HTTP proxy (`proxy`), through a real gateway process.

The backend is a simulator behind a TLS terminator on loopback whose certificate a CA made here signed; the proxy
is a small CONNECT and forwarding proxy that records what it was asked. Both run in a thread of this process.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import gateway_config, start_gateway
from tests.support import free_port, make_ca_and_leaf

ASK = [{"role": "user", "content": "hello over tls"}]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _join(a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


class Loopback:
    """A TLS terminator in front of a plain backend port, and an HTTP proxy, on loopback ports in one thread."""

    def __init__(self, cert: Path, key: Path, backend_port: int) -> None:
        self.tls_port, self.proxy_port = free_port(), free_port()
        self.backend_port = backend_port
        self.asked: list[str] = []  # the proxy's request lines, as it got them
        self.proxy_auth: list[str | None] = []
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert, key)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._servers = [await asyncio.start_server(self._terminate, "127.0.0.1", self.tls_port, ssl=self._context),
                         await asyncio.start_server(self._proxy, "127.0.0.1", self.proxy_port)]

    async def _terminate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _join((reader, writer), await asyncio.open_connection("127.0.0.1", self.backend_port))

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, *fields = head.decode("latin-1").split("\r\n")
        self.asked.append(line)
        self.proxy_auth.append(next((f.split(":", 1)[1].strip() for f in fields if f.lower().startswith("proxy-authorization:")), None))
        method, target, version = line.split(" ")
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await _join((reader, writer), upstream)
            return
        # Forwarded: the request line names the whole URL; the origin server is sent its path.
        url = httpx.URL(target)
        upstream = await asyncio.open_connection(url.host, url.port)
        rest = [f for f in fields if f and not f.lower().startswith("proxy-authorization:")]
        upstream[1].write(f"{method} {url.raw_path.decode()} {version}\r\n".encode()
                          + "".join(f + "\r\n" for f in rest).encode("latin-1") + b"\r\n")
        await _join((reader, writer), upstream)

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="module")
def tls(fleet, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca_and_leaf(folder)
    servers = Loopback(cert, key, fleet.ports["fast"])
    yield ca, servers
    servers.stop()


def _gateway(tmp_path, fleet, backend: dict):
    config = gateway_config(fleet, 0)
    config["backends"]["b"] = {"model": "m-fast", "flavor": "llamacpp", "timeouts": {"connect_s": 3}, **backend}
    config["models"]["b"] = {"backends": ["b"], "retry": {"max_attempts": 1}}
    return start_gateway(tmp_path, fleet, config)


def _ask(gw) -> openai.types.chat.ChatCompletion:
    return gw.client().chat.completions.create(model="b", messages=ASK, max_tokens=8)


def test_a_backend_behind_a_private_ca_is_trusted_with_its_ca_bundle(fleet, tls, tmp_path):
    ca, servers = tls
    gw = _gateway(tmp_path, fleet, {"base_url": f"https://localhost:{servers.tls_port}/v1", "ca_bundle": str(ca)})
    try:
        assert _ask(gw).choices[0].message.content
        stream = gw.client().chat.completions.create(model="b", messages=ASK, max_tokens=8, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        gw.process.stop()


def test_without_its_ca_bundle_the_same_backend_is_refused(fleet, tls, tmp_path):
    _, servers = tls
    gw = _gateway(tmp_path, fleet, {"base_url": f"https://localhost:{servers.tls_port}/v1"})
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            _ask(gw)
        assert caught.value.status_code == 502
        assert "backend b is unreachable: its TLS certificate is not trusted (unable to get local issuer certificate)" \
            in caught.value.message
    finally:
        gw.process.stop()


def test_an_https_backend_is_tunnelled_through_its_proxy_with_tls_end_to_end(fleet, tls, tmp_path):
    ca, servers = tls
    before = len(servers.asked)
    gw = _gateway(tmp_path, fleet, {"base_url": f"https://localhost:{servers.tls_port}/v1", "ca_bundle": str(ca),
                                    "proxy": f"http://gw:pr0xy-pw@127.0.0.1:{servers.proxy_port}"})
    try:
        assert _ask(gw).choices[0].message.content
        readyz = httpx.get(f"{gw.url}/readyz", timeout=5)
    finally:
        gw.process.stop()
    # The proxied call and the load probes alike: tunnelled, logged in (gw:pr0xy-pw), never sent in the clear.
    asked = servers.asked[before:]
    assert asked and all(line == f"CONNECT localhost:{servers.tls_port} HTTP/1.1" for line in asked)
    assert set(servers.proxy_auth[before:]) == {"Basic Z3c6cHIweHktcHc="}
    assert readyz.status_code == 200  # the probe reaches the backend's first hop, the proxy
    assert "pr0xy-pw" not in gw.process.log()


def test_an_http_backend_is_forwarded_through_its_proxy(fleet, tls, tmp_path):
    _, servers = tls
    before = len(servers.asked)
    gw = _gateway(tmp_path, fleet, {"base_url": f"http://127.0.0.1:{fleet.ports['fast']}/v1",
                                    "proxy": f"http://127.0.0.1:{servers.proxy_port}"})
    try:
        assert _ask(gw).choices[0].message.content
    finally:
        gw.process.stop()
    # The proxied call and the load probes (llama.cpp's /health, /slots) all go through it.
    asked = servers.asked[before:]
    assert f"POST http://127.0.0.1:{fleet.ports['fast']}/v1/chat/completions HTTP/1.1" in asked
    assert all(line.split(" ")[1].startswith(f"http://127.0.0.1:{fleet.ports['fast']}/") for line in asked)
    assert servers.proxy_auth[before:] == [None] * len(asked)


def test_a_proxy_that_refuses_the_tunnel_is_a_502_naming_it_without_its_url(fleet, tls, tmp_path):
    ca, servers = tls
    # Nothing answers CONNECT at the simulator's port in HTTP: it says 404 (or closes) to a CONNECT.
    gw = _gateway(tmp_path, fleet, {"base_url": f"https://localhost:{servers.tls_port}/v1", "ca_bundle": str(ca),
                                    "proxy": f"http://u:pw-xyz@127.0.0.1:{fleet.ports['slow']}"})
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            _ask(gw)
    finally:
        gw.process.stop()
    assert caught.value.status_code == 502 and "backend b is unreachable: its proxy: the proxy" in caught.value.message
    assert "pw-xyz" not in caught.value.message and "pw-xyz" not in gw.process.log()
