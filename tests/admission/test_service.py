"""Admission in process: limits by tenant and key, waiting instead of a 429, settling, span events."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.admission.auth import Tenant
from app.admission.service import Admission, Admitted
from app.config import GatewayConfig
from app.deadline import NO_DEADLINE, Deadline
from app.errors import RateLimited
from app.protocols import CHAT
from app.record import Usage

BODY = b'{"model": "chat", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 10}'


def admission(**limits) -> Admission:
    config = GatewayConfig.model_validate({
        "auth": {"mode": "open", "open_tenant": "t"},
        "backends": {"a": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "models": {"chat": {"backends": ["a"]}},
        "limits": limits,
    })
    return Admission.from_config(config)


async def admit(adm: Admission, events: list | None = None, deadline: Deadline = NO_DEADLINE, headers=None) -> Admitted:
    return await adm.admit(Tenant("t"), CHAT.parse(BODY), headers or {}, deadline, f"r{time.perf_counter_ns()}", events)


def test_over_the_limit_a_call_waits_for_its_turn_when_configured():
    # 2 a second: the third call waits ~0.5 s for the bucket, then goes.
    adm = admission(window_s=1, max_wait_s=2, tenants={"t": {"limits": {"requests_per_minute": 2}}})

    async def go():
        await admit(adm)
        await admit(adm)
        started = time.monotonic()
        admitted = await admit(adm)
        return time.monotonic() - started, admitted

    waited, admitted = asyncio.run(go())
    assert 0.4 < waited < 1.0
    assert any(e.name == "ratelimit.wait" for e in admitted.events)


def test_a_wait_longer_than_the_deadline_is_a_429_at_once():
    adm = admission(window_s=10, max_wait_s=30, tenants={"t": {"limits": {"requests_per_minute": 1}}})

    async def go():
        await admit(adm)
        events: list = []  # a refused call has no Admitted: its events go where the caller said
        started = time.monotonic()
        with pytest.raises(RateLimited):
            await admit(adm, events, Deadline(time.monotonic() + 0.2))
        return time.monotonic() - started, events

    took, events = asyncio.run(go())
    assert took < 0.1
    limited = [e for e in events if e.name == "ratelimit.limited"]
    assert limited and limited[0].attributes["slipstream.ratelimit.limit"] == "requests"


def test_the_end_of_a_call_settles_its_reservation_with_the_usage():
    adm = admission(tenants={"t": {"limits": {"tokens_per_minute": 1000, "concurrent_requests": 1}}})

    async def go():
        admitted = await admit(adm)
        assert admitted.headers["x-ratelimit-remaining-tokens"] == str(1000 - 2 - 10)
        admitted.settle(Usage(5, 3), answered=True)
        await adm.settled()  # the settlement runs in the background
        return await adm.usage()

    usage = asyncio.run(go())["t"]["tenant t"]
    assert usage["tokens"]["remaining"] == 1000 - 8
    assert usage["concurrent_requests"]["in_use"] == 0


def test_a_failed_call_gives_its_tokens_back():
    adm = admission(tenants={"t": {"limits": {"tokens_per_minute": 1000}}})

    async def go():
        admitted = await admit(adm)
        admitted.settle(None, answered=False)  # no backend answered
        await adm.settled()  # the settlement runs in the background
        return await adm.usage()

    assert asyncio.run(go())["t"]["tenant t"]["tokens"]["remaining"] == 1000


def test_priority_header_and_tenant_default_reach_the_queue_context():
    adm = admission(tenants={"t": {"priority": "batch", "weight": 3}})

    async def go(headers):
        return (await admit(adm, headers=headers)).queue

    qc = asyncio.run(go({}))
    assert qc.priority.klass == "batch" and qc.weight == 3 and qc.tenant == "t"
    assert asyncio.run(go({"x-slipstream-priority": "0"})).priority.level == 0


def test_a_settlement_that_fails_is_tried_again():
    from app.admission.redis_limiter import LimiterDown

    adm = admission(tenants={"t": {"limits": {"concurrent_requests": 1}}})
    real = adm.limiter.settle
    calls = []

    async def flaky(*args):
        calls.append(args)
        if len(calls) == 1:
            raise LimiterDown("blip")
        await real(*args)

    adm.limiter.settle = flaky

    async def go():
        admitted = await admit(adm)
        admitted.settle(None, answered=False)
        await asyncio.sleep(0.4)
        return await adm.usage()

    usage = asyncio.run(go())
    assert len(calls) == 2 and usage["t"]["tenant t"]["concurrent_requests"]["in_use"] == 0
    assert adm.counters.errors["settle"] == 1


def test_request_limits_alone_need_no_settlement_call():
    adm = admission(tenants={"t": {"limits": {"requests_per_minute": 100}}})
    calls = []

    async def spy(*args):
        calls.append(args)

    adm.limiter.settle = spy

    async def go():
        admitted = await admit(adm)
        admitted.settle(Usage(5, 3), answered=True)
        await adm.settled()

    asyncio.run(go())
    assert calls == []
