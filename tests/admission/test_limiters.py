"""The in-process limiter and the Redis script obey the same rules (each test runs against both)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app.admission.limits import BUDGET, CONCURRENT, REQUESTS, TOKENS, Check
from app.admission.local_limiter import LocalLimiter
from app.admission.redis_limiter import LimiterDown, RedisLimiter

WINDOW = 60.0


@pytest.fixture(params=["memory", "redis"])
def with_limiter(request):
    """Runs `fn(limiter)` on a fresh event loop with a fresh limiter (and fresh Redis keys)."""
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else None

    def run(fn):
        async def go():
            lim = LocalLimiter(WINDOW, 900) if url is None else RedisLimiter(url, f"test:{uuid.uuid4().hex[:8]}:", 1.0, WINDOW, 900)
            try:
                return await fn(lim)
            finally:
                await lim.aclose()
        return asyncio.run(go())
    return run


def rid() -> str:
    return uuid.uuid4().hex


def test_requests_are_admitted_up_to_the_limit_then_refused_with_a_wait(with_limiter):
    checks = (Check(REQUESTS, "t:a:requests", 5, "tenant a"),)

    async def go(limiter):
        results = [await limiter.admit(checks, rid(), 0) for _ in range(7)]
        return results

    results = with_limiter(go)
    assert [r.admitted for r in results] == [True] * 5 + [False] * 2
    denied = results[-1]
    assert denied.denied.kind == REQUESTS
    # One request refills in window / limit = 12 s.
    assert 11.0 < denied.retry_after_s <= 12.0
    assert results[4].states[0].remaining < 1


def test_tokens_reserve_then_reconcile_gives_back_the_unused(with_limiter):
    checks = (Check(TOKENS, "t:a:tokens", 1000, "tenant a"),)

    async def go(limiter):
        first = await limiter.admit(checks, "r1", 800)
        refused = await limiter.admit(checks, "r2", 300)
        await limiter.settle(checks, "r1", 800, 100, first.periods)  # used 100 of the 800 reserved
        again = await limiter.admit(checks, "r3", 300)
        return first, refused, again

    first, refused, again = with_limiter(go)
    assert first.admitted and 199 < first.states[0].remaining <= 201
    assert not refused.admitted and refused.denied.kind == TOKENS
    assert again.admitted and 599 < again.states[0].remaining <= 601


def test_overrun_is_a_debt_the_next_request_waits_out(with_limiter):
    checks = (Check(TOKENS, "t:a:tokens", 1000, "tenant a"),)

    async def go(limiter):
        d = await limiter.admit(checks, "r1", 100)
        await limiter.settle(checks, "r1", 100, 1500, d.periods)  # the answer ran long
        return await limiter.admit(checks, "r2", 1)

    refused = with_limiter(go)
    assert not refused.admitted and refused.retry_after_s > 25  # 500 tokens of debt at 1000/min


def test_a_request_larger_than_the_limit_is_never_admitted(with_limiter):
    checks = (Check(TOKENS, "t:a:tokens", 1000, "tenant a"),)
    d = with_limiter(lambda limiter: limiter.admit(checks, rid(), 5000))
    assert not d.admitted and d.never and d.retry_after_s is None


def test_concurrency_slots_are_given_back_on_settle(with_limiter):
    checks = (Check(CONCURRENT, "t:a:conc", 2, "tenant a"),)

    async def go(limiter):
        a = await limiter.admit(checks, "a", 0)
        b = await limiter.admit(checks, "b", 0)
        c = await limiter.admit(checks, "c", 0)
        await limiter.settle(checks, "a", 0, 0, {})
        d = await limiter.admit(checks, "d", 0)
        return a, b, c, d

    a, b, c, d = with_limiter(go)
    assert a.admitted and b.admitted and not c.admitted and d.admitted
    assert c.denied.kind == CONCURRENT and b.states[0].remaining == 0


def test_budget_counts_tokens_until_the_period_ends(with_limiter):
    checks = (Check(BUDGET, "t:a:budget", 1000, "tenant a", "day"),)

    async def go(limiter):
        a = await limiter.admit(checks, "a", 600)
        await limiter.settle(checks, "a", 600, 700, a.periods)
        b = await limiter.admit(checks, "b", 400)
        c = await limiter.admit(checks, "c", 300)
        return a, b, c

    a, b, c = with_limiter(go)
    assert a.admitted and not b.admitted and c.admitted
    assert b.denied.kind == BUDGET and 0 < b.retry_after_s <= 86400
    assert c.states[0].remaining == 0


def test_nothing_is_charged_when_one_check_refuses(with_limiter):
    checks = (Check(REQUESTS, "t:a:req", 10, "tenant a"), Check(TOKENS, "k:x:tok", 100, "key x"))

    async def go(limiter):
        refused = await limiter.admit(checks, "a", 500)
        states = await limiter.peek(checks)
        return refused, states

    refused, states = with_limiter(go)
    assert not refused.admitted and refused.denied.scope == "key x"
    assert states[0].remaining == 10  # the request was not counted


def test_monthly_budget_period_ends_on_the_first_of_next_month(with_limiter):
    checks = (Check(BUDGET, "t:a:m", 10, "tenant a", "month"),)
    d = with_limiter(lambda limiter: limiter.admit(checks, "a", 20))
    assert not d.admitted and d.never
    assert 0 < d.retry_after_s <= 31 * 86400


def test_redis_unreachable_raises_limiter_down():
    from tests.support import free_port

    lim = RedisLimiter(f"redis://127.0.0.1:{free_port()}/0", "x:", 0.2, WINDOW, 900)
    with pytest.raises(LimiterDown):
        asyncio.run(lim.admit((Check(REQUESTS, "r", 1, "t"),), "a", 0))


def test_a_refusal_reports_every_check_state_for_the_headers(with_limiter):
    checks = (Check(REQUESTS, "t:a:req", 3, "tenant a"), Check(TOKENS, "t:a:tok", 100, "tenant a"))

    async def go(limiter):
        await limiter.admit(checks, "a", 90)
        return await limiter.admit(checks, "b", 50)

    refused = with_limiter(go)
    assert not refused.admitted and refused.denied.kind == TOKENS
    req, tok = refused.states
    assert 1.9 < req.remaining <= 2.01 and 9.9 < tok.remaining < 10.1
    assert 53 < tok.reset_s < 55  # 90 tokens at 100 per 60 s


def test_a_new_limit_keeps_what_was_used(with_limiter):
    old, new = (Check(REQUESTS, "t:a:req", 30, "tenant a"),), (Check(REQUESTS, "t:a:req", 6, "tenant a"),)

    async def go(limiter):
        for _ in range(5):
            assert (await limiter.admit(old, rid(), 0)).admitted
        return [(await limiter.admit(new, rid(), 0)).admitted for _ in range(2)]

    assert with_limiter(go) == [True, False]
