"""Hostile clients against a real gateway process and simulator: slots always come back, deadlines hold.

The simulator's /sim/stats slot counters are the ground truth of what the backend is doing.
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import openai
import pytest

from tests.conftest import ACME_KEY, gateway_config, start_gateway
from tests.support import Process, free_port, sim_stats, wait_until, write_yaml

DEEP = b'{"model": "slow", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + b"[" * 300 + b"]" * 300 + b"}"


ODD_MODEL = "modèle-模型"


@pytest.fixture(scope="module")
def odd(fleet, tmp_path_factory):
    """A gateway whose 2-slot alias `odd` names its backend's model in text that is not latin-1."""
    tmp = tmp_path_factory.mktemp("odd")
    sim_port = free_port()
    sim = write_yaml(tmp / "sim.yaml", {"simulator": {"seed": 1, "backends": {"odd": dict(
        port=sim_port, model=ODD_MODEL, slots=2, prefill_tokens_per_s=1e9, tpot_ms=0)}}})
    simulator = Process(["simulate", "--config", str(sim)], tmp / "sim.log")
    simulator.wait_listening(sim_port)
    config = gateway_config(fleet, free_port())
    config["backends"]["odd"] = {"base_url": f"http://127.0.0.1:{sim_port}/v1", "model": ODD_MODEL, "max_concurrency": 2}
    config["models"]["odd"] = {"backends": ["odd"], "cache": {"exact": {"deterministic_only": False}}}
    gw = start_gateway(tmp, fleet, config)
    yield gw
    gw.process.stop()
    simulator.stop()


def _full_capacity(url: str, model: str) -> list[int]:
    """Two concurrent calls on a 2-slot alias both answer: no slot leaked."""

    async def main():
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=10) as c:
            rs = await asyncio.gather(*(c.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}) for _ in range(2)))
        return [r.status_code for r in rs]

    return asyncio.run(main())


def test_a_thousand_deeply_nested_bodies_leak_no_slot(odd):
    with httpx.Client(base_url=odd.url, headers={"authorization": f"Bearer {ACME_KEY}",
                                                 "content-type": "application/json"}, timeout=10) as http:
        statuses = {http.post("/v1/chat/completions", content=DEEP).status_code for _ in range(1000)}
    assert statuses == {400}
    assert _full_capacity(odd.url, "slow") == [200, 200]


def test_model_name_that_is_not_latin1_leaks_no_slot_and_caches_cleanly(odd):
    with httpx.Client(base_url=odd.url, headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=10) as http:
        body = {"model": "odd", "messages": [{"role": "user", "content": "same question"}], "max_tokens": 2}
        statuses = [http.post("/v1/chat/completions", json=body).status_code for _ in range(30)]
        streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
    assert statuses == [200] * 30
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert _full_capacity(odd.url, "odd") == [200, 200]


def test_client_leaving_a_json_call_cancels_it_and_frees_the_slot(gateway, fleet):
    port = fleet.ports["slow"]
    wait_until(lambda: sim_stats(port)["running"] == 0, timeout=10)
    before = sim_stats(port)
    s = socket.create_connection(("127.0.0.1", gateway.port))
    body = b'{"model":"slow","messages":[{"role":"user","content":"long"}],"max_tokens":500,"ignore_eos":true}'
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ACME_KEY.encode()
              + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    assert wait_until(lambda: sim_stats(port)["running"] == 1, timeout=5)
    s.close()
    # 500 tokens at 40 ms would hold the slot for 20 s; the disconnect must free it at once.
    assert wait_until(lambda: sim_stats(port)["running"] == 0, timeout=2.0), sim_stats(port)
    after = sim_stats(port)
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["completed"] == before["completed"]


def test_deadline_bounds_the_wait_for_a_busy_backend(gateway, fleet):
    """Both slots of `slow` busy for seconds: six calls with an 800 ms deadline answer in about 800 ms."""
    port = fleet.ports["slow"]

    async def main():
        async with httpx.AsyncClient(base_url=gateway.url, headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=30) as c:
            long = {"model": "slow", "messages": [{"role": "user", "content": "hog"}], "max_tokens": 100, "ignore_eos": True}
            hogs = [asyncio.ensure_future(c.post("/v1/chat/completions", json=long)) for _ in range(2)]
            for _ in range(100):
                if sim_stats(port)["running"] == 2:
                    break
                await asyncio.sleep(0.05)
            start = time.monotonic()
            late = await asyncio.gather(*(c.post("/v1/chat/completions", headers={"x-slipstream-timeout-ms": "800"}, json={
                "model": "slow", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2}) for i in range(6)))
            took = [time.monotonic() - start]
            for h in hogs:
                h.cancel()
            await asyncio.gather(*hogs, return_exceptions=True)
            return late, took[0]

    late, took = asyncio.run(main())
    assert [r.status_code for r in late] == [504] * 6
    assert {r.json()["error"]["code"] for r in late} == {"deadline_exceeded"}
    assert took < 1.5


def test_openai_sdk_with_default_retries_answers_within_about_the_deadline(gateway, fleet):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ACME_KEY)  # default max_retries (2)
    hang_before = sim_stats(fleet.ports["hang"])
    start = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="hang", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-slipstream-timeout-ms": "300"})
    took = time.monotonic() - start
    assert info.value.status_code == 504
    assert info.value.response.headers["x-should-retry"] == "false"
    assert took < 0.8
    hang_after = sim_stats(fleet.ports["hang"])
    assert hang_after.get("requests", 0) - hang_before.get("requests", 0) <= 1
