"""Turn sweep samples into per-cell statistics and the latency model's coefficients.

    TPOT = (E2E - TTFT) / (n - 1)                          (measured, per request)
    TTFT = a_ttft + b * processed_prompt_tokens            (least squares, with R^2)
    E2E  = a + b * prompt_tokens + c * output_tokens       (least squares, with R^2)

Fixed parts are never negative (a negative intercept is refitted through the origin), prompt tokens are
those the server processed (its prompt cache's share taken out), and the prior's TPOT is the measured
median, the same figure the report's TPOT column shows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from app.tools.baseline.sweep import CellResult


@dataclass
class CellStats:
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    error_rate: float
    ttft_p50: float
    ttft_p95: float
    ttft_p99: float
    tpot_p50: float
    e2e_p50: float
    e2e_p95: float
    e2e_p99: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    throughput_rps: float
    output_tokens_per_s: float


@dataclass
class Fit:
    a_s: float  # fixed overhead per request
    b_s_per_prompt_token: float
    c_s_per_output_token: float
    r2: float
    samples: int
    # TTFT against processed prompt tokens: the prefill rate the prior carries.
    ttft_a_s: float = float("nan")
    ttft_b_s_per_prompt_token: float = float("nan")
    ttft_r2: float = float("nan")
    tpot_s: float = float("nan")  # median measured TPOT at concurrency 1
    median_error: float = float("nan")  # median |E2E fit - E2E| / E2E over the fitted requests

    @property
    def quality(self) -> str:
        """A word for how far the fit can be trusted."""
        if self.samples < 6 or math.isnan(self.r2):
            return "too few samples"
        if self.r2 >= 0.95 and self.median_error <= 0.10:
            return "good"
        return "fair" if self.r2 >= 0.8 and self.median_error <= 0.25 else "poor"


@dataclass
class Report:
    target: str
    model: str
    cells: list[CellStats]
    fit: Fit
    flattens_at: int | None  # the concurrency past which throughput grows by less than 10 %

    def to_dict(self) -> dict:
        return asdict(self)

    def prior(self) -> dict:
        """Latency-model priors for the gateway (`backends.<name>.latency_prior`)."""
        single = [c for c in self.cells if c.concurrency == 1]
        ttft = float(np.median([c.ttft_p50 for c in single])) if single else self.fit.a_s
        growth = 0.0
        conc = sorted((c for c in self.cells if c.concurrency > 1), key=lambda c: c.concurrency)
        base = next((c.tpot_p50 for c in single if c.output_tokens == (conc[0].output_tokens if conc else 0)), None)
        if conc and base:
            top = conc[-1]
            growth = max(0.0, (top.tpot_p50 / base - 1) / max(1, top.concurrency - 1))
        f = self.fit
        prefill = f.ttft_b_s_per_prompt_token if f.ttft_b_s_per_prompt_token == f.ttft_b_s_per_prompt_token else f.b_s_per_prompt_token
        # The measured TPOT (the report's own column), not the E2E fit's slope, which absorbs the rest.
        tpot = f.tpot_s if f.tpot_s == f.tpot_s else f.c_s_per_output_token
        return {
            "net_s": max(0.0, min(ttft, f.a_s)),
            "prefill_tokens_per_s": 1.0 / prefill if prefill > 0 else 1e6,
            "tpot_s": max(1e-4, tpot),
            "tpot_growth": growth,
            "fit_quality": f.quality,
        }


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def cell_stats(r: CellResult) -> CellStats:
    ok = [s for s in r.samples if s.ok]
    ttft = [s.ttft_s for s in ok]
    e2e = [s.e2e_s for s in ok]
    tpot = [(s.e2e_s - s.ttft_s) / (s.output_tokens - 1) for s in ok if s.output_tokens > 1]
    prompt = float(np.mean([s.prompt_tokens for s in ok])) if ok else 0.0
    outputs = sum(s.output_tokens for s in ok)
    return CellStats(
        r.cell.prompt_tokens, r.cell.output_tokens, r.cell.concurrency, len(r.samples),
        1 - len(ok) / len(r.samples) if r.samples else 0.0,
        _pct(ttft, 50), _pct(ttft, 95), _pct(ttft, 99), _pct(tpot, 50),
        _pct(e2e, 50), _pct(e2e, 95), _pct(e2e, 99),
        prompt / _pct(ttft, 50) if ttft else float("nan"),
        1 / _pct(tpot, 50) if tpot else float("nan"),
        len(ok) / r.seconds if r.seconds else 0.0,
        outputs / r.seconds if r.seconds else 0.0,
    )


def _lstsq(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares with a non-negative intercept (column 0): refitted through the origin if needed."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    if coef[0] < 0:
        rest, *_ = np.linalg.lstsq(x[:, 1:], y, rcond=None)
        coef = np.concatenate([[0.0], rest])
    residual = y - x @ coef
    total = float(((y - y.mean()) ** 2).sum())
    return coef, (1 - float((residual**2).sum()) / total if total > 0 else 1.0)


def fit_linear(results: list[CellResult]) -> Fit:
    """E2E = a + b p + c n and TTFT = a' + b' p over every successful request at concurrency 1 (p: the
    prompt tokens the server processed), and the median measured TPOT."""
    ok = [s for r in results if r.cell.concurrency == 1 for s in r.samples if s.ok]
    if len(ok) < 3:
        return Fit(float("nan"), float("nan"), float("nan"), float("nan"), len(ok))
    data = np.array([(s.processed_tokens, s.output_tokens, s.e2e_s, s.ttft_s) for s in ok], dtype=float)
    ones = np.ones(len(data))
    coef, r2 = _lstsq(np.column_stack([ones, data[:, 0], data[:, 1]]), data[:, 2])
    fitted = np.column_stack([ones, data[:, 0], data[:, 1]]) @ coef
    error = float(np.median(np.abs(fitted - data[:, 2]) / np.maximum(data[:, 2], 1e-9)))
    tcoef, tr2 = _lstsq(np.column_stack([ones, data[:, 0]]), data[:, 3])
    tpots = [(s.e2e_s - s.ttft_s) / (s.output_tokens - 1) for s in ok if s.output_tokens > 1]
    tpot = float(np.median(tpots)) if tpots else float("nan")
    return Fit(float(coef[0]), float(coef[1]), float(coef[2]), r2, len(ok), float(tcoef[0]), float(tcoef[1]), tr2,
               tpot, error)


def flattening(cells: list[CellStats]) -> int | None:
    conc = sorted((c for c in cells if c.concurrency >= 1 and c.output_tokens == max(cells, key=lambda x: x.concurrency).output_tokens
                   and c.prompt_tokens == max(cells, key=lambda x: x.concurrency).prompt_tokens), key=lambda c: c.concurrency)
    for prev, cur in itertools.pairwise(conc):
        if prev.throughput_rps > 0 and cur.throughput_rps < prev.throughput_rps * 1.10:
            return prev.concurrency
    return None


def analyse(target: str, model: str, results: list[CellResult]) -> Report:
    cells = [cell_stats(r) for r in results]
    return Report(target, model, cells, fit_linear(results), flattening(cells))
