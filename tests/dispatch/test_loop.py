"""The dispatch loop's retries, fallbacks, deadlines and breaker, scripted on the transport seam
(app.upstream.scripted): what each backend does is written in the test, so every case runs in this
process in milliseconds. The real-process versions of the cases only processes can show (a failing
HTTP backend ejected, a backend killed mid-stream, active health checks) are in tests/test_dispatch.py."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from app.config import GatewayConfig
from app.errors import UpstreamProtocolError
from app.upstream.scripted import Fail, Hang, Reply, ScriptedTransport, Stream, chunks, completion
from tests.scripted import call, in_flight, run

MSG = [{"role": "user", "content": "hello"}]
QUICK_RETRY = {"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05}
NAMES = ["good1", "good2", "bad_pair", "bad_solo", "bad_recover", "hang", "slow", "small_ctx", "big_ctx", "storm",
         "hang2"]


def config(**extra_models) -> GatewayConfig:
    def b(name: str, **more) -> dict:
        return {"base_url": f"http://127.0.0.1:9/{name}/v1", "model": f"m-{name}", "max_concurrency": 64, **more}

    hang_timeouts = {"timeouts": {"first_token_s": 0.3, "total_s": 2}}
    return GatewayConfig.model_validate({
        "server": {"queue_timeout_s": 5},
        "auth": {"mode": "open"},
        "reliability": {
            "retry_budget": {"ratio": 0.2, "min_per_s": 0.5, "window_s": 30},
            "breaker": {"consecutive_failures": 3, "error_rate": 0.9, "min_requests": 50, "cooldown_s": 0.5,
                        "max_cooldown_s": 2},
        },
        "backends": {n: b(n, **(hang_timeouts if n.startswith("hang") else {})) for n in NAMES},
        "models": {
            "pair": {"backends": ["bad_pair", "good1"], "strategy": "round_robin", "retry": QUICK_RETRY},
            "solo": {"backends": ["bad_solo"], "retry": QUICK_RETRY},
            "recover": {"backends": ["bad_recover"], "retry": {"max_attempts": 1}},
            "hangpair": {"backends": ["hang", "good2"], "strategy": "round_robin", "retry": QUICK_RETRY},
            "slow": {"backends": ["slow"], "timeouts": {"total_s": 0.3}, "fallbacks": ["quick"], "retry": QUICK_RETRY},
            "quick": {"backends": ["good2"]},
            "one": {"backends": ["good1"]},
            "hangonly": {"backends": ["hang2"], "retry": QUICK_RETRY},
            "short": {"backends": ["small_ctx"], "context_fallback": "long"},
            "long": {"backends": ["big_ctx"]},
            "storm": {"backends": ["storm"], "retry": QUICK_RETRY},
            "stormpair": {"backends": ["storm", "good1"], "strategy": "round_robin", "retry": QUICK_RETRY},
            **extra_models,
        },
    })


# What each backend does, as the simulator's faults did in the process version.
CONTEXT_OVERFLOW = {"error": {"message": "This model's maximum context length is 64 tokens.", "type": "invalid_request_error",
                              "code": "context_length_exceeded"}}


def fleet(**override):
    """A script: healthy backends answer (JSON or stream, as asked), `override` maps a backend to a step."""

    def step(backend: str, n: int):
        if backend in override:
            s = override[backend]
            return s(n) if callable(s) else s
        if backend.startswith("hang"):
            return Hang()
        return Reply(completion("hi", f"m-{backend}"))

    return step


class Streams:
    """Healthy backends stream when a stream is asked for: the transport picks by backend, so the
    script reads the call just recorded."""

    def __init__(self, transport_holder: list, **override) -> None:
        self._holder, self._override = transport_holder, override

    def __call__(self, backend: str, n: int):
        if backend in self._override:
            return self._override[backend]
        if backend.startswith("hang"):
            return Hang()
        streamed = self._holder[0].calls[-1].stream
        return Stream(chunks("hi", f"m-{backend}")) if streamed else Reply(completion("hi", f"m-{backend}"))


def streaming_transport(**override) -> ScriptedTransport:
    holder: list = []
    t = ScriptedTransport(Streams(holder, **override))
    holder.append(t)
    return t


async def send_many(gw, n: int, model: str, concurrency: int = 64, stream: bool = False) -> Counter:
    """n calls, `concurrency` at a time, each classified; the counts add up to n."""
    outcomes: Counter = Counter()
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            a = await call(gw, {"model": model, "messages": MSG, "max_tokens": 4, "stream": stream})
        if a.status != 200:
            outcomes[f"error_{a.status}"] += 1
        elif stream and not any(b'"finish_reason":"stop"' in e or b'"finish_reason": "stop"' in e for e in a.events):
            outcomes["error_stream"] += 1
        else:
            outcomes["fallback" if "x-slipstream-fallback" in a.headers else "ok"] += 1

    await asyncio.gather(*(one() for _ in range(n)))
    assert sum(outcomes.values()) == n
    return outcomes


def _upstream(t: ScriptedTransport, backend: str) -> int:
    return sum(1 for c in t.calls if c.backend == backend)


def test_one_failing_backend_beside_a_healthy_one_is_ejected():
    t = ScriptedTransport(fleet(bad_pair=Reply({"error": {"message": "boom"}}, status=500)))

    async def scenario(gw):
        outcomes = await send_many(gw, 40, "pair", concurrency=2)
        return outcomes, gw.ejected_backends(), in_flight(gw)

    outcomes, ejected, held = run(config(), t, scenario)
    assert outcomes == Counter(ok=40)
    # Ejected after 3 consecutive failures: it saw those, the calls already in flight, a probe or two.
    assert _upstream(t, "bad_pair") <= 8
    assert "bad_pair" in ejected
    assert not any(held.values())


def test_hang_before_first_token_is_retried_elsewhere():
    t = streaming_transport()

    async def scenario(gw):
        return await send_many(gw, 10, "hangpair", stream=True)

    assert run(config(), t, scenario) == Counter(ok=10)
    assert _upstream(t, "hang") >= 1  # round robin sent some there first; each was retried on good2


def test_deadline_header_caps_the_wait():
    t = streaming_transport()

    async def scenario(gw):
        t0 = time.perf_counter()
        a = await call(gw, {"model": "hangonly", "messages": MSG, "stream": True},
                       headers={"x-slipstream-timeout-ms": "150"})
        return a, time.perf_counter() - t0

    answer, elapsed = run(config(), t, scenario)
    # The backend's own first-token limit is 0.3 s; the request's 150 ms deadline cuts in first.
    assert answer.status == 504 and answer.error["code"] == "deadline_exceeded"
    assert elapsed < 0.28


def test_bad_deadline_header_is_400():
    t = ScriptedTransport(fleet())

    async def scenario(gw):
        return await call(gw, {"model": "quick", "messages": MSG}, headers={"x-slipstream-timeout-ms": "soon"})

    assert run(config(), t, scenario).status == 400
    assert t.calls == []


def test_slow_backend_falls_back_to_smaller_model():
    t = ScriptedTransport(fleet(slow=Reply(completion("late", "m-slow"), delay_s=5)))

    async def scenario(gw):
        return await call(gw, {"model": "slow", "messages": MSG, "max_tokens": 20})

    a = run(config(), t, scenario)
    assert a.status == 200
    assert a.headers["x-slipstream-fallback"] == "quick; reason=upstream_timeout"
    assert a.headers["x-slipstream-model"] == "m-good2"
    assert a.json()["model"] == "slow"  # the alias asked for; the header says which model answered


def test_context_length_error_falls_back_to_longer_context():
    t = ScriptedTransport(fleet(small_ctx=Reply(CONTEXT_OVERFLOW, status=400)))

    async def scenario(gw):
        return await call(gw, {"model": "short", "messages": [{"role": "user", "content": "word " * 100}],
                               "max_tokens": 8})

    a = run(config(), t, scenario)
    assert a.status == 200
    assert a.headers["x-slipstream-fallback"] == "long; reason=context_length"
    assert a.headers["x-slipstream-model"] == "m-big_ctx"


def test_client_errors_are_not_retried_or_fallen_back():
    t = ScriptedTransport(fleet(good2=Reply({"error": {"message": "n must be an integer"}}, status=400)))

    async def scenario(gw):
        return await call(gw, {"model": "quick", "messages": MSG, "max_tokens": 4, "n": 2})

    assert run(config(), t, scenario).status == 400
    assert _upstream(t, "good2") == 1


def test_429_storm_alone_honours_retry_after_and_the_budget():
    t = ScriptedTransport(fleet(storm=Reply({"error": {"message": "slow down"}}, status=429,
                                            headers={"retry-after": "0.05"})))

    async def scenario(gw):
        return await send_many(gw, 30, "storm")

    assert run(config(), t, scenario) == Counter(error_429=30)
    # 30 requests, budget 20 % of them plus 0.5/s over a 30 s window: at most 30 + 6 + 15 upstream
    # calls, where 3 attempts each would have made 90.
    assert 30 < _upstream(t, "storm") <= 30 + 6 + 15


def test_429_storm_beside_a_healthy_backend_is_absorbed():
    t = ScriptedTransport(fleet(storm=Reply({"error": {"message": "slow down"}}, status=429,
                                            headers={"retry-after": "5"})))

    async def scenario(gw):
        return await send_many(gw, 20, "stormpair")

    assert run(config(), t, scenario) == Counter(ok=20)


def test_failing_backend_alone_gives_a_clear_error_then_503_while_ejected():
    t = ScriptedTransport(fleet(bad_solo=Reply({"error": {"message": "boom"}}, status=500)))

    async def scenario(gw):
        return await call(gw, {"model": "solo", "messages": MSG}), await call(gw, {"model": "solo", "messages": MSG})

    first, later = run(config(), t, scenario)
    assert first.status == 500  # the backend's own error, after retries
    assert later.status == 503 and later.error["code"] == "no_backend_available"
    assert int(later.headers["retry-after"]) >= 1


def test_backend_that_recovers_is_readmitted():
    healthy = asyncio.Event()

    def bad_recover(n: int):
        return Reply(completion("back")) if healthy.is_set() else Reply({"error": {"message": "boom"}}, status=500)

    t = ScriptedTransport(fleet(bad_recover=bad_recover))

    async def scenario(gw):
        ask = {"model": "recover", "messages": MSG}
        early = [(await call(gw, ask)).status for _ in range(3)]
        ejected = await call(gw, ask)
        healthy.set()
        # After the cooldown (0.5 s), one probe goes through; its success closes the breaker.
        deadline = time.monotonic() + 3
        while (await call(gw, {**ask, "max_tokens": 2})).status != 200:
            assert time.monotonic() < deadline, "never readmitted"
            await asyncio.sleep(0.1)
        return early, ejected, gw.ejected_backends()

    early, ejected, after = run(config(), t, scenario)
    assert early == [500, 500, 500]
    assert ejected.status == 503 and ejected.error["code"] == "no_backend_available"
    assert "bad_recover" not in after


def test_failure_after_first_byte_is_an_error_event_and_not_retried():
    t = streaming_transport(good1=Stream(chunks("partial answer", "m-good1")[:2], cut=True))

    async def scenario(gw):
        return await call(gw, {"model": "one", "messages": MSG, "max_tokens": 30, "stream": True}), in_flight(gw)

    a, held = run(config(), t, scenario)
    assert a.status == 200  # the stream had begun: the failure can only be an event in it
    assert a.events and b'"error"' in a.events[-1]
    assert _upstream(t, "good1") == 1
    assert not any(held.values())


def test_a_refused_connection_is_retried_on_the_other_backend():
    t = ScriptedTransport(fleet(bad_pair=Fail(UpstreamProtocolError("connection reset by backend bad_pair"))))

    async def scenario(gw):
        return await send_many(gw, 10, "pair", concurrency=1)

    assert run(config(), t, scenario) == Counter(ok=10)
