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
class _Means:
    """Two recent means fed together (a share of the prompt and those tokens): one fading for both."""

    share: float = 0.0
    tokens: float = 0.0
    updated: float = 0.0
    samples: int = 0

    def add(self, share: float, tokens: float, now: float) -> None:
        fade = self.fade(now)
        w = max(ALPHA, 1.0 / (self.samples + 1))
        current = self.share * fade
        self.share = current + (min(1.0, max(0.0, share)) - current) * w
        current = self.tokens * fade
        self.tokens = current + (max(0.0, tokens) - current) * w
        self.updated, self.samples = now, self.samples + 1

    def fade(self, now: float) -> float:
        """What is left of the figures now (0 before any sample)."""
        return math.exp(-max(0.0, now - self.updated) / STALE_TAU_S) if self.samples else 0.0


@dataclass(slots=True)
class ReuseTracker:
    """How much of an alias's prompts is found cached: the recent mean share some candidate was believed
    to hold (this gateway's index), and the recent mean share the backends reported reusing. A replica
    sees only its own traffic, so its index misses what other replicas warmed; the backends' reports
    do not, and the larger of the two is the expected reuse.

    Each is kept in tokens too: whether the prefixes that repeat are worth keeping in one place. A chat
    template's first tokens, which every backend holds whoever placed the prompt, are a share of a
    short prompt but only some 20 tokens (issue 24 item 5: a share times a long unique prompt's length
    read as a long shared prefix)."""

    predicted: _Means = field(default_factory=_Means)
    reported: _Means = field(default_factory=_Means)

    def observe(self, matched_share: float, now: float, tokens: float = 0.0) -> None:
        """A routing decision: the share of the prompt the best-matched candidate was believed to hold
        (and those tokens)."""
        self.predicted.add(matched_share, tokens, now)

    def observe_reported(self, cached_share: float, now: float, tokens: float = 0.0) -> None:
        """An answer: the share of its prompt the backend said it reused (and those tokens)."""
        self.reported.add(cached_share, tokens, now)

    def expected_share(self, now: float) -> float:
        return max(self.predicted.share * self.predicted.fade(now), self.reported.share * self.reported.fade(now))

    def expected_tokens(self, now: float) -> float:
        """The recent mean of the prompt tokens found cached, per request."""
        return max(self.predicted.tokens * self.predicted.fade(now), self.reported.tokens * self.reported.fade(now))
