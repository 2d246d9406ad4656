"""The simulator keeps a per-backend prefix (KV) cache and reports it as llama.cpp and vLLM do."""

from __future__ import annotations

import httpx
import orjson
import pytest

from app.tools.simulator.kv_cache import BLOCK_TOKENS, PrefixCache, block_keys, serialise
from tests.support import Process, free_port, write_yaml

SYSTEM = "You are a careful assistant for the billing team. " * 40  # ~500 tokens


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simcache")
    ports = {"llama": free_port(), "vllm": free_port(), "tiny": free_port(), "off": free_port()}
    base = dict(prefill_tokens_per_s=2000, tpot_ms=2, output=dict(median=8, sigma=0, max=8))
    write_yaml(tmp / "s.yaml", {"simulator": {"seed": 3, "backends": {
        "llama": dict(port=ports["llama"], model="l", report="llamacpp", prefix_cache_tokens=65536, **base),
        "vllm": dict(port=ports["vllm"], model="v", prefix_cache_tokens=65536, **base),
        # Room for one long prompt only: a second one evicts the first.
        "tiny": dict(port=ports["tiny"], model="t", report="llamacpp", prefix_cache_tokens=600, **base),
        "off": dict(port=ports["off"], model="o", report="llamacpp", **base),
    }}})
    p = Process(["simulate", "--config", str(tmp / "s.yaml")], tmp / "s.log")
    for port in ports.values():
        p.wait_listening(port)
    yield ports
    p.stop()


def chat(port: int, model: str, messages: list[dict], **kw) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": 4, "ignore_eos": True, **kw}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)
    r.raise_for_status()
    return r.json()


def ask(question: str, system: str = SYSTEM) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def test_a_repeated_prefix_is_not_prefilled_again(sim):
    cold = chat(sim["llama"], "l", ask("What is my balance?"))
    warm = chat(sim["llama"], "l", ask("When is my bill due?"))
    assert cold["timings"]["cache_n"] == 0
    assert cold["timings"]["prompt_n"] == cold["usage"]["prompt_tokens"]
    # The shared system prompt is reused; only the tail is processed, and prefill time shows it.
    assert warm["timings"]["cache_n"] > 0.9 * len(SYSTEM) / 4
    assert warm["timings"]["prompt_n"] + warm["timings"]["cache_n"] == warm["usage"]["prompt_tokens"]
    assert warm["timings"]["prompt_ms"] < cold["timings"]["prompt_ms"] / 5


def test_usage_reports_cached_tokens_as_openai_and_vllm_do(sim):
    first = chat(sim["vllm"], "v", ask("Hello", "Another long shared system prompt. " * 40))
    second = chat(sim["vllm"], "v", ask("Hi again", "Another long shared system prompt. " * 40))
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 300
    assert "timings" not in second


def test_streamed_usage_chunk_carries_cached_tokens(sim):
    msgs = ask("stream please", "Streaming system prompt, long enough to cache. " * 30)
    chat(sim["vllm"], "v", msgs)
    body = {"model": "v", "messages": msgs, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"http://127.0.0.1:{sim['vllm']}/v1/chat/completions", json=body, timeout=30) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    usage = orjson.loads(events[-1])["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 2 * BLOCK_TOKENS


def test_next_turn_of_a_conversation_reuses_the_answer_too(sim):
    turn1 = ask("Tell me about plan A", "Conversation system prompt. " * 20)
    a1 = chat(sim["llama"], "l", turn1)
    turn2 = turn1 + [{"role": "assistant", "content": a1["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And plan B?"}]
    a2 = chat(sim["llama"], "l", turn2)
    # Everything up to the new user message was cached: the history and the previous answer.
    assert a2["timings"]["prompt_n"] <= len("<|user|>And plan B?<|end|>") // 4 + 2 * BLOCK_TOKENS


def test_capacity_is_bounded_least_recently_used_first(sim):
    one, two = ask("q", "First long prompt. " * 100), ask("q", "Second long prompt. " * 100)
    chat(sim["tiny"], "t", one)
    assert chat(sim["tiny"], "t", one)["timings"]["cache_n"] > 0
    chat(sim["tiny"], "t", two)  # does not fit beside the first: the first is evicted
    assert chat(sim["tiny"], "t", one)["timings"]["cache_n"] == 0


def test_clearing_the_cache_makes_the_backend_cold(sim):
    msgs = ask("cold again", "Clear me. " * 100)
    chat(sim["llama"], "l", msgs)
    assert httpx.delete(f"http://127.0.0.1:{sim['llama']}/sim/cache").status_code == 200
    assert chat(sim["llama"], "l", msgs)["timings"]["cache_n"] == 0


def test_without_a_cache_nothing_is_reused_or_claimed(sim):
    msgs = ask("q", "No cache here. " * 100)
    chat(sim["off"], "o", msgs)
    again = chat(sim["off"], "o", msgs)
    assert again["timings"]["cache_n"] == 0
    assert "prompt_tokens_details" not in again["usage"]


def test_block_keys_chain_so_only_a_shared_prefix_matches():
    a = block_keys("x" * 640)
    b = block_keys("x" * 320 + "y" * 320)
    assert a[:5] == b[:5] and a[5] != b[5]
    cache = PrefixCache(1000)
    cache.insert(a)
    assert cache.match(b) == 5 * BLOCK_TOKENS


def test_serialisation_is_prefix_stable_across_turns():
    turn1 = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
    turn2 = {"messages": turn1["messages"] + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]}
    assert serialise(turn2).startswith(serialise(turn1, "a"))
