"""Split one upstream attempt into network, queue, prefill and decode, each with its source.

Measured instants (gateway clock): request sent, response headers, first event, last byte. Backend
reports fill in what the gateway cannot see; the latency model estimates the rest. Stages are laid
end to end so that they cover the attempt exactly: their durations add up to the measured total.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.routing.latency_model import LatencyModel
from app.telemetry.timing import BackendReport

MEASURED, REPORTED, ESTIMATED = "measured", "reported", "estimated"


@dataclass(frozen=True, slots=True)
class Stage:
    name: str  # network | queue | prefill | decode
    start: float
    end: float
    source: str

    @property
    def duration(self) -> float:
        return self.end - self.start


def stream_stages(start: float, headers: float, first: float, end: float, report: BackendReport,
                  prompt_tokens: int, model: LatencyModel) -> list[Stage]:
    """A stream: headers come at once (network), queue and prefill until the first event, then decode."""
    stages = [Stage("network", start, headers, MEASURED)]
    stages += _queue_prefill(headers, first, report, prompt_tokens, model)
    stages.append(Stage("decode", first, end, MEASURED))
    return stages


def json_stages(start: float, end: float, report: BackendReport, prompt_tokens: int, output_tokens: int,
                model: LatencyModel, load: float) -> list[Stage]:
    """A whole answer: the gateway measures only the total; the backend's report or estimates split it."""
    total = end - start
    q, p, d = report.queue_s, report.prefill_s, report.decode_s
    all_reported = q is not None and p is not None and d is not None
    if p is None:
        p_src, p = ESTIMATED, model.prefill_s(prompt_tokens)
    else:
        p_src = REPORTED
    if d is None:
        d_src, d = ESTIMATED, max(0, output_tokens - 1) * model.tpot(load)
    else:
        d_src = REPORTED
    if q is None:
        q_src, net = ESTIMATED, model.net.get(time.monotonic())
        q = max(0.0, total - net - p - d)
    else:
        q_src = REPORTED
        net = total - q - p - d
    # Network is the measured total less what the backend reported spending; estimated otherwise.
    net_src = MEASURED if all_reported else ESTIMATED
    net, q, p, d = _fit(total, [net, q, p, d])
    return _lay(start, [("network", net, net_src), ("queue", q, q_src), ("prefill", p, p_src), ("decode", d, d_src)])


def _queue_prefill(t0: float, t1: float, report: BackendReport, prompt_tokens: int, model: LatencyModel) -> list[Stage]:
    window = max(0.0, t1 - t0)
    q, p = report.queue_s, report.prefill_s
    if q is not None and p is not None:
        q, p = _fit(window, [q, p])
        return _lay(t0, [("queue", q, REPORTED), ("prefill", p, REPORTED)])
    if p is not None:
        p = min(p, window)
        return _lay(t0, [("queue", window - p, ESTIMATED), ("prefill", p, REPORTED)])
    if q is not None:
        q = min(q, window)
        return _lay(t0, [("queue", q, REPORTED), ("prefill", window - q, ESTIMATED)])
    p = min(window, model.prefill_s(prompt_tokens))
    return _lay(t0, [("queue", window - p, ESTIMATED), ("prefill", p, ESTIMATED)])


def _fit(total: float, parts: list[float]) -> list[float]:
    """Parts made non-negative and scaled to sum to `total` (clocks and rounding never agree exactly)."""
    parts = [max(0.0, x) for x in parts]
    s = sum(parts)
    if s <= 0:
        return [total] + [0.0] * (len(parts) - 1)
    return [x * total / s for x in parts]


def _lay(start: float, parts: list[tuple[str, float, str]]) -> list[Stage]:
    out, t = [], start
    for name, dur, src in parts:
        out.append(Stage(name, t, t + dur, src))
        t += dur
    return out

