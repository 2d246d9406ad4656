"""Load-balancing strategies: given the usable backends of an alias, pick one, and say why.

Each strategy scores every candidate (lower is better) so a decision can always be explained; the
score's meaning depends on the strategy (a turn, an in-flight count, seconds).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.routing.router import BackendState


@dataclass(slots=True)
class RouteContext:
    """What the router knows of the request it places."""

    stream: bool = False
    prompt_tokens: int = 0  # estimated from the body's length: for routing only, never reported
    max_tokens: int | None = None
    now: float = 0.0
    stream_objective: str = "ttft"  # what a stream is ranked by: "ttft" or "e2e"
    # max_tokens is the exact output length (vLLM's ignore_eos, or min_tokens = max_tokens), not a cap.
    exact_output: bool = False


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
    at the load it would have with this request, with a failure penalty and a little exploration."""

    name = "predicted_latency"

    def __init__(self, exploration: float = 0.02, seed: int | None = None) -> None:
        self.exploration = exploration
        self._rng = random.Random(seed)

    def choose(self, candidates, ctx, turn):
        # Load penalty (peak-EWMA's cost x (inflight + 1)): requests already sent to a backend slow
        # this one down in ways the model learns only later, and replicas deciding alike must not herd.
        scores = [predict(c, ctx) * (1.0 + c.inflight / LOAD_PENALTY_SLOTS) for c in candidates]
        measured = [s for c, s in zip(candidates, scores) if _measured(c)]
        if measured and len(measured) < len(scores):
            # A backend not yet measured is ranked as good as the best measured one until it has been
            # tried a few times: a pessimistic prior would otherwise keep it unmeasured for ever.
            best = min(measured)
            scores = [s if _measured(c) else min(s, best) for c, s in zip(candidates, scores)]
        if len(candidates) > 1 and self._rng.random() < self.exploration:
            # Now and then a non-best backend is tried, so one that recovered gets measured again.
            best = min(range(len(scores)), key=scores.__getitem__)
            others = [i for i in range(len(candidates)) if i != best]
            return self._rng.choice(others), scores
        n = len(candidates)
        order = [(turn + k) % n for k in range(n)]
        return min(order, key=lambda i: scores[i]), scores


def _measured(c: BackendState) -> bool:
    return c.model.tpot_base.samples >= 2


def predict(c: BackendState, ctx: RouteContext) -> float:
    """Predicted seconds to the first token (streams) or to the last (otherwise) on this backend now."""
    m = c.model
    load = c.inflight + 1
    ahead = c.inflight
    if c.scraped_waiting is not None:
        ahead = max(ahead, c.scraped_waiting)  # the backend's own queue, when it reports one
    ttft = m.ttft(ctx.prompt_tokens, ctx.now, ahead)
    if ctx.stream and ctx.stream_objective == "ttft":
        latency = ttft
    else:
        n = m.output_tokens.get(ctx.now)
        if ctx.max_tokens:
            n = ctx.max_tokens if ctx.exact_output else min(n, ctx.max_tokens)
        latency = ttft + max(0.0, n - 1) * m.tpot(load, ctx.now)
    # Failures cost a retry elsewhere: a backend answering fast errors must not look fast (Linkerd).
    return latency * (1.0 + 4.0 * m.failure_rate.get(ctx.now))


# In-flight requests at which the load penalty doubles a prediction.
LOAD_PENALTY_SLOTS = 8.0


def make_strategy(name: str) -> Strategy:
    return {"round_robin": RoundRobin, "weighted": Weighted, "least_inflight": LeastInflight,
            "lowest_latency": LowestLatency, "predicted_latency": PredictedLatency}[name]()


STRATEGY_NAMES = ("round_robin", "weighted", "least_inflight", "lowest_latency", "predicted_latency")

