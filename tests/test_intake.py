"""Intake limits: no client can hold the gateway's connections or memory by sending slowly, hugely or not at all.

A real gateway process on loopback with small limits, and raw sockets as the hostile clients.
"""

from __future__ import annotations

import json
import resource
import socket
import time

import httpx
import pytest

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
