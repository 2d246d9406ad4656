"""What a real llama.cpp server does with a prompt pushed out of its slot, as the gateway learns it.

Two one-slot `llama-server` processes (SmolLM2-135M on CPU) behind one real gateway: one with llama.cpp's
host-memory prompt cache as this build starts it (--cache-ram's default), one with it off (--cache-ram 0).
Neither publishes which it is (/props does not), so the prefix index learns it from the first request
for a prompt that had left its slot, and /admin/backends shows what it learned. A server not heard from yet
takes the first one's kind (servers of a fleet are as a rule alike); these two are not, and each one's own
report settles its own.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from app.admission.auth import hash_key
from tests.support import LlamaServer, Process, free_port, llama_server_paths, wait_until, write_yaml

ADMIN = "sk-test-cache-kinds-admin-0123456789"


def _system(topic: str) -> list[dict]:
    # ~150 tokens of system prompt: several of the prefix index's blocks, a fraction of a second to prefill.
    return [{"role": "system", "content": f"You answer questions about {topic}. " + f"Keep to {topic} and be brief. " * 18},
            {"role": "user", "content": "One fact, please."}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    llama_server_paths()
    tmp = tmp_path_factory.mktemp("cache-kinds")
    kept = LlamaServer(tmp, slots=1, ctx=2048, alias="kept")
    lost = LlamaServer(tmp, slots=1, ctx=2048, alias="lost", extra=("--cache-ram", "0"))
    proc = None
    try:
        kept.start()
        lost.start()
        port = free_port()
        config = {
            "server": {"host": "127.0.0.1", "port": port},
            "auth": {"mode": "open", "admin_keys": [hash_key(ADMIN)]},
            "backends": {name: {"base_url": s.url, "model": name, "flavor": "llamacpp"} for name, s in
                         (("kept", kept), ("lost", lost))},
            "models": {name: {"backends": [name], "retry": {"max_attempts": 1}} for name in ("kept", "lost")},
            "telemetry": {"scrape_interval_s": 0.5},
        }
        proc = Process(["serve", "--config", str(write_yaml(tmp / "gateway.yaml", config))], tmp / "gateway.log")
        proc.wait_listening(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc is not None:
            proc.stop()
        kept.stop()
        lost.stop()


def _backend(url: str, name: str) -> dict:
    data = httpx.get(f"{url}/admin/backends", headers={"authorization": f"Bearer {ADMIN}"}, timeout=5).json()
    return next(b for b in data["backends"] if b["name"] == name)


@pytest.mark.parametrize(("name", "keeps"), [("kept", True), ("lost", False)])
def test_the_gateway_learns_whether_a_server_keeps_a_prompt_pushed_out_of_its_slot(gateway, name, keeps):
    # The slot count must be the server's own (from /props) for the index to know a second prompt takes
    # the first one's slot.
    assert wait_until(lambda: _backend(gateway, name)["latency_model"]["slots_source"] == "reported", timeout=10)
    # Not from this server's own report yet (the other server, if tested first, may have lent its kind).
    assert _backend(gateway, name)["prefix_index"]["host_memory_from"] in (None, "fleet")
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=60)
    first, second = _system("rivers"), _system("mountains")
    for messages in (first, second):  # the second prompt takes the only slot: the first leaves it
        client.chat.completions.create(model=name, messages=messages, max_tokens=2, temperature=0)
    again = client.chat.completions.create(model=name, messages=first, max_tokens=2, temperature=0)
    cached = again.usage.prompt_tokens_details.cached_tokens if again.usage.prompt_tokens_details else 0
    # What the server itself says it reused, then what the gateway learned from it.
    assert (cached > again.usage.prompt_tokens / 2) is keeps, again.usage
    index = _backend(gateway, name)["prefix_index"]
    assert (index["host_memory"], index["host_memory_from"]) == (keeps, "this backend")
