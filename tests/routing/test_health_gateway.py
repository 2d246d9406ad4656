"""Backend health end to end: a real gateway in front of a simulated llama.cpp-like backend of one slot.
A first-token timeout behind a queue the router predicted is the slowness it priced, not the backend
failing; a backend that hangs is still ejected."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import ADMIN_KEY, start_gateway
from tests.support import Process, free_port, set_faults, write_yaml

# One slot, 1000 prompt tokens a second: a ~500-token prompt (the gateway's estimate) prefills in about half
# a second, and requests sent together queue for the slot one after another.
SIM = dict(slots=1, prefill_tokens_per_s=1000, tpot_ms=2, report="llamacpp", output=dict(median=4, sigma=0, max=4))
FIRST_TOKEN_S = 1.0


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    from app.admission.auth import hash_key

    tmp = tmp_path_factory.mktemp("oneslot")
    port = free_port()
    path = write_yaml(tmp / "sim.yaml", {"simulator": {"seed": 3, "backends": {"slow": dict(port=port, model="m", **SIM)}}})
    sim = Process(["simulate", "--config", str(path)], tmp / "sim.log")
    sim.wait_listening(port)
    config = {
        "auth": {"mode": "open", "admin_keys": [hash_key(ADMIN_KEY)]},
        "backends": {"slow": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "flavor": "llamacpp",
                              "max_concurrency": 8, "timeouts": {"first_token_s": FIRST_TOKEN_S}}},
        # One attempt a request: a timeout reaches the client, so the test sees each one happen.
        "models": {"chat": {"backends": ["slow"], "exploration": 0, "retry": {"max_attempts": 1}}},
        # Two failures in a row eject it: the queue's timeouts below would, were they counted.
        "reliability": {"breaker": {"consecutive_failures": 2, "cooldown_s": 30, "max_cooldown_s": 30}},
        "telemetry": {"scrape_interval_s": 0.2},  # its one slot, from /props, before the burst
    }
    gw = start_gateway(tmp_path_factory.mktemp("oneslotgw"), None, config)
    yield gw, port
    gw.process.stop()
    sim.stop()


def long_prompt(tag: str) -> str:
    return f"[{tag}] Summarise the quarterly figures of the {tag} division for the board. " * 40


def health(gw) -> dict:
    r = httpx.get(f"{gw.url}/admin/backends", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    r.raise_for_status()
    b = r.json()["backends"][0]
    return {"breaker": b["breaker"]["state"], "failure_rate": b["latency_model"]["failure_rate"]}


async def stream(c: httpx.AsyncClient, gw, text: str) -> int:
    body = {"model": "chat", "stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": text}]}
    async with c.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as r:
        await r.aread()
        return r.status_code


def test_first_token_timeouts_behind_a_predicted_queue_leave_the_backend_healthy_and_a_hang_ejects_it(one_slot):
    gw, port = one_slot

    async def main():
        async with httpx.AsyncClient(timeout=30) as c:
            # Time its prefill (an untimed backend is priced at a GPU's prior: no queue would be predicted).
            for i in range(4):
                assert await stream(c, gw, long_prompt(f"warm{i}")) == 200
            # Four long prompts at once on one slot: the first answers in ~0.5 s, the others wait their turn
            # (~1.0, 1.5, 2.0 s) and reach the 1 s first-token timeout, each predicted to wait about that long.
            burst = await asyncio.gather(*(stream(c, gw, long_prompt(f"burst{i}")) for i in range(4)))
            after_queue = health(gw)
            # Now it hangs: a short prompt on an idle backend, predicted a fraction of the limit, never answers.
            set_faults(port, hang_rate=1.0)
            try:
                hung = [await stream(c, gw, f"hello {i}") for i in range(3)]
            finally:
                set_faults(port, hang_rate=0.0)
            return burst, after_queue, hung, health(gw)

    burst, after_queue, hung, after_hang = asyncio.run(main())
    assert sorted(burst) == [200, 504, 504, 504], burst  # the timeouts did happen
    assert after_queue == {"breaker": "closed", "failure_rate": 0.0}
    # Two timeouts far beyond their prediction eject it; the third request finds no backend.
    assert hung == [504, 504, 503], hung
    assert after_hang["breaker"] == "open" and after_hang["failure_rate"] > 0.1
