"""Fault tests that need real processes and sockets: a failing HTTP backend ejected beside a healthy one,
a backend killed mid-stream, active health checks. Every request sent ends as a complete answer, a
fallback answer or a clear error; none is lost, none is silently truncated. The retry, fallback and
deadline rules themselves are scripted on the transport seam in tests/dispatch/test_loop.py."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter

import httpx
import openai
import pytest

from tests.conftest import Fleet, start_gateway
from tests.support import (
    Process,
    free_port,
    set_faults,
    sim_stats,
    wait_until,
    write_yaml,
)

FAST = dict(slots=64, prefill_tokens_per_s=1e9, tpot_ms=0, output=dict(median=8, sigma=0.2, max=16))
MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    names = ["good1", "bad_pair", "bad_solo"]
    ports = {n: free_port() for n in names}
    backends = {n: dict(port=ports[n], model=f"m-{n}", **FAST) for n in names}
    tmp = tmp_path_factory.mktemp("faults")
    write_yaml(tmp / "fleet.yaml", {"simulator": {"seed": 5, "backends": backends}})
    proc = Process(["simulate", "--config", str(tmp / "fleet.yaml")], tmp / "fleet.log")
    for p in ports.values():
        proc.wait_listening(p)
    yield Fleet(ports, 5)
    proc.stop()


def config(fleet: Fleet) -> dict:
    def b(name: str, **extra) -> dict:
        return {"base_url": f"http://127.0.0.1:{fleet.ports[name]}/v1", "model": f"m-{name}", **extra}

    quick_retry = {"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05}
    return {
        "server": {"host": "127.0.0.1", "queue_timeout_s": 5},
        "auth": {"mode": "open"},
        "reliability": {
            "retry_budget": {"ratio": 0.2, "min_per_s": 0.5, "window_s": 30},
            "breaker": {"consecutive_failures": 3, "error_rate": 0.9, "min_requests": 50, "cooldown_s": 0.5, "max_cooldown_s": 2},
        },
        "backends": {n: b(n) for n in ["good1", "bad_pair", "bad_solo"]},
        "models": {
            "pair": {"backends": ["bad_pair", "good1"], "strategy": "round_robin", "retry": quick_retry},
        },
    }


@pytest.fixture(scope="module")
def gw(fleet, tmp_path_factory):
    g = start_gateway(tmp_path_factory.mktemp("gw"), fleet, config(fleet))
    yield g
    g.process.stop()


async def send_many(gw, n: int, concurrency: int = 64, **kw) -> Counter:
    """Send n calls, `concurrency` at a time; classify each outcome. The counts must add up to n."""
    outcomes: Counter = Counter()
    gate = asyncio.Semaphore(concurrency)

    async def one(client):
        async with gate:
            await attempt(client)

    async def attempt(client):
        try:
            raw = await client.chat.completions.with_raw_response.create(messages=MSG, max_tokens=4, **kw)
            r = raw.parse()
            if kw.get("stream"):
                chunks = [c async for c in r]
                assert chunks[-1].choices[0].finish_reason in ("stop", "length")
            else:
                assert r.choices[0].message.content
            outcomes["fallback" if "x-slipstream-fallback" in raw.headers else "ok"] += 1
        except openai.APIStatusError as e:
            outcomes[f"error_{e.status_code}"] += 1
        except openai.APIError:
            outcomes["error_stream"] += 1

    async with gw.async_client(timeout=30) as client:
        await asyncio.gather(*(one(client) for _ in range(n)))
    assert sum(outcomes.values()) == n
    return outcomes


def test_one_failing_backend_beside_a_healthy_one(gw, fleet):
    set_faults(fleet.ports["bad_pair"], error_rate=1.0)
    before = sim_stats(fleet.ports["bad_pair"])["requests"]
    outcomes = asyncio.run(send_many(gw, 40, concurrency=2, model="pair"))
    assert outcomes == Counter(ok=40)
    # The breaker ejected the failing backend after 3 consecutive failures: it saw only those, the
    # calls already in flight, and a probe or two after each cooldown.
    assert sim_stats(fleet.ports["bad_pair"])["requests"] - before <= 8
    backends = httpx.get(f"{gw.url}/readyz").json()
    assert "bad_pair" in backends["ejected"]


def test_backend_killed_mid_stream(tmp_path):
    port = free_port()
    write_yaml(tmp_path / "victim.yaml", {"simulator": {"backends": {"victim": dict(port=port, model="v", tpot_ms=50)}}})
    victim = Process(["simulate", "--config", str(tmp_path / "victim.yaml")], tmp_path / "victim.log")
    victim.wait_listening(port)
    cfg = {
        "auth": {"mode": "open"},
        "backends": {"victim": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "v"}},
        "models": {"victim": {"backends": ["victim"]}},
    }
    gw = start_gateway(tmp_path, None, cfg)
    try:
        stream = gw.client().chat.completions.create(
            model="victim", messages=MSG, max_tokens=200, stream=True, extra_body={"ignore_eos": True})
        received = []
        with pytest.raises(openai.APIError) as exc:
            for chunk in stream:
                received.append(chunk)
                if len(received) == 3:
                    os.kill(victim.proc.pid, signal.SIGKILL)
        assert len(received) >= 3
        assert "backend victim" in str(exc.value)
        assert gw.process.proc.poll() is None
    finally:
        gw.process.stop()
        victim.stop()


def test_active_health_check_readmits_without_client_traffic(fleet, tmp_path):
    cfg = config(fleet)
    cfg["reliability"]["health_check"] = {"enabled": True, "interval_s": 0.1}
    cfg["models"]["probed"] = {"backends": ["bad_solo"], "retry": {"max_attempts": 1}}
    gw = start_gateway(tmp_path, fleet, cfg)
    port = fleet.ports["bad_solo"]
    try:
        set_faults(port, error_rate=1.0)
        client = gw.client()
        for _ in range(3):
            with pytest.raises(openai.InternalServerError):
                client.chat.completions.create(model="probed", messages=MSG)
        assert "bad_solo" in httpx.get(f"{gw.url}/readyz").json()["ejected"]
        set_faults(port)
        # No client calls: the probe (GET /models) alone brings it back after the 0.5 s cooldown.
        assert wait_until(lambda: "bad_solo" not in httpx.get(f"{gw.url}/readyz").json()["ejected"], timeout=3)
    finally:
        set_faults(port)
        gw.process.stop()
