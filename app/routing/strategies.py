"""Load-balancing strategies: given the usable backends of an alias, pick one, and say why.

Each strategy scores every candidate (lower is better) so a decision can always be explained; the
score's meaning depends on the strategy (a turn, an in-flight count, seconds).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from app.routing.predict import estimate, failure_penalty, objective

if TYPE_CHECKING:
    from app.routing.context import RouteContext
    from app.routing.state import BackendState


class Strategy(Protocol):
    name: str

    def choose(self, candidates: Sequence[BackendState], ctx: RouteContext, turn: int) -> tuple[int, list[float]]:
        """The index of the chosen candidate, and every candidate's score."""
        ...


class RoundRobin:
    name = "round_robin"

    def choose(self, candidates, ctx, turn):
        n = len(candidates)
        scores = [float((i - turn) % n) for i in range(n)]
        return turn % n, scores


class Weighted:
    """Smooth weighted round robin (as nginx does it): even spacing, proportions from `weight`."""

    name = "weighted"

    def choose(self, candidates, ctx, turn):
        total = sum(c.weight for c in candidates)
        for c in candidates:
            c.wrr_current += c.weight
        best = max(range(len(candidates)), key=lambda i: candidates[i].wrr_current)
        candidates[best].wrr_current -= total
        return best, [-c.wrr_current for c in candidates]


class LeastInflight:
    name = "least_inflight"

    def choose(self, candidates, ctx, turn):
        # Ties rotate with the turn so an idle fleet is not served by its first backend alone.
        n = len(candidates)
        scores = [float(c.inflight) for c in candidates]
        order = [(turn + k) % n for k in range(n)]
        return min(order, key=lambda i: scores[i]), scores


class LowestLatency:
    """The average of recently observed latencies, as other gateways route: no load term, and an
    untried backend counts as 0 ms."""

    name = "lowest_latency"

    def choose(self, candidates, ctx, turn):
        scores = [c.model.observed_latency for c in candidates]
        n = len(candidates)
        order = [(turn + k) % n for k in range(n)]
        return min(order, key=lambda i: scores[i]), scores


class PredictedLatency:
    """Lowest predicted TTFT (streams) or end-to-end time (otherwise) from each backend's latency model
    and the work in flight there, with failure and load penalties and a little exploration."""

    name = "predicted_latency"

    def __init__(self, exploration: float = 0.02, seed: int | None = None) -> None:
        self.exploration = exploration
        self._rng = random.Random(seed)

    def choose(self, candidates, ctx, turn):
        # Ranked without the prefill work in flight at each backend, as it always was: waited for there too,
        # its picks move (1 of the pinned script's 161 acquisitions), and no measurement asked for that. So
        # these are not kept on the context (`ctx.estimates`): the lease and the target check predict with it.
        estimates = [estimate(c, ctx, backlog=False) for c in candidates]
        # Load penalty: replicas deciding alike must not herd, and the model learns a backend's load late.
        weights = [failure_penalty(c, ctx.now) * _load_penalty(c) for c in candidates]
        scores = self._unmeasured_as_best(candidates, [objective(e, ctx) * w for e, w in zip(estimates, weights)])
        if ctx.explore and len(candidates) > 1 and self._rng.random() < self.exploration:
            # Now and then the backend heard from least recently is tried, so one that recovered gets
            # measured again; only one with a free slot, so exploring never queues a request.
            best = min(range(len(scores)), key=scores.__getitem__)
            idle = [i for i in range(len(candidates)) if i != best and estimates[i].queue_s == 0.0]
            if idle:
                return min(idle, key=lambda i: candidates[i].model.tpot_base.updated), scores
        n = len(candidates)
        order = [(turn + k) % n for k in range(n)]
        first = min(order, key=lambda i: scores[i])
        if ctx.stream and ctx.stream_objective == "ttft" and (ctx.ttft_tolerance_s > 0 or ctx.ttft_tolerance_ratio > 0):
            # First tokens within the tolerance of the earliest are as good as tied: of those, the
            # stream that also ends first wins. A long answer is not sent to the slowest decoder to
            # save a few milliseconds of prefill, nor to wait seconds longer for its last token.
            e2e = self._unmeasured_as_best(candidates, [e.stall_free_e2e_s * w for e, w in zip(estimates, weights)])
            cutoff = scores[first] + max(ctx.ttft_tolerance_s, ctx.ttft_tolerance_ratio * estimates[first].e2e_s)
            return min((i for i in order if scores[i] <= cutoff), key=lambda i: e2e[i]), scores
        return first, scores

    @staticmethod
    def _unmeasured_as_best(candidates, scores: list[float]) -> list[float]:
        # A backend not yet measured is ranked as good as the best measured one until it has been
        # tried a few times: a pessimistic prior would otherwise keep it unmeasured for ever.
        measured = [s for c, s in zip(candidates, scores) if _measured(c)]
        if not measured or len(measured) == len(scores):
            return scores
        best = min(measured)
        return [s if _measured(c) else min(s, best) for c, s in zip(candidates, scores)]


def _load_penalty(c: BackendState) -> float:
    """1 + LOAD_PENALTY x the share of the backend's slots in use (its known capacity while unknown)."""
    m = c.model
    return 1.0 + LOAD_PENALTY * c.inflight / (m.slots or max(m.slots_at_least, LOAD_PENALTY_SLOTS))


def _measured(c: BackendState) -> bool:
    return c.model.tpot_base.samples >= 2


# The load penalty multiplies a prediction by 1 + LOAD_PENALTY x inflight / slots: the learned slots,
# or while a backend has never been seen full, the most it ran without queueing (at least
# LOAD_PENALTY_SLOTS). Small: the queue and the batch's TPOT are modelled; this only keeps replicas
# that decide alike from herding and hedges against a model that learns a backend's load late.
LOAD_PENALTY = 0.25
LOAD_PENALTY_SLOTS = 8


STRATEGY_NAMES = ("latency_aware", "round_robin", "weighted", "least_inflight", "lowest_latency", "predicted_latency")

# Strategies whose predictions count only the prompt tokens each candidate does not hold cached.
PREFIX_STRATEGIES = frozenset({"latency_aware", "prefix_aware"})
