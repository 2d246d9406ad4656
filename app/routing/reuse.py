"""How much of an alias's prompts its backends already hold: the expected worth of placing a new prefix
where every replica would place it (app/routing/latency_aware.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Per request, the weight of the newest one: about the last 20 requests count.
ALPHA = 0.05
# Unfed, the figure fades toward nothing with this time constant: a workload that stopped repeating
# prefixes an hour ago says little about the next request.
STALE_TAU_S = 300.0


@dataclass(slots=True)
class _Mean:
    share: float = 0.0
    updated: float = 0.0
    samples: int = 0
    cap: float = 1.0  # a share; math.inf for a count of tokens

    def add(self, share: float, now: float) -> None:
        current = self.get(now)
        w = max(ALPHA, 1.0 / (self.samples + 1))
        self.share = current + (min(self.cap, max(0.0, share)) - current) * w
        self.updated, self.samples = now, self.samples + 1

    def get(self, now: float) -> float:
        if not self.samples:
            return 0.0
        return self.share * math.exp(-max(0.0, now - self.updated) / STALE_TAU_S)


@dataclass(slots=True)
class ReuseTracker:
    """How much of an alias's prompts is found cached: the recent mean share some candidate was believed
    to hold (this gateway's index), and the recent mean share the backends reported reusing. A replica
    sees only its own traffic, so its index misses what other replicas warmed; the backends' reports
    do not, and the larger of the two is the expected reuse."""

    predicted: _Mean = field(default_factory=_Mean)
    reported: _Mean = field(default_factory=_Mean)
    # The same, in tokens: whether the prefixes that repeat are worth keeping in one place. A chat
    # template's first tokens, which every backend holds whoever placed the prompt, are a share of a
    # short prompt but only some 20 tokens (issue 24 item 5: a share times a long unique prompt's
    # length read as a long shared prefix).
    predicted_tokens: _Mean = field(default_factory=lambda: _Mean(cap=math.inf))
    reported_tokens: _Mean = field(default_factory=lambda: _Mean(cap=math.inf))

    def observe(self, matched_share: float, now: float, tokens: float = 0.0) -> None:
        """A routing decision: the share of the prompt the best-matched candidate was believed to hold
        (and those tokens)."""
        self.predicted.add(matched_share, now)
        self.predicted_tokens.add(tokens, now)

    def observe_reported(self, cached_share: float, now: float, tokens: float = 0.0) -> None:
        """An answer: the share of its prompt the backend said it reused (and those tokens)."""
        self.reported.add(cached_share, now)
        self.reported_tokens.add(tokens, now)

    def expected_share(self, now: float) -> float:
        return max(self.predicted.get(now), self.reported.get(now))

    def expected_tokens(self, now: float) -> float:
        """The recent mean of the prompt tokens found cached, per request."""
        return max(self.predicted_tokens.get(now), self.reported_tokens.get(now))
