"""The simulator behaves like a continuous-batching server: slots, queue, prefill and decode costs."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support import Process, free_port, write_yaml


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    ports = {"batch": free_port(), "tgi": free_port(), "llama": free_port()}
    base = dict(prefill_tokens_per_s=2000, tpot_ms=10, output=dict(median=8, sigma=0, max=8))
    write_yaml(tmp / "s.yaml", {"simulator": {"seed": 3, "backends": {
        "batch": dict(port=ports["batch"], model="b", slots=2, tpot_growth=0.5, **base),
        "tgi": dict(port=ports["tgi"], model="t", report="tgi", **base),
        "llama": dict(port=ports["llama"], model="l", report="llamacpp", **base),
    }}})
    p = Process(["simulate", "--config", str(tmp / "s.yaml")], tmp / "s.log")
    for port in ports.values():
        p.wait_listening(port)
    yield ports
    p.stop()


def chat(port: int, model: str, content: str = "hi", **kw) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": content}], **kw}
    return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)


def test_prefill_time_grows_with_prompt_tokens(sim):
    r = chat(sim["llama"], "l", "x" * 4000, max_tokens=1)  # ~1000 tokens at 2000 tok/s
    t = r.json()["timings"]
    assert 400 < t["prompt_ms"] < 700
    assert t["prompt_n"] == r.json()["usage"]["prompt_tokens"]


def test_decode_time_is_steps_times_tpot(sim):
    t = chat(sim["llama"], "l", max_tokens=20, ignore_eos=True).json()["timings"]
    assert t["predicted_n"] == 20
    assert 19 * 10 <= t["predicted_ms"] < 19 * 10 * 1.6


def test_tgi_style_headers(sim):
    r = chat(sim["tgi"], "t", max_tokens=5, ignore_eos=True)
    for h in ("x-queue-time", "x-inference-time", "x-time-per-token", "x-total-time", "x-prompt-tokens", "x-generated-tokens"):
        assert h in r.headers
    assert r.headers["x-generated-tokens"] == "5"
    assert "timings" not in r.json()


def test_requests_beyond_slots_queue(sim):
    async def main():
        async with httpx.AsyncClient(timeout=30) as c:
            async def one():
                t0 = time.perf_counter()
                await c.post(f"http://127.0.0.1:{sim['batch']}/v1/chat/completions",
                             json={"model": "b", "messages": [{"role": "user", "content": "q"}], "max_tokens": 10, "ignore_eos": True})
                return time.perf_counter() - t0

            return sorted(await asyncio.gather(*(one() for _ in range(4))))

    times = asyncio.run(main())
    # Two slots: the last two wait for the first two to finish, so they take about twice as long.
    assert times[3] > 1.6 * times[0]


def test_output_is_reproducible(sim):
    a = chat(sim["llama"], "l", "same prompt", max_tokens=6).json()["choices"][0]["message"]["content"]
    b = chat(sim["llama"], "l", "same prompt", max_tokens=6).json()["choices"][0]["message"]["content"]
    c = chat(sim["llama"], "l", "other prompt", max_tokens=6).json()["choices"][0]["message"]["content"]
    assert a == b != c


def test_natural_stop_below_max_tokens(sim):
    r = chat(sim["llama"], "l", max_tokens=100).json()
    assert r["usage"]["completion_tokens"] == 8
    assert r["choices"][0]["finish_reason"] == "stop"


def test_runtime_faults(sim):
    port = sim["llama"]
    httpx.put(f"http://127.0.0.1:{port}/sim/faults", json={"rate_limit_rate": 1, "retry_after_s": 3}).raise_for_status()
    try:
        r = chat(port, "l")
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
    finally:
        httpx.put(f"http://127.0.0.1:{port}/sim/faults", json={})
    assert chat(port, "l").status_code == 200


def test_wrong_model_is_404(sim):
    assert chat(sim["llama"], "nope").status_code == 404


def test_llamacpp_flavoured_stream_sends_headers_when_a_slot_takes_it(tmp_path):
    port = free_port()
    write_yaml(tmp_path / "s.yaml", {"simulator": {"backends": {"l": dict(
        port=port, model="l", report="llamacpp", slots=1, prefill_tokens_per_s=1e9, tpot_ms=20,
        output=dict(median=20, sigma=0, max=20))}}})
    p = Process(["simulate", "--config", str(tmp_path / "s.yaml")], tmp_path / "s.log")
    p.wait_listening(port)
    body = {"model": "l", "messages": [{"role": "user", "content": "x"}], "stream": True}

    async def headers_at() -> list[float]:
        async with httpx.AsyncClient(timeout=10) as client:
            t0 = time.perf_counter()

            async def one() -> float:
                async with client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                    at = time.perf_counter() - t0
                    await r.aread()
                    return at
            return sorted(await asyncio.gather(one(), one()))

    try:
        # A first request warms the server, so neither measured one pays its start-up.
        assert httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={**body, "stream": False}, timeout=10).status_code == 200
        first, second = asyncio.run(headers_at())
        # One slot, 20 tokens of 20 ms: the second request's headers wait for the first to finish (~0.4 s
        # after the first's), counted between the two, not from the start: on a busy box the first's own
        # headers once took 0.37 s, and that said nothing about slots.
        assert second - first > 0.3
        props = httpx.get(f"http://127.0.0.1:{port}/props").json()
        assert props["total_slots"] == 1
        assert "llamacpp:requests_processing 0" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        p.stop()


def test_embeddings_in_base64(sim):
    import base64

    import numpy as np

    url = f"http://127.0.0.1:{sim['batch']}/v1/embeddings"
    floats = httpx.post(url, json={"model": "b", "input": "hello"}).json()["data"][0]["embedding"]
    b64 = httpx.post(url, json={"model": "b", "input": "hello", "encoding_format": "base64"}).json()["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(b64), dtype="<f4")
    assert decoded.shape == (len(floats),) and np.allclose(decoded, floats, atol=1e-6)
    assert httpx.post(url, json={"model": "b", "input": "x", "encoding_format": "bf16"}).status_code == 400
