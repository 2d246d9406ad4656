"""Per-request latency targets: a TTFT and a TPOT target per request (headers, else the alias's default),
used for best-fit routing: the cheapest backend predicted to meet the target, not always the fastest.

Headers (milliseconds), as llm-d names its per-request SLOs:
    x-slipstream-ttft-slo-ms: 800
    x-slipstream-tpot-slo-ms: 60
A request with a target no backend of its alias is predicted to meet is degraded along the fallback
chain; one marked sheddable (x-slipstream-priority: batch, or a level of 5 and up) is refused at once
with 503 and Retry-After instead, keeping the capacity for requests that must be served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.deadline import positive_ms
from app.routing.predict import decided

if TYPE_CHECKING:
    from app.config import ModelAlias
    from app.routing.context import RouteContext
    from app.routing.state import BackendState

TTFT_SLO_HEADER = "x-slipstream-ttft-slo-ms"
TPOT_SLO_HEADER = "x-slipstream-tpot-slo-ms"


@dataclass(frozen=True, slots=True)
class LatencyTarget:
    """What the request must get (seconds); None where it set no target."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    source: str = "header"  # "header" | "alias"

    def __bool__(self) -> bool:
        return self.ttft_s is not None or self.tpot_s is not None


NO_TARGET = LatencyTarget()


def from_headers(headers: Mapping[str, str]) -> LatencyTarget:
    """The request's own targets; a malformed value is the client's error, never ignored."""
    return LatencyTarget(positive_ms(headers.get(TTFT_SLO_HEADER), TTFT_SLO_HEADER),
                         positive_ms(headers.get(TPOT_SLO_HEADER), TPOT_SLO_HEADER), "header")


def for_alias(requested: LatencyTarget, spec: ModelAlias) -> LatencyTarget:
    """The request's targets, each filled in from the alias's default where the request set none."""
    ttft = requested.ttft_s if requested.ttft_s is not None else _s(spec.ttft_slo_ms)
    tpot = requested.tpot_s if requested.tpot_s is not None else _s(spec.tpot_slo_ms)
    source = "header" if requested else "alias"
    return LatencyTarget(ttft, tpot, source) if ttft is not None or tpot is not None else NO_TARGET


def meets(c: BackendState, ctx: RouteContext) -> bool:
    """Whether backend `c` is predicted to meet the request's targets now (queue and cached prefix included)."""
    t = ctx.target
    if not t:
        return True
    est = decided(c, ctx)
    if t.ttft_s is not None and est.ttft_s > t.ttft_s:
        return False
    return t.tpot_s is None or c.model.tpot(c.inflight + 1, ctx.now) <= t.tpot_s


def best_fit(pool: Sequence[BackendState], ctx: RouteContext, chosen: int) -> tuple[int, bool]:
    """(index, met): of the backends predicted to meet the target, the cheapest; among equally cheap,
    the one with the least slack (it fits the target most tightly, leaving the fastest free for
    requests that need them). Without a feasible one, the strategy's own pick, and met = False."""
    if not ctx.target:
        return chosen, True
    feasible = [i for i, c in enumerate(pool) if meets(c, ctx)]
    if not feasible:
        return chosen, False
    if chosen in feasible and len({_cost(pool[i]) for i in feasible}) == 1 and ctx.cached is not None:
        # Prefix-aware routing already chose a feasible warm backend: moving it would throw the cache away.
        return chosen, True
    return min(feasible, key=lambda i: (_cost(pool[i]), -decided(pool[i], ctx).ttft_s)), True


def _cost(c: BackendState) -> float:
    return c.backend.config.cost


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000
