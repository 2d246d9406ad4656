"""The wait for a backend slot when every backend of an alias is full: priority, fairness, deadlines.

Order of service, when a slot frees:
1. priority level (0 first): interactive traffic never waits behind batch;
2. within a level, weighted fair queuing across tenants (start-time fair queuing on slots granted):
   the backlogged tenant that has had the least service for its weight goes next, so one tenant's
   burst cannot starve another;
3. within a tenant, earliest deadline first, then arrival order.

The queue is bounded: when full, the least important waiter (highest level, then the newest) is
shed to make room for a more important newcomer; a newcomer no more important than it is refused.
Both get 503 with Retry-After, so batch traffic is shed first.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.admission.priority import INTERACTIVE_LEVEL

_INF = float("inf")


@dataclass(slots=True, eq=False)
class Waiter:
    names: frozenset[str]  # backends that may serve it
    future: asyncio.Future = field(repr=False)
    tenant: str = ""
    level: int = INTERACTIVE_LEVEL
    weight: float = 1.0
    deadline: float = _INF  # monotonic seconds; inf without a deadline
    seq: int = 0


class WaitQueue:
    def __init__(self, max_waiting: int = 1024, fair: bool = True) -> None:
        self.max_waiting = max_waiting
        self.fair = fair
        self._waiting: list[Waiter] = []
        self._seq = itertools.count()
        # Per level: each tenant's service so far in virtual time (slots granted / weight), and the
        # level's virtual clock (the service of the last tenant served) that idle tenants rejoin at.
        self._served: dict[int, dict[str, float]] = {}
        self._clock: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def __iter__(self) -> Iterator[Waiter]:
        return iter(self._waiting)

    def push(self, w: Waiter) -> Waiter | None:
        """Queue `w`; returns the waiter shed to bound the queue (`w` itself if it is refused)."""
        w.seq = next(self._seq)
        if len(self._waiting) < self.max_waiting:
            self._waiting.append(w)
            return None
        victim = max(self._waiting, key=lambda v: (v.level, v.seq))
        if victim.level <= w.level:
            return w
        self._waiting.remove(victim)
        self._waiting.append(w)
        return victim

    def discard(self, w: Waiter) -> None:
        try:
            self._waiting.remove(w)
        except ValueError:
            pass

    def pop_for(self, backend: str) -> Waiter | None:
        """The next waiter `backend` should serve (removed from the queue), or None."""
        best, best_key = None, None
        for w in self._waiting:
            if backend not in w.names or w.future.done():
                continue
            key = (w.level, self._start(w) if self.fair else 0.0, w.deadline, w.seq)
            if best_key is None or key < best_key:
                best, best_key = w, key
        if best is None or best_key is None:
            self._waiting = [w for w in self._waiting if not w.future.done()]
            return None
        self._waiting.remove(best)
        start = best_key[1]
        self._clock[best.level] = start
        self._served.setdefault(best.level, {})[best.tenant] = start + 1.0 / best.weight
        return best

    def _start(self, w: Waiter) -> float:
        """The virtual time at which `w`'s tenant would next be served at its level."""
        served = self._served.get(w.level)
        done = served.get(w.tenant, 0.0) if served else 0.0
        return max(done, self._clock.get(w.level, 0.0))

    def by_tenant(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self._waiting:
            if not w.future.done():
                out[w.tenant] = out.get(w.tenant, 0) + 1
        return out
