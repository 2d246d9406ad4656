"""The default routing policy: lowest predicted latency, counting what each backend already holds of the
prompt and the prompt tokens it still has to process, with no margin to tune.

Each candidate's prediction (app/routing/predict.py) prefills only the prompt tokens the candidate is
not believed to hold cached (the prefix index's match, scaled by that backend's index accuracy), after
the uncached prompt tokens already in flight there (load counted in tokens, not requests), plus the
slot queue and the decode of the answer at the backend's batch. The lowest prediction wins: affinity
is worth exactly the prefill it saves now, so a warm backend keeps a prefix while waiting for it costs
less than computing it again elsewhere, and a busy warm backend sheds the prefix to a cold one, which
then holds it too.

A prefix no candidate holds has nothing to save now, but a shared one will come again: placing it where
it hashes to (rendezvous hashing over the candidates) makes every gateway replica send it to the same
backend without a shared index, so all of them reuse one copy. That placement may cost at most what
it is expected to save: the prefill of the prompt's reusable part times the share of this alias's
recent requests that found a prefix cached (app/routing/reuse.py measures both). On traffic that never
repeats a prefix the share falls to zero and so does the margin: unique prompts go to the lowest
prediction, as if prefixes did not exist (issue 24: the previous sticky margin of 50 ms plus 25 % sent
unique prompts to a hashed backend that was not the best, 6-30 % behind round robin's mean TTFT).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from app.routing.predict import estimate, failure_penalty, objective
from app.routing.prefix_routing import match, rendezvous
from app.routing.reuse import ReuseTracker
from app.routing.strategies import PredictedLatency

if TYPE_CHECKING:
    from app.routing.context import RouteContext


class LatencyAware:
    name = "latency_aware"

    def __init__(self, exploration: float = 0.01, seed: int | None = None) -> None:
        self.exploration = exploration
        self._rng = random.Random(seed)
        # How often this alias's prompts find a prefix cached, and how much of them: the expected worth
        # of placing a new prefix consistently (one tracker per alias: each alias has its own strategy).
        self.reuse = ReuseTracker()

    def choose(self, candidates, ctx: RouteContext, turn: int):
        n = len(candidates)
        if ctx.prefix is not None and ctx.prefix.keys:
            ctx.cached = {c.name: match(c, ctx) for c in candidates}
        elif ctx.cached is None:
            ctx.cached = {}
        estimates = [estimate(c, ctx) for c in candidates]
        raw = [objective(e, ctx) * failure_penalty(c, ctx.now) for c, e in zip(candidates, estimates)]
        scores = PredictedLatency._unmeasured_as_best(candidates, raw)
        order = [(turn + k) % n for k in range(n)]
        first = min(order, key=scores.__getitem__)
        matched = max((m.tokens for m in ctx.cached.values()), default=0.0)
        if ctx.explore and ctx.cached:  # a real placement, not a question (explain, the deadline check)
            self.reuse.observe(matched / ctx.prompt_tokens if ctx.prompt_tokens else 0.0, ctx.now)
        if ctx.explore and n > 1 and self.exploration and self._rng.random() < self.exploration:
            # Now and then the backend heard from least recently is tried (only an idle one, so exploring
            # never queues a request), so one that recovered gets measured again.
            idle = [i for i in range(n) if i != first and estimates[i].queue_s == 0.0]
            if idle:
                return min(idle, key=lambda i: candidates[i].model.tpot_base.updated), scores
        if not ctx.cached or n == 1:
            return first, scores
        if matched > 0 or not ctx.prefix:
            # Something is warm: its saving is already in the predictions.
            return first, scores
        # A prefix no one holds: its hashed backend, if that costs at most the expected saving.
        best = scores[first]
        c = candidates[first]
        margin = self.reuse.expected_share(ctx.now) * c.model.prefill_s(ctx.prompt_tokens, ctx.now)
        if margin <= 0.0 or (ctx.prefix_policy is not None and not ctx.prefix_policy.consistent_hashing):
            return first, scores
        group = ctx.prefix.group
        within = [i for i in range(n) if scores[i] <= best + margin]
        return max(within, key=lambda i: rendezvous(group, candidates[i].name)), scores
