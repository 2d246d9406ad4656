"""Hedged requests: when the first attempt is late against its prediction, race a second one.

The second attempt goes to the next best backend; whichever answers first (its first token, for a
stream) wins and the other is cancelled, which closes its connection and frees its backend slot.
A budget bounds how much extra load hedging may add.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.dispatch.decide import RetryBudgetTracker
from app.record import Event

T = TypeVar("T")


async def hedged(
    attempt: Callable[[frozenset[str]], Awaitable[T]],
    delay_s: float,
    budget: RetryBudgetTracker,
    events: list[Event],
    close: Callable[[T], None],
    tried: list[str],
) -> T:
    """Run `attempt()`; if it has not answered after `delay_s`, also run `attempt(avoid={its backend})`.

    Every attempt that answers but does not win is handed to `close`, on every path (cancellation too).
    `tried` is filled by the attempts with the backends they leased (the hedge avoids the first's).
    """
    first = asyncio.ensure_future(attempt(frozenset()))
    tasks = [first]
    try:
        done, _ = await asyncio.wait({first}, timeout=delay_s)
        if done or not budget.try_spend():
            result = await first
            tasks.remove(first)
            return result
        busy = tried[-1] if tried else ""  # the late attempt's backend (none yet: still waiting for a slot)
        events.append(Event(time.perf_counter(), "hedge", {"slipstream.backend": busy, "slipstream.hedge.after_s": round(delay_s, 4)}))
        second = asyncio.ensure_future(attempt(frozenset({busy})))
        tasks.append(second)
        pending = {first, second}
        error: BaseException | None = None
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            winners = [t for t in done if not t.cancelled() and t.exception() is None]
            for t in done:
                if t.cancelled() or t.exception() is not None:
                    error = error or (t.exception() if not t.cancelled() else asyncio.CancelledError())
            if winners:
                won = winners[0]
                events.append(Event(time.perf_counter(), "hedge.won", {"slipstream.winner": "second" if won is second else "first"}))
                tasks.remove(won)  # the caller owns the winner; every other task is closed below
                return won.result()
        assert error is not None  # every task ended without a winner, so one failed
        raise error  # both failed: the first failure speaks for them
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A loser that answered (even in the instant it was cancelled) still holds its slot: give it back.
        for t in tasks:
            if not t.cancelled() and t.exception() is None:
                close(t.result())
