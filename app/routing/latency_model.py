"""A per-backend latency model, learned online from every request (DESIGN.md section 2).

    TTFT = net + queue + prompt_tokens / prefill_rate
    E2E  = TTFT + (output_tokens - 1) * TPOT(load)

Each figure is an exponentially weighted average whose weight decays with time (w = exp(-dt/tau)), so
a backend not heard from for a while drifts back to its prior instead of keeping a stale figure.
TPOT is kept as a line in the backend's load: TPOT(load) = tpot_base * (1 + growth * (load - 1)).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Prior:
    """What is assumed of a backend before (and long after) it is measured."""

    net_s: float = 0.002
    queue_s: float = 0.0
    prefill_tokens_per_s: float = 5000.0
    tpot_s: float = 0.03
    tpot_growth: float = 0.03
    output_tokens: float = 200.0


@dataclass
class Decaying:
    """An EWMA over time that relaxes toward `prior` with time constant `stale_tau_s` when unfed."""

    prior: float
    tau_s: float = 10.0
    stale_tau_s: float = 120.0
    value: float = field(init=False)
    updated: float = field(init=False, default=0.0)
    samples: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.value = self.prior

    def get(self, now: float) -> float:
        if not self.samples:
            return self.prior
        drift = 1.0 - math.exp(-(now - self.updated) / self.stale_tau_s)
        return self.value + (self.prior - self.value) * drift

    def add(self, sample: float, now: float, peak: bool = False) -> None:
        """Fold in a sample; with `peak`, a sample above the estimate replaces it at once (peak-EWMA)."""
        current = self.get(now)
        if peak and sample > current or not self.samples:
            self.value = sample
        else:
            w = math.exp(-(now - self.updated) / self.tau_s)
            self.value = current * w + sample * (1.0 - w) if self.updated else sample
        self.updated = now
        self.samples += 1


class LatencyModel:
    """Live estimates for one backend; every update says where its sample came from."""

    def __init__(self, prior: Prior | None = None, tau_s: float = 10.0) -> None:
        self.prior = prior or Prior()
        p = self.prior
        self.net = Decaying(p.net_s, tau_s)
        self.queue = Decaying(p.queue_s, tau_s)
        self.prefill_rate = Decaying(p.prefill_tokens_per_s, tau_s)
        self.tpot_base = Decaying(p.tpot_s, tau_s)
        self.output_tokens = Decaying(p.output_tokens, tau_s * 6)
        self.tpot_growth = p.tpot_growth

    # --- observations -------------------------------------------------------------------------
    def observe_network(self, seconds: float, now: float | None = None) -> None:
        self.net.add(max(0.0, seconds), _now(now), peak=True)

    def observe_queue(self, seconds: float, now: float | None = None) -> None:
        self.queue.add(max(0.0, seconds), _now(now), peak=True)

    def observe_prefill(self, prompt_tokens: int, seconds: float, now: float | None = None) -> None:
        if prompt_tokens > 0 and seconds > 0:
            self.prefill_rate.add(prompt_tokens / seconds, _now(now))

    def observe_decode(self, output_tokens: int, seconds: float, load: float, now: float | None = None) -> None:
        """TPOT from a decode phase seen at this load (never TTFT divided by tokens)."""
        if output_tokens > 1 and seconds > 0:
            tpot = seconds / (output_tokens - 1)
            base = tpot / (1.0 + self.tpot_growth * max(0.0, load - 1.0))
            self.tpot_base.add(base, _now(now), peak=True)
        if output_tokens > 0:
            self.output_tokens.add(float(output_tokens), _now(now))

    # --- predictions --------------------------------------------------------------------------
    def tpot(self, load: float, now: float | None = None) -> float:
        return self.tpot_base.get(_now(now)) * (1.0 + self.tpot_growth * max(0.0, load - 1.0))

    def prefill_s(self, prompt_tokens: int, now: float | None = None) -> float:
        return prompt_tokens / max(1e-9, self.prefill_rate.get(_now(now)))

    def ttft(self, prompt_tokens: int, now: float | None = None) -> float:
        t = _now(now)
        return self.net.get(t) + self.queue.get(t) + self.prefill_s(prompt_tokens, t)

    def e2e(self, prompt_tokens: int, output_tokens: float, load: float, now: float | None = None) -> float:
        t = _now(now)
        return self.ttft(prompt_tokens, t) + max(0.0, output_tokens - 1) * self.tpot(load, t)


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
