"""How much of an alias's prompts its backends already hold: the expected worth of placing a new prefix
where every replica would place it (app/routing/latency_aware.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Per request, the weight of the newest one: about the last 20 requests count.
ALPHA = 0.05
# Unfed, the figure fades toward nothing with this time constant: a workload that stopped repeating
# prefixes an hour ago says little about the next request.
STALE_TAU_S = 300.0


@dataclass(slots=True)
class ReuseTracker:
    """The recent mean, over an alias's routed requests, of the share of the prompt some candidate was
    believed to hold cached (0 for a prompt no one held)."""

    share: float = 0.0
    updated: float = 0.0
    samples: int = 0

    def observe(self, matched_share: float, now: float) -> None:
        current = self.expected_share(now)
        w = max(ALPHA, 1.0 / (self.samples + 1))
        self.share = current + (min(1.0, max(0.0, matched_share)) - current) * w
        self.updated, self.samples = now, self.samples + 1

    def expected_share(self, now: float) -> float:
        if not self.samples:
            return 0.0
        return self.share * math.exp(-max(0.0, now - self.updated) / STALE_TAU_S)
