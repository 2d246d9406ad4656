"""A simulator fleet with a Responses-native backend and chat-only ones, and gateways in front of it."""

from __future__ import annotations

import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY, GLOBEX_KEY, NO_BREAKER, Fleet, start_gateway
from tests.support import Process, free_port, write_yaml

SIM = {"slots": 32, "prefill_tokens_per_s": 2e5, "tpot_ms": 1, "output": {"median": 12, "sigma": 0, "max": 12}}
LIMITED_KEY = "sk-test-limited-0123456789"


@pytest.fixture(scope="module")
def responses_fleet(tmp_path_factory) -> Fleet:
    ports = {n: free_port() for n in ("native", "chat", "chat2", "flaky", "tiny", "tinychat")}
    backends = {
        "native": dict(port=ports["native"], model="m-native", apis=["chat", "responses"], **SIM),
        "chat": dict(port=ports["chat"], model="m-chat", report="llamacpp", **SIM),
        "chat2": dict(port=ports["chat2"], model="m-chat2", **SIM),
        "flaky": dict(port=ports["flaky"], model="m-flaky", apis=["chat", "responses"], **SIM),
        # A small context: a chain outgrows it within a few turns.
        "tiny": dict(port=ports["tiny"], model="m-tiny", apis=["chat", "responses"], context_tokens=150, **SIM),
        "tinychat": dict(port=ports["tinychat"], model="m-tinychat", context_tokens=150, **SIM),
    }
    tmp = tmp_path_factory.mktemp("responses-fleet")
    proc = Process(["simulate", "--config", str(write_yaml(tmp / "f.yaml", {"simulator": {"seed": 7, "backends": backends}}))],
                   tmp / "f.log")
    for port in ports.values():
        proc.wait_listening(port)
    yield Fleet(ports, 7)
    proc.stop()


def responses_config(fleet: Fleet, store: dict | None = None) -> dict:
    def backend(name: str, model: str, apis: list[str]) -> dict:
        return {"base_url": f"http://127.0.0.1:{fleet.ports[name]}/v1", "model": model, "apis": apis}

    return {
        "server": {"host": "127.0.0.1", "port": 0},
        "auth": {"mode": "keys", "clients": [
            {"tenant": "acme", "key_sha256": hash_key(ACME_KEY)},
            {"tenant": "globex", "key_sha256": hash_key(GLOBEX_KEY)},
            {"tenant": "limited", "key_sha256": hash_key(LIMITED_KEY), "models": ["translated"]},
        ], "admin_keys": [hash_key(ADMIN_KEY)]},
        "backends": {
            "native": backend("native", "m-native", ["chat", "responses"]),
            "chat": backend("chat", "m-chat", ["chat"]),
            "chat2": backend("chat2", "m-chat2", ["chat"]),
            "flaky": backend("flaky", "m-flaky", ["chat", "responses"]),
            # The same server taken as chat-only: its Responses streams are translated from chat.
            "flaky-chat": backend("flaky", "m-flaky", ["chat"]),
            "tiny": backend("tiny", "m-tiny", ["chat", "responses"]),
            "tinychat": backend("tinychat", "m-tinychat", ["chat"]),
        },
        "reliability": NO_BREAKER,
        "models": {
            "native": {"backends": ["native"]},
            "translated": {"backends": ["chat"]},
            "cached": {"backends": ["chat2"], "cache": {"exact": {"enabled": True, "ttl_s": 300}}},
            "flaky": {"backends": ["flaky"], "retry": {"max_attempts": 1}},
            "flaky-translated": {"backends": ["flaky-chat"], "retry": {"max_attempts": 1}},
            "tiny": {"backends": ["tiny"]},
            "tinychat": {"backends": ["tinychat"]},
            "tiny-fallback": {"backends": ["tiny"], "context_fallback": "native"},
        },
        "responses": store or {},
    }


@pytest.fixture(scope="module")
def responses_gateway(responses_fleet, tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("responses-gw"), responses_fleet, responses_config(responses_fleet))
    yield gw
    gw.process.stop()
