"""A route choice: the one routing decision that dispatch, hedging, the deadline check and
/admin/route/explain all read, and what each strategy's score means."""

from __future__ import annotations

from dataclasses import dataclass

from app.record import Estimate
from app.routing.context import RouteContext
from app.routing.predict import by_first_token, decided, failure_penalty
from app.routing.state import BackendState


@dataclass(slots=True)
class RouteChoice:
    """One routing decision: the backend the alias's strategy picks now, every candidate's score, and
    what is predicted for the pick. Dispatch, the deadline check, hedging and /admin/route/explain all
    take this one decision, so none of them can explain or promise what the router would not do."""

    alias: str
    ctx: RouteContext
    state: BackendState | None  # None: no usable backend
    scores: dict[str, float]
    waits: bool  # every usable backend is at its concurrency limit: the request would wait for a slot
    meets_target: bool = True  # the pick is predicted to meet the request's latency target (if it has one)

    def estimate(self, state: BackendState | None = None) -> Estimate | None:
        """The latency model's estimate for the pick (or another candidate) now: the ranking's, where it made one."""
        state = state or self.state
        return None if state is None else decided(state, self.ctx)

    @property
    def predicted_s(self) -> float | None:
        """The pick's predicted TTFT (streams ranked by it) or end-to-end time, failures priced in, from the
        estimate the ranking made: what the deadline check and /admin/route/explain hold it to."""
        return self.predicted(by_first_token(self.ctx))

    def predicted(self, first_token: bool) -> float | None:
        """The pick's predicted time to its first token, or to its end, failures priced in (None: no pick).
        The end is the predicted one, with the stall the answer is expected to stand still for
        (`Estimate.stall_s`), not the stall-free figure routing ranks by (`predict.objective`): the
        arrivals that cause the stall are charged for it where they are placed, but it still delays this
        answer: without it, a deadline was checked, and a hedge timed, against an end the prediction itself
        put later (on llama.cpp most answers stand still for a neighbour's prefill, issue 24)."""
        if self.state is None:
            return None
        est = decided(self.state, self.ctx)
        return (est.ttft_s if first_token else est.e2e_s) * failure_penalty(self.state, self.ctx.now)

SCORE_MEANING = {
    "round_robin": "turn", "weighted": "weighted turn", "least_inflight": "in-flight count",
    "lowest_latency": "observed latency (s)", "predicted_latency": "predicted latency (s)",
    "prefix_aware": "predicted latency with the cached prefix (s), warmest within the sticky margin",
    "latency_aware": "predicted latency counting only uncached prompt tokens and the prompt tokens in flight, plus the "
                     "delay the placement passes on to the next arrival (s)",
}
