"""Fixtures: a real simulator fleet and a real gateway process on loopback ports, shared per session."""

from __future__ import annotations

from dataclasses import dataclass

import openai
import pytest

from app.admission.auth import hash_key
from tests.support import Process, RedisServer, free_port, set_faults, write_yaml

ACME_KEY = "sk-test-acme-0123456789"
GLOBEX_KEY = "sk-test-globex-0123456789"
ADMIN_KEY = "sk-test-admin-0123456789"
SEED = 11
MAX_BODY = 64 * 1024

FAST = dict(slots=64, prefill_tokens_per_s=1e9, tpot_ms=0, output=dict(median=24, sigma=0.3, max=64))


@dataclass
class Fleet:
    ports: dict[str, int]
    seed: int


@dataclass
class Gateway:
    url: str
    port: int
    process: Process
    fleet: Fleet

    def client(self, key: str = ACME_KEY, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kw)

    def async_client(self, key: str = ACME_KEY, **kw) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kw)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory) -> Fleet:
    names = ["fast", "slow", "flaky", "hang", "tgi", "embed"]
    ports = {n: free_port() for n in names}
    sim = {
        "seed": SEED,
        "backends": {
            # Serves /v1/responses and /v1/messages natively, as the llama.cpp it imitates does (its flavour says
            # it speaks them): the gateway passes both through.
            "fast": dict(port=ports["fast"], model="m-fast", report="llamacpp",
                         apis=["chat", "completions", "embeddings", "responses", "messages"], **FAST),
            "slow": dict(port=ports["slow"], model="m-slow", slots=2, tpot_ms=40, prefill_tokens_per_s=1e9),
            "flaky": dict(port=ports["flaky"], model="m-flaky", **FAST),
            "hang": dict(port=ports["hang"], model="m-hang", faults=dict(hang_rate=1.0), **FAST),
            "tgi": dict(port=ports["tgi"], model="m-tgi", report="tgi", **FAST),
            "embed": dict(port=ports["embed"], model="m-embed", embedding_dim=8, **FAST),
        },
    }
    tmp = tmp_path_factory.mktemp("fleet")
    path = write_yaml(tmp / "fleet.yaml", {"simulator": sim})
    proc = Process(["simulate", "--config", str(path)], tmp / "fleet.log")
    for port in ports.values():
        proc.wait_listening(port)
    yield Fleet(ports, SEED)
    proc.stop()


# The shared gateway never ejects a backend, so each error test sees the same fleet; breaker tests
# start their own gateway.
NO_BREAKER = {"breaker": {"consecutive_failures": 100000, "error_rate": 1.0, "min_requests": 100000}}


def gateway_config(fleet: Fleet, port: int, reliability: dict | None = None, **server) -> dict:
    def backend(name: str, model: str, **extra) -> dict:
        return {"base_url": f"http://127.0.0.1:{fleet.ports[name]}/v1", "model": model, **extra}

    dead_port = free_port()  # nothing listens here
    return {
        "server": {"host": "127.0.0.1", "port": port, "max_body_bytes": MAX_BODY, "queue_timeout_s": 2, **server},
        "auth": {
            "mode": "keys",
            "clients": [
                {"tenant": "acme", "key_sha256": hash_key(ACME_KEY)},
                {"tenant": "globex", "key_sha256": hash_key(GLOBEX_KEY), "models": ["chat"]},
            ],
            "admin_keys": [hash_key(ADMIN_KEY)],
        },
        "backends": {
            "fast": backend("fast", "m-fast", flavor="llamacpp"),
            "slow": backend("slow", "m-slow", flavor="vllm", max_concurrency=2),
            "flaky": backend("flaky", "m-flaky"),
            "hang": backend("hang", "m-hang", timeouts={"connect_s": 1, "first_token_s": 0.5, "total_s": 1}),
            "tgi": backend("tgi", "m-tgi", flavor="tgi"),
            "embed": backend("embed", "m-embed"),
            "dead": {"base_url": f"http://127.0.0.1:{dead_port}/v1", "model": "m-dead"},
        },
        "reliability": reliability or NO_BREAKER,
        "models": {
            "chat": {"backends": ["fast"]},
            "slow": {"backends": ["slow"]},
            "flaky": {"backends": ["flaky"], "retry": {"max_attempts": 1}},
            "hang": {"backends": ["hang"]},
            "tgi": {"backends": ["tgi"]},
            "embed": {"backends": ["embed"]},
            "dead": {"backends": ["dead"]},
        },
    }


def start_gateway(tmp, fleet: Fleet, config: dict | None = None, **server) -> Gateway:
    """A gateway process; `config` replaces the default test config (its server.port is set here)."""
    port = free_port()
    if config is None:
        config = gateway_config(fleet, port, **server)
    config.setdefault("server", {})["port"] = port
    path = write_yaml(tmp / "gateway.yaml", config)
    proc = Process(["serve", "--config", str(path)], tmp / "gateway.log")
    proc.wait_listening(port)
    return Gateway(f"http://127.0.0.1:{port}", port, proc, fleet)


@pytest.fixture(scope="session")
def gateway(fleet, tmp_path_factory) -> Gateway:
    gw = start_gateway(tmp_path_factory.mktemp("gateway"), fleet)
    yield gw
    gw.process.stop()


@pytest.fixture
def client(gateway) -> openai.OpenAI:
    return gateway.client()


@pytest.fixture
def flaky(fleet):
    """The flaky backend's port; its faults are cleared after the test."""
    yield fleet.ports["flaky"]
    set_faults(fleet.ports["flaky"])


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real Redis Stack server (Redis + RediSearch) on a loopback port, for the whole session."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()
