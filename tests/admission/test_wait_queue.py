"""When every backend is full, slots go by priority, then fair share across tenants, then deadline."""

from __future__ import annotations

import asyncio

import pytest

from app.admission.context import QueueContext
from app.admission.priority import BATCH, INTERACTIVE, Priority
from app.admission.wait_queue import Waiter, WaitQueue
from app.errors import Overloaded
from tests.routing.test_router import router

_LOOP = asyncio.new_event_loop()  # futures only: never run


def waiter(tenant="t", level=2, deadline=float("inf"), weight=1.0, names=("a",)) -> Waiter:
    return Waiter(frozenset(names), _LOOP.create_future(), tenant, level, weight, deadline)


def drain(q: WaitQueue, backend="a") -> list[Waiter]:
    out = []
    while (w := q.pop_for(backend)) is not None:
        out.append(w)
    return out


def test_interactive_is_served_before_batch_whatever_the_arrival():
    q = WaitQueue()
    b1, b2, i1 = waiter(level=7), waiter(level=7), waiter(level=2)
    for w in (b1, b2, i1):
        q.push(w)
    assert drain(q) == [i1, b1, b2]


def test_a_burst_from_one_tenant_does_not_starve_another():
    q = WaitQueue()
    burst = [waiter("a") for _ in range(10)]
    for w in burst:
        q.push(w)
    late = waiter("b")
    q.push(late)
    order = drain(q)
    assert order.index(late) <= 1  # served next but one at worst, not after the whole burst


def test_weights_share_slots_in_proportion():
    q = WaitQueue()
    for _ in range(30):
        q.push(waiter("heavy", weight=2.0))
        q.push(waiter("light", weight=1.0))
    first = drain(q)[:30]
    heavy = sum(1 for w in first if w.tenant == "heavy")
    assert 19 <= heavy <= 21  # 2:1 of the first 30 slots


def test_within_a_tenant_the_earliest_deadline_goes_first():
    q = WaitQueue()
    late, soon, none = waiter(deadline=50.0), waiter(deadline=10.0), waiter()
    for w in (none, late, soon):
        q.push(w)
    assert drain(q) == [soon, late, none]


def test_a_waiter_is_only_given_a_backend_it_may_use():
    q = WaitQueue()
    only_b = waiter(names=("b",))
    q.push(only_b)
    assert q.pop_for("a") is None and q.pop_for("b") is only_b


def test_full_queue_sheds_batch_first():
    q = WaitQueue(max_waiting=2)
    b1, b2 = waiter(level=7), waiter(level=7)
    q.push(b1)
    q.push(b2)
    i1 = waiter(level=2)
    assert q.push(i1) is b2  # the newest batch request makes room
    b3 = waiter(level=7)
    assert q.push(b3) is b3  # a batch newcomer is refused when only batch and better wait
    assert set(drain(q)) == {i1, b1}


def test_router_hands_a_freed_slot_to_interactive_before_earlier_batch():
    async def main():
        r = router({"a": 1})
        first = await r.acquire("m")
        order = []

        async def call(name: str, priority: Priority, tenant: str):
            lease = await r.acquire("m", queue=QueueContext(tenant, priority))
            order.append(name)
            await asyncio.sleep(0)
            lease.release()

        tasks = [asyncio.create_task(call(f"batch{i}", BATCH, "etl")) for i in range(3)]
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(call("interactive", INTERACTIVE, "web")))
        await asyncio.sleep(0.01)
        first.release()
        await asyncio.gather(*tasks)
        return order, r.states["a"].inflight

    order, inflight = asyncio.run(main())
    assert order[0] == "interactive" and inflight == 0


def test_router_sheds_a_batch_waiter_with_503_when_the_queue_is_full():
    async def main():
        r = router({"a": 1})
        r.queue.max_waiting = 1
        first = await r.acquire("m")
        notes = []

        async def call(priority: Priority):
            lease = await r.acquire("m", queue=QueueContext("t", priority, note=lambda what, s, attrs: notes.append(what)))
            lease.release()

        batch = asyncio.create_task(call(BATCH))
        await asyncio.sleep(0.01)
        interactive = asyncio.create_task(call(INTERACTIVE))
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as exc:
            await batch
        first.release()
        await interactive
        return exc.value, notes, r.states["a"].inflight

    err, notes, inflight = asyncio.run(main())
    assert err.code == "shed" and err.status == 503 and err.headers["retry-after"] == "1"
    assert notes == ["shed", "queued"] and inflight == 0


def test_without_fair_queuing_a_level_is_first_come_first_served():
    q = WaitQueue(fair=False)
    burst = [waiter("a") for _ in range(5)]
    late = waiter("b")
    for w in (*burst, late):
        q.push(w)
    assert drain(q) == [*burst, late]
