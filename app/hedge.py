"""Hedged requests: when the first attempt is late against its prediction, race a second one.

The second attempt goes to the next best backend; whichever answers first (its first token, for a
stream) wins and the other is cancelled, which closes its connection and frees its backend slot.
A budget bounds how much extra load hedging may add.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from app.record import Event, RequestRecord
from app.retry import RetryBudgetTracker


async def hedged(
    attempt: Callable[[frozenset[str]], Awaitable],
    delay_s: float,
    budget: RetryBudgetTracker,
    record: RequestRecord,
    close: Callable[[object], Awaitable[None]],
):
    """Run `attempt()`; if it has not answered after `delay_s`, also run `attempt(avoid={its backend})`."""
    first = asyncio.ensure_future(attempt(frozenset()))
    done, _ = await asyncio.wait({first}, timeout=delay_s)
    if done or not budget.try_spend():
        return await first
    busy = record.attempt_log[-1].backend if record.attempt_log else ""
    record.events.append(Event(time.perf_counter(), "hedge", {"slipstream.backend": busy, "slipstream.hedge.after_s": round(delay_s, 4)}))
    second = asyncio.ensure_future(attempt(frozenset({busy})))
    pending = {first, second}
    error: BaseException | None = None
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            winners = [t for t in done if not t.cancelled() and t.exception() is None]
            for t in done:
                if t.cancelled() or t.exception() is not None:
                    error = error or (t.exception() if not t.cancelled() else asyncio.CancelledError())
            if winners:
                for extra in winners[1:]:  # both answered in the same instant: keep one
                    await close(extra.result())
                record.events.append(Event(time.perf_counter(), "hedge.won", {"slipstream.winner": "second" if winners[0] is second else "first"}))
                return winners[0].result()
        raise error  # both failed: the first failure speaks for them
    finally:
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
