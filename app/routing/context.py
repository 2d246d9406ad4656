"""What the router knows of the request it places: a value, read by every strategy.

Nobody patches a context another holds: dispatch derives one per alias (its policy filled in:
app.dispatch.loop.with_policy) and the router one per decision (the instant, exploration, the candidates'
cached prefixes, the expected answer length), each a fresh copy (`copy`) that only its maker writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.config import PrefixPolicy
    from app.record import Estimate
    from app.routing.output_length import Shape
    from app.routing.prefix_index import PromptBlocks
    from app.routing.prefix_routing import PrefixMatch
    from app.routing.slo import LatencyTarget


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
    # Under the ttft objective, first tokens predicted within this of the earliest (or this share of
    # that backend's predicted end-to-end time, if more) count as tied; the earliest end breaks the tie.
    ttft_tolerance_s: float = 0.0
    ttft_tolerance_ratio: float = 0.0
    # Whether a strategy may explore (try a backend it does not rank first); off when only asking what
    # it would choose (the deadline check, /admin/route/explain), so the answer is the ranking's.
    explore: bool = True
    # The prompt's block keys, for the prefix index (app/routing/prefix_index.py).
    prefix: PromptBlocks | None = None
    prefix_policy: PrefixPolicy | None = None
    # Set by prefix-aware routing: what of the prompt each candidate is believed to hold cached, so
    # predictions count only the uncached tokens and the prefill work already in flight there.
    cached: dict[str, PrefixMatch] | None = None
    # The request's own latency targets (headers), and with the alias's defaults filled in.
    requested_target: LatencyTarget | None = None
    target: LatencyTarget | None = None
    # What the request says of its answer's length (API, max_tokens, stop), and the output tokens the
    # router expects of that shape on the alias being routed (None: the backend's own average).
    shape: Shape | None = None
    expected_output: float | None = None
    # A JSON request whose protocol can be served from an upstream stream and assembled (chat and text
    # completions): on a backend that does so (`Backend.streams_json`) its first token is seen, as a
    # stream's is, so the lease books it as one.
    assembles: bool = False
    # Set by the strategies that predict: each candidate's estimate at this decision (with what it is
    # believed to hold of the prompt, in `cached`), so the chosen one's lease books what was ranked
    # rather than predicting it again. Never copied: a derived context is another decision.
    estimates: dict[str, Estimate] | None = None
    # Whether anyone reads every candidate's score (the decision's trace span, /admin/route/explain):
    # off, a strategy may leave uncomputed the scores its pick did not need (latency_aware: NaN). Set by
    # the router for each decision, never copied.
    scored: bool = True

    def copy(self) -> RouteContext:
        """A fresh value to derive from (an explicit constructor call: ~1 us, a third of dataclasses.replace);
        the ranking's estimates stay with the decision that made them."""
        return RouteContext(self.stream, self.prompt_tokens, self.max_tokens, self.now, self.stream_objective,
                            self.exact_output, self.ttft_tolerance_s, self.ttft_tolerance_ratio, self.explore, self.prefix,
                            self.prefix_policy, self.cached, self.requested_target, self.target, self.shape,
                            self.expected_output, self.assembles)
