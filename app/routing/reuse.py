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

    def add(self, share: float, now: float) -> None:
        current = self.get(now)
        w = max(ALPHA, 1.0 / (self.samples + 1))
        self.share = current + (min(1.0, max(0.0, share)) - current) * w
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

    def observe(self, matched_share: float, now: float) -> None:
        """A routing decision: the share of the prompt the best-matched candidate was believed to hold."""
        self.predicted.add(matched_share, now)

    def observe_reported(self, cached_share: float, now: float) -> None:
        """An answer: the share of its prompt the backend said it reused."""
        self.reported.add(cached_share, now)

    def expected_share(self, now: float) -> float:
        return max(self.predicted.get(now), self.reported.get(now))
