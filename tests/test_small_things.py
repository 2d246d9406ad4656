"""Small rules in the same spirit: bounded cache TTLs, one Authorization header, honest sampling, clamped spans."""

from __future__ import annotations

import socket
import time

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.config import TracingConfig
from app.protocols import CHAT
from app.record import RequestRecord
from app.telemetry.tracing import Tracing, clamp_number
from app.upstream.scripted import ScriptedTransport
from tests.conftest import ACME_KEY, GLOBEX_KEY, gateway_config, start_gateway
from tests.scripted import config, run
from tests.support import free_port, wait_until

SAMPLED_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_client_chosen_cache_ttl_is_capped_by_config():
    async def scenario(gw):
        req = CHAT.parse(orjson.dumps({"model": "chat", "temperature": 0,
                                                         "messages": [{"role": "user", "content": "hi"}]}))
        policy = gw.config.models["chat"].cache
        plan = gw.cache.plan("acme", req, policy, {"x-slipstream-cache-ttl": "50000000"})
        return plan.ttl_s, policy.max_client_ttl_s

    ttl, cap = run(config(), ScriptedTransport([]), scenario)
    assert ttl == cap == 86400


def test_incoming_sampled_traceparent_does_not_force_sampling():
    def recording(trust: bool) -> bool:
        tracing = Tracing(TracingConfig(enabled=True, sample_ratio=0.0, trust_parent_sampling=trust), InMemorySpanExporter())
        record = RequestRecord("r", "chat/completions", time.perf_counter())
        return tracing.start_request(record, "POST", "/v1/chat/completions", SAMPLED_PARENT).is_recording()

    assert recording(trust=False) is False
    assert recording(trust=True) is True


def test_numeric_span_attributes_are_clamped():
    assert clamp_number(10**30) == 2**63 - 1
    assert clamp_number(-(10**30)) == -(2**63)
    assert clamp_number(float("inf")) is None and clamp_number(float("nan")) is None
    assert clamp_number(True) is None and clamp_number("7") is None
    assert clamp_number(0.7) == 0.7


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and b"}}" in out:
                break
    return out


def test_duplicate_authorization_headers_are_refused_everywhere(gateway):
    body = b'{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
    two = f"Authorization: Bearer {GLOBEX_KEY}\r\nAuthorization: Bearer {ACME_KEY}\r\n".encode()
    chat = _raw(gateway.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + two
                + b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
    models = _raw(gateway.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + two + b"connection: close\r\n\r\n")
    for reply in (chat, models):
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
        assert b'"duplicate_authorization"' in reply


def test_log_level_debug_turns_on_the_gateways_own_debug_lines(fleet, tmp_path):
    gw = start_gateway(tmp_path, fleet, gateway_config(fleet, free_port(), log_level="debug"))
    try:
        gw.client().chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert wait_until(lambda: "slipstream.request" in gw.process.log() and "tenant=acme" in gw.process.log())
    finally:
        gw.process.stop()
