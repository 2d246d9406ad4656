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
from app.routing.placement_feed import Computed, Event, Freed, Placed
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
        slotted = slot_scoped_cache(state)
        # As the lease does: on a slot's cache the prefix is free for a sibling at the request's end.
        state.prefixes.record(e.keys, now, now + (e.release_in_s if slotted else e.ready_in_s), copy)
        if slotted:
            m = state.model
            state.prefixes.occupy(e.keys, now + e.release_in_s, copy, computes=e.computes,
                                  slots=m.slots if m.slots_source == "reported" else None)
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
    copy = r.copy
    if copy.computed is not None and not copy.computed.is_set():
        copy.computed_at = now
        copy.computed.set()
    if not slot_scoped_cache(r.state) and not copy.is_set():
        copy.set()
        r.state.prefixes.settle(r.keys, now, copy)


def _freed(r: _Remote, now: float, lost: str | None) -> None:
    copy = r.copy
    if lost is not None and not copy.computed_yet:
        copy.lost = "backend" if lost == "backend" else "ended"
    if copy.computed is not None and not copy.computed.is_set():
        if copy.lost is None:
            copy.computed_at = now
        copy.computed.set()
    if not copy.is_set():
        copy.set()
        r.state.prefixes.settle(r.keys, now, copy, copy.lost is not None)
