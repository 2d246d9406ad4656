"""Fault tests: real simulator processes, real sockets. Every request sent ends as a complete answer,
a fallback answer or a clear error; none is lost, none is silently truncated."""

from __future__ import annotations

import asyncio
import os
import signal
import time
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
    names = ["good1", "good2", "bad_pair", "bad_solo", "bad_recover", "hang", "slow", "small_ctx", "big_ctx", "storm", "hang2"]
    ports = {n: free_port() for n in names}
    backends = {n: dict(port=ports[n], model=f"m-{n}", **FAST) for n in names}
    backends["hang"]["faults"] = backends["hang2"]["faults"] = {"hang_rate": 1.0}
    backends["slow"].update(tpot_ms=100)
    backends["small_ctx"]["context_tokens"] = 64
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
        "backends": {
            **{n: b(n) for n in ["good1", "good2", "bad_pair", "bad_solo", "bad_recover", "slow", "small_ctx", "big_ctx", "storm"]},
            "hang": b("hang", timeouts={"first_token_s": 0.3, "total_s": 2}),
            "hang2": b("hang2", timeouts={"first_token_s": 0.3, "total_s": 2}),
        },
        "models": {
            "pair": {"backends": ["bad_pair", "good1"], "strategy": "round_robin", "retry": quick_retry},
            "solo": {"backends": ["bad_solo"], "retry": quick_retry},
            "recover": {"backends": ["bad_recover"], "retry": {"max_attempts": 1}},
            "hangpair": {"backends": ["hang", "good2"], "strategy": "round_robin", "retry": quick_retry},
            "slow": {"backends": ["slow"], "timeouts": {"total_s": 0.3}, "fallbacks": ["quick"], "retry": quick_retry},
            "quick": {"backends": ["good2"]},
            "one": {"backends": ["good1"]},
            "hangonly": {"backends": ["hang2"], "retry": quick_retry},
            "short": {"backends": ["small_ctx"], "context_fallback": "long"},
            "long": {"backends": ["big_ctx"]},
            "storm": {"backends": ["storm"], "retry": quick_retry},
            "stormpair": {"backends": ["storm", "good1"], "strategy": "round_robin", "retry": quick_retry},
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


def test_hang_before_first_token_is_retried_elsewhere(gw):
    outcomes = asyncio.run(send_many(gw, 10, model="hangpair", stream=True))
    assert outcomes == Counter(ok=10)


def test_deadline_header_caps_the_wait(gw):
    client = gw.client()
    t0 = time.perf_counter()
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="hangonly", messages=MSG, stream=True,
                                       extra_headers={"x-slipstream-timeout-ms": "150"})
    elapsed = time.perf_counter() - t0
    # The backend's own first-token limit is 0.3 s; the request's 150 ms deadline cuts in first.
    assert exc.value.status_code == 504 and exc.value.code == "deadline_exceeded"
    assert elapsed < 0.28


def test_bad_deadline_header_is_400(gw):
    with pytest.raises(openai.BadRequestError):
        gw.client().chat.completions.create(model="quick", messages=MSG, extra_headers={"x-slipstream-timeout-ms": "soon"})


def test_slow_backend_falls_back_to_smaller_model(gw):
    raw = gw.client().chat.completions.with_raw_response.create(model="slow", messages=MSG, max_tokens=20,
                                                                  extra_body={"ignore_eos": True})
    assert raw.headers["x-slipstream-fallback"] == "quick; reason=upstream_timeout"
    assert raw.headers["x-slipstream-model"] == "m-good2"
    assert raw.parse().model == "slow"  # the alias asked for; the header says which model answered


def test_context_length_error_falls_back_to_longer_context(gw):
    raw = gw.client().chat.completions.with_raw_response.create(
        model="short", messages=[{"role": "user", "content": "word " * 100}], max_tokens=8)
    assert raw.headers["x-slipstream-fallback"] == "long; reason=context_length"
    assert raw.headers["x-slipstream-model"] == "m-big_ctx"


def test_client_errors_are_not_retried_or_fallen_back(gw, fleet):
    before = sim_stats(fleet.ports["good2"])["requests"]
    with pytest.raises(openai.BadRequestError):
        gw.client().chat.completions.create(model="quick", messages=MSG, max_tokens=4, extra_body={"n": "many"})
    assert sim_stats(fleet.ports["good2"])["requests"] - before <= 1


def test_429_storm_alone_honours_retry_after_and_the_budget(fleet, tmp_path):
    fresh = start_gateway(tmp_path, fleet, config(fleet))  # a retry budget no other test has used
    port = fleet.ports["storm"]
    set_faults(port, rate_limit_rate=1.0, retry_after_s=0.05)
    before = sim_stats(port)["requests"]
    try:
        outcomes = asyncio.run(send_many(fresh, 30, model="storm"))
    finally:
        set_faults(port)
        fresh.process.stop()
    sent_upstream = sim_stats(port)["requests"] - before
    assert outcomes == Counter(error_429=30)
    # 30 requests, budget 20 % of them plus 0.5/s over a 30 s window: at most 30 + 6 + 15 upstream
    # calls, where 3 attempts each would have made 90.
    assert 30 < sent_upstream <= 30 + 6 + 15


def test_429_storm_beside_a_healthy_backend_is_absorbed(gw, fleet):
    port = fleet.ports["storm"]
    set_faults(port, rate_limit_rate=1.0, retry_after_s=5)
    try:
        outcomes = asyncio.run(send_many(gw, 20, model="stormpair"))
    finally:
        set_faults(port)
    assert outcomes == Counter(ok=20)


def test_failing_backend_alone_gives_a_clear_error_then_503_while_ejected(gw, fleet):
    set_faults(fleet.ports["bad_solo"], error_rate=1.0)
    client = gw.client()
    with pytest.raises(openai.InternalServerError) as first:
        client.chat.completions.create(model="solo", messages=MSG)
    assert first.value.status_code == 500  # the backend's own error, after retries
    with pytest.raises(openai.InternalServerError) as later:
        client.chat.completions.create(model="solo", messages=MSG)
    assert later.value.status_code == 503
    assert later.value.code == "no_backend_available"
    assert int(later.value.response.headers["retry-after"]) >= 1


def test_backend_that_recovers_is_readmitted(gw, fleet):
    port = fleet.ports["bad_recover"]
    set_faults(port, error_rate=1.0)
    client = gw.client()
    for _ in range(3):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="recover", messages=MSG)
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="recover", messages=MSG)
    assert exc.value.code == "no_backend_available"
    set_faults(port)
    # After the cooldown, one probe goes through; its success closes the breaker.
    assert wait_until(lambda: _answers(client, "recover"), timeout=3, interval=0.1)
    assert "bad_recover" not in httpx.get(f"{gw.url}/readyz").json()["ejected"]


def _answers(client, model: str) -> bool:
    try:
        client.chat.completions.create(model=model, messages=MSG, max_tokens=2)
        return True
    except openai.APIStatusError:
        return False


def test_failure_after_first_byte_is_an_error_event_and_not_retried(gw, fleet):
    port = fleet.ports["good1"]
    set_faults(port, disconnect_rate=1.0)
    before = sim_stats(port)["requests"]
    try:
        stream = gw.client().chat.completions.create(
            model="one", messages=MSG, max_tokens=30, stream=True, extra_body={"ignore_eos": True}
        )
        with pytest.raises(openai.APIError):
            for _ in stream:
                pass
    finally:
        set_faults(port)
    assert sim_stats(port)["requests"] - before <= 1


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
