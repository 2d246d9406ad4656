"""Intake limits: no client can hold the gateway's connections or memory by sending slowly, hugely or not at all.

A real gateway process on loopback with small limits, and raw sockets as the hostile clients.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import time

import httpx
import openai
import pytest

from app.http.intake import HeadWithBody
from tests.conftest import ACME_KEY, gateway_config, start_gateway
from tests.support import free_port

LIMITS = dict(header_timeout_s=1.0, body_timeout_s=1.0, max_header_bytes=16 * 1024, max_idle_connections=20,
              keep_alive_s=30.0)


@pytest.fixture(scope="module")
def bounded(fleet, tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("intake"), fleet, gateway_config(fleet, free_port(), **LIMITS))
    yield gw
    gw.process.stop()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def _read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def _closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        while s.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def _rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _chat(url: str) -> int:
    return httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=10,
                      json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).status_code


def test_slowloris_connections_are_closed_after_the_header_timeout(bounded):
    socks = [_connect(bounded.port) for _ in range(60)]
    for s in socks:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # keep trickling a header byte, as slowloris does
        for s in socks:
            try:
                s.sendall(b"X")
            except OSError:
                pass
        time.sleep(0.3)
    replies = [_read_all(s) for s in socks]
    assert all(r.startswith(b"HTTP/1.1 408") for r in replies), replies[:2]
    body = json.loads(replies[0].split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_timeout"
    assert _chat(bounded.url) == 200


def test_silent_connection_is_closed(bounded):
    s = _connect(bounded.port)
    assert _closed_by_server(s, within=3.0)


def test_slow_body_gets_408(bounded):
    s = _connect(bounded.port)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
              b"content-length: 100\r\n\r\n{\"model\":")
    reply = _read_all(s)
    assert reply.startswith(b"HTTP/1.1 408"), reply


def _answered_request(port: int) -> socket.socket:
    """A keep-alive connection that has had one whole request answered."""
    s = _connect(port)
    body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
              b"authorization: Bearer " + ACME_KEY.encode() + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


@pytest.mark.parametrize("second", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",  # its head never ends
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n{",  # its body never ends
])
def test_the_read_limits_hold_for_a_later_request_on_a_kept_alive_connection(bounded, second):
    s = _answered_request(bounded.port)
    time.sleep(0.3)  # the limits armed for the first request have moved on; the second's are its own
    started = time.monotonic()
    s.sendall(second)
    reply = _read_all(s)
    assert b"HTTP/1.1 408" in reply, reply[-300:]
    assert 0.9 <= time.monotonic() - started <= 4.0  # the 1 s limit, counted from the second request (not the first)


def test_unterminated_huge_header_is_refused_without_buffering_it(bounded):
    pid = bounded.process.proc.pid
    before = _rss_kb(pid)
    s = _connect(bounded.port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent = 0
    try:
        chunk = b"a" * 65536
        while sent < 64 * 1024 * 1024:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    reply = _read_all(s)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:100]
    assert sent < 8 * 1024 * 1024  # the server closed long before 64 MiB
    assert _rss_kb(pid) - before < 8 * 1024


def test_malformed_http_gets_an_openai_shaped_400(bounded):
    s = _connect(bounded.port)
    s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
    reply = _read_all(s)
    assert reply.startswith(b"HTTP/1.1 400")
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "invalid_http"


def test_idle_keep_alive_connections_are_capped(bounded):
    socks = []
    for _ in range(60):
        s = _connect(bounded.port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        socks.append(s)
    time.sleep(0.3)
    still_open = [s for s in socks if not _closed_by_server(s, within=0.05)]
    assert len(still_open) <= LIMITS["max_idle_connections"]
    assert _chat(bounded.url) == 200


def test_idle_connections_cannot_exhaust_the_file_limit(fleet, tmp_path):
    gw = start_gateway(tmp_path, fleet, gateway_config(fleet, free_port(), keep_alive_s=60.0))
    try:
        resource.prlimit(gw.process.proc.pid, resource.RLIMIT_NOFILE, (256, 256))
        socks = []
        for _ in range(300):
            try:
                s = _connect(gw.port)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(65536)
                socks.append(s)
            except OSError:
                pass
        assert [_chat(gw.url) for _ in range(5)] == [200] * 5
        for s in socks:
            s.close()
    finally:
        gw.process.stop()


def test_a_connection_the_openai_sdk_reuses_is_still_open_when_its_request_comes(gateway):
    # The OpenAI SDK's pool reuses a connection idle under its keep-alive expiry (httpx's, 5 s) unless the server
    # has visibly closed it, then writes the request: a server closing a connection idle just that long may close
    # it between the two, and the request fails. On a loaded box they are far enough apart for it to happen: a
    # real #24 bench run lost a request on a connection idle 5.003 s against the gateway's 5 s, and an aiohttp
    # client 4 of 40 sent just at a 0.5 s keep-alive (the SDK's retries, off here, hide it by default). The pause
    # puts 1.5 s between them; the gateway keeps an idle connection open well past the client's expiry.
    pause, events = [0.0], []

    def trace(event: str, info: dict) -> None:
        events.append(event)
        if event == "http11.send_request_headers.started":
            time.sleep(pause[0])  # the client has checked the connection and not yet written on it

    def traced(request) -> None:
        request.extensions["trace"] = trace

    expiry = openai._constants.DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert expiry is not None
    body = dict(model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    with gateway.client(http_client=openai.DefaultHttpxClient(event_hooks={"request": [traced]})) as client:
        client.chat.completions.create(**body)
        answered = time.monotonic()
        time.sleep(expiry - 1.0)  # a second of slack for a late wake-up on a loaded box
        assert time.monotonic() - answered < expiry  # the pool still holds the connection
        pause[0] = 1.5  # written at 5.5 s idle, past a keep-alive as long as the client's
        events.clear()
        assert client.chat.completions.create(**body).choices
    assert not [e for e in events if e.startswith("connection.connect_tcp")]  # on the connection reused


class _CountingTransport:
    """A real loopback transport that also lists its writes (each write is a syscall: their count is the point)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport, self.writes = transport, []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()


def _writes_of(steps) -> list[bytes]:
    """What a response's transport wrote, as the socket got it, when a cycle's writes go through HeadWithBody."""

    async def run() -> list[bytes]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        counting = _CountingTransport(writer.transport)  # type: ignore[arg-type]
        await steps(HeadWithBody(counting, asyncio.get_running_loop()))  # type: ignore[arg-type]
        server.close()
        return counting.writes

    return asyncio.run(run())


def test_a_response_head_goes_out_with_its_body_in_one_write():
    async def steps(out: HeadWithBody) -> None:
        out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        out.write(b"{}")
        await asyncio.sleep(0)

    assert _writes_of(steps) == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]


def test_a_head_whose_body_is_not_ready_leaves_within_the_loop_turn_and_later_writes_pass_straight_on():
    async def steps(out: HeadWithBody) -> None:
        out.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await asyncio.sleep(0)  # the stream's first event is not here yet
        out.write(b"5\r\nhello\r\n")
        out.write(b"0\r\n\r\n")

    assert _writes_of(steps) == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", b"5\r\nhello\r\n",
                                 b"0\r\n\r\n"]


def test_closing_writes_a_held_head_first():
    async def steps(out: HeadWithBody) -> None:
        out.write(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n")
        out.close()  # the app failed after starting its answer: the head still goes, then the connection closes

    assert _writes_of(steps) == [b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n"]
