"""Other gateway replicas' copies of prompt prefixes, held in this replica's prefix indexes as its own
leases hold theirs (app/routing/lease.py), from the events the placement feed hears.

A copy placed by another replica is recorded on its backend's index with its predicted first token as a
sibling's copy still being prefilled (a request here may wait for it rather than compute the prompt again),
and, where the backend's cache belongs to a slot (llama.cpp), it occupies a copy until its request ends.
Its first token settles it where the cache is shared by every request; its end frees it, or drops the
blocks it brought if it ended before computing them. An end never heard (Redis lost the message, the
replica died) is taken at the predicted end plus EXPIRY_GRACE_S, at least: the copy is then free.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from app.routing.lease import PrefixCopy
from app.routing.placement_feed import Computed, Event, Freed, Lost, Placed
from app.routing.state import BackendState, slot_scoped_cache

# A copy whose end is not heard is taken as free this long after its predicted end, or twice that end's
# distance if longer (a long answer predicted short), and swept this often.
EXPIRY_GRACE_S = 5.0
SWEEP_S = 1.0


@dataclass(slots=True)
class _Remote:
    state: BackendState
    keys: list[bytes]
    copy: PrefixCopy
    expires: float


class RemoteCopies:
    """The feed's listener: applies other replicas' Placed, Computed and Freed to the backends' indexes."""

    def __init__(self, states: dict[str, BackendState]) -> None:
        self._states = states
        self._copies: dict[tuple[str, int], _Remote] = {}
        self.expired = 0  # copies whose end was never heard

    def __len__(self) -> int:
        return len(self._copies)

    def __call__(self, event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, Placed):
            self._placed(event, now)
        elif isinstance(event, Computed):
            r = self._copies.get((event.origin, event.copy))
            if r is not None:
                _computed(r, now)
        elif isinstance(event, Freed):
            r = self._copies.pop((event.origin, event.copy), None)
            if r is not None:
                _freed(r, now, event.lost)

    def _placed(self, e: Placed, now: float) -> None:
        state = self._states.get(e.backend)
        if state is None or not e.keys:
            return
        copy = PrefixCopy(True, now + e.ready_in_s, e.ready_in_s, now)
        state.place_copy(e.keys, now, e.ready_in_s, e.release_in_s, copy, e.computes)
        self._copies[(e.origin, e.copy)] = _Remote(state, e.keys, copy,
                                                    now + e.release_in_s + max(EXPIRY_GRACE_S, e.release_in_s))

    def expire(self, now: float | None = None) -> int:
        """Free the copies whose end is overdue past their grace; how many."""
        now = time.monotonic() if now is None else now
        overdue = [k for k, r in self._copies.items() if r.expires <= now]
        for k in overdue:
            _freed(self._copies.pop(k), now, None)
        self.expired += len(overdue)
        return len(overdue)

    async def expire_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.expire()


def _computed(r: _Remote, now: float) -> None:
    r.copy.mark_computed(now)
    if not slot_scoped_cache(r.state) and not r.copy.is_set():
        r.state.free_copy(r.keys, r.copy, now)


def _freed(r: _Remote, now: float, lost: Lost) -> None:
    copy = r.copy
    if lost is not None and not copy.computed_yet:
        copy.lost = lost
    copy.mark_computed(now)
    if not copy.is_set():
        r.state.free_copy(r.keys, copy, now)
