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
        # Queueing seen per request already in flight when a request was sent: near 0 while the
        # backend has free slots, growing once it is full. Predicts the wait at the current load.
        self.queue_per_ahead = Decaying(0.0, tau_s)
        self.tpot_growth = p.tpot_growth
        # Share of recent attempts that failed (0..1), and the plain average of observed end-to-end
        # latency that simpler strategies route on.
        self.failure_rate = Decaying(0.0, tau_s)
        self.observed_latency = 0.0

    # --- observations -------------------------------------------------------------------------
    def observe_network(self, seconds: float, now: float | None = None) -> None:
        self.net.add(max(0.0, seconds), _now(now), peak=True)

    def observe_queue(self, seconds: float, ahead: int = 0, now: float | None = None) -> None:
        """A queue wait seen with `ahead` requests already in flight at this backend."""
        t = _now(now)
        if ahead > 0:
            self.queue_per_ahead.add(max(0.0, seconds) / ahead, t, peak=True)
        else:
            self.queue.add(max(0.0, seconds), t, peak=True)

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

    def observe_outcome(self, ok: bool, now: float | None = None) -> None:
        self.failure_rate.add(0.0 if ok else 1.0, _now(now))

    def observe_latency(self, seconds: float, weight: float = 0.2) -> None:
        self.observed_latency = seconds if not self.observed_latency else self.observed_latency * (1 - weight) + seconds * weight

    # --- predictions --------------------------------------------------------------------------
    def tpot(self, load: float, now: float | None = None) -> float:
        return self.tpot_base.get(_now(now)) * (1.0 + self.tpot_growth * max(0.0, load - 1.0))

    def prefill_s(self, prompt_tokens: int, now: float | None = None) -> float:
        return prompt_tokens / max(1e-9, self.prefill_rate.get(_now(now)))

    def ttft(self, prompt_tokens: int, now: float | None = None, ahead: int = 0) -> float:
        t = _now(now)
        return self.net.get(t) + self.queue.get(t) + self.queue_per_ahead.get(t) * ahead + self.prefill_s(prompt_tokens, t)

    def snapshot(self, now: float | None = None) -> dict:
        """The live figures, for /admin/backends (seconds, tokens per second, tokens)."""
        t = _now(now)
        return {
            "net_s": self.net.get(t), "queue_s": self.queue.get(t), "queue_per_ahead_s": self.queue_per_ahead.get(t),
            "prefill_tokens_per_s": self.prefill_rate.get(t), "tpot_s": self.tpot_base.get(t),
            "tpot_growth": self.tpot_growth, "output_tokens": self.output_tokens.get(t),
            "failure_rate": self.failure_rate.get(t), "observed_latency_s": self.observed_latency,
            "samples": {"net": self.net.samples, "queue": self.queue.samples + self.queue_per_ahead.samples,
                        "prefill": self.prefill_rate.samples, "decode": self.tpot_base.samples},
        }

    def e2e(self, prompt_tokens: int, output_tokens: float, load: float, now: float | None = None, ahead: int = 0) -> float:
        t = _now(now)
        return self.ttft(prompt_tokens, t, ahead) + max(0.0, output_tokens - 1) * self.tpot(load, t)


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now


def load_prior(path: str | None) -> Prior | None:
    """The prior in a `slipstream bench` report; None without one (the built-in prior then)."""
    if not path:
        return None
    import orjson

    with open(path, "rb") as f:
        fitted = orjson.loads(f.read()).get("prior", {})
    defaults = Prior()
    return Prior(
        net_s=float(fitted.get("net_s", defaults.net_s)),
        prefill_tokens_per_s=float(fitted.get("prefill_tokens_per_s", defaults.prefill_tokens_per_s)),
        tpot_s=float(fitted.get("tpot_s", defaults.tpot_s)),
        tpot_growth=float(fitted.get("tpot_growth", defaults.tpot_growth)),
    )
