"""The real llama.cpp tier: two real `llama-server` processes (SmolLM2-135M on CPU) behind a real gateway.

scripts/llama-server builds the server once (about 7 min on 2 cores; cached in ~/.cache/slipstream).
A: 4 slots sharing a 1024-token context (256 per slot); B: 1 slot with 2048. Alias `a` falls back to
`b` when a prompt does not fit A's slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import openai
import pytest

from app.admission.auth import hash_key
from tests.support import LlamaServer, Process, free_port, llama_server_paths, write_yaml

KEY = "sk-test-real-0123456789"
ADMIN = "sk-test-real-admin-0123456789"
A_SLOTS, A_CTX = 4, 1024
B_SLOTS, B_CTX = 1, 2048


@dataclass
class RealGateway:
    url: str
    a: LlamaServer
    b: LlamaServer
    process: Process

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0, **kw)

    def async_client(self, **kw) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0, **kw)

    @property
    def admin(self) -> dict[str, str]:
        return {"authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="session")
def llama_servers(tmp_path_factory):
    llama_server_paths()  # build once, before any server's start-up clock runs
    tmp = tmp_path_factory.mktemp("llama")
    a = LlamaServer(tmp, slots=A_SLOTS, ctx=A_CTX, alias="smol-a")
    b = LlamaServer(tmp, slots=B_SLOTS, ctx=B_CTX, alias="smol-b")
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture(scope="session")
def real(llama_servers, tmp_path_factory) -> RealGateway:
    a, b = llama_servers
    tmp = tmp_path_factory.mktemp("real-gateway")
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "queue_timeout_s": 30},
        "auth": {"mode": "keys", "clients": [{"tenant": "t", "key_sha256": hash_key(KEY)},
                                             {"tenant": "u", "key_sha256": hash_key(KEY + "-other")}],
                 "admin_keys": [hash_key(ADMIN)]},
        "backends": {
            "a": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp"},
            "b": {"base_url": b.url, "model": "smol-b", "flavor": "llamacpp"},
            # Server A again, with JSON clients served by a plain non-streamed call.
            "a-json": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp", "stream_upstream": False},
            # Server A again, declared chat-only: Messages requests are translated to chat completions.
            "a-chat": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp", "apis": ["chat", "completions"]},
        },
        # A breaker that ejects after 3 failures in a row: poison requests must not count.
        "reliability": {"breaker": {"consecutive_failures": 3, "error_rate": 0.5, "min_requests": 5}},
        "models": {
            "a": {"backends": ["a"], "context_fallback": "b", "retry": {"max_attempts": 1}},
            "b": {"backends": ["b"], "retry": {"max_attempts": 1}},
            "a-json": {"backends": ["a-json"], "retry": {"max_attempts": 1}},
            "a-chat": {"backends": ["a-chat"], "retry": {"max_attempts": 1}},
        },
        "telemetry": {"scrape_interval_s": 0.5},
    }
    path = write_yaml(tmp / "gateway.yaml", config)
    proc = Process(["serve", "--config", str(path)], tmp / "gateway.log")
    proc.wait_listening(port)
    yield RealGateway(f"http://127.0.0.1:{port}", a, b, proc)
    proc.stop()
