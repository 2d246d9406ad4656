"""Load-balancing strategies: given the backends of an alias with free capacity, pick one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class Candidate(Protocol):
    name: str

    @property
    def inflight(self) -> int: ...


# A strategy sees the alias's candidates (in config order, only those with a free slot) and a
# counter that increases with every decision for this alias; it returns the index it picks.
Strategy = Callable[[Sequence[Candidate], int], int]


def round_robin(candidates: Sequence[Candidate], turn: int) -> int:
    return turn % len(candidates)


def least_inflight(candidates: Sequence[Candidate], turn: int) -> int:
    # Ties rotate with the turn so an idle fleet is not served by its first backend alone.
    n = len(candidates)
    best, best_load = 0, None
    for k in range(n):
        i = (turn + k) % n
        load = candidates[i].inflight
        if best_load is None or load < best_load:
            best, best_load = i, load
    return best


STRATEGIES: dict[str, Strategy] = {"round_robin": round_robin, "least_inflight": least_inflight}
