"""Split one upstream attempt into network, queue, prefill and decode, each with its source.

Measured instants (gateway clock): request sent, response headers, first event, last byte. Backend
reports fill in what the gateway cannot see; the latency model estimates the rest. A reported figure is
shown as reported, never rescaled to fit: time the reports and measurements leave unexplained is its
own `unattributed` stage, and estimates (never reports) are cut to fit the measured total.

What the time to headers means is the server kind's (its adapter's `headers_at_slot`): on llama.cpp
a stream's headers leave when a slot takes the request, so the wait before them is network plus queue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.record import ESTIMATED, MEASURED, REPORTED
from app.routing.latency_model import LatencyModel
from app.upstream.adapters import BackendReport

UNATTRIBUTED = "unattributed"
# Leftovers below this are clock rounding, not a stage worth showing.
_EPS_S = 0.0005


@dataclass(frozen=True, slots=True)
class Stage:
    name: str  # network | queue | prefill | decode | queue_prefill | unattributed
    start: float
    end: float
    source: str

    @property
    def duration(self) -> float:
        return self.end - self.start


def _to_headers(start: float, headers: float, headers_at_slot: bool, model: LatencyModel) -> list[Stage]:
    """The wait before the response headers: all network, or (headers at slot) network then queue."""
    if not headers_at_slot:
        return [Stage("network", start, headers, MEASURED)]
    # The network is the backend's measured round trip that never waits for a slot (llama.cpp /health),
    # so here it is an estimate; the rest of the measured wait is the server's queue.
    net = min(max(0.0, headers - start), model.net.get(time.monotonic()))
    return [Stage("network", start, start + net, ESTIMATED), Stage("queue", start + net, headers, MEASURED)]


def first_byte_stages(start: float, headers: float, first: float, headers_at_slot: bool,
                      model: LatencyModel) -> list[Stage]:
    """What is known when a stream's first event is relayed: the split before it, not yet the reports."""
    stages = _to_headers(start, headers, headers_at_slot, model)
    if headers_at_slot:
        return stages + [Stage("prefill", headers, first, MEASURED)]
    return stages + [Stage("queue_prefill", headers, first, MEASURED)]


def stream_stages(start: float, headers: float, first: float, end: float, report: BackendReport,
                  prompt_tokens: int, model: LatencyModel, headers_at_slot: bool = False) -> list[Stage]:
    """A stream: the wait for headers, queue and prefill until the first event, then decode (measured)."""
    if headers_at_slot:
        p = report.prefill_s
        if p is None:
            stages = _to_headers(start, headers, True, model) + [Stage("prefill", headers, first, MEASURED)]
        else:
            # The report is kept whole. When the gateway saw the headers late (both arrived in one read),
            # the queue ends where the reported prefill must have begun; the window also holds what the
            # report does not cover (tokenising, sending the first event).
            stages = _to_headers(start, headers, True, model)
            net_end = stages[0].end
            q_end = max(net_end, min(headers, first - p))
            stages = [stages[0], Stage("queue", net_end, q_end, MEASURED)]
            stages += _lay(q_end, [("prefill", p, REPORTED), (UNATTRIBUTED, max(0.0, first - q_end - p), MEASURED)])
    else:
        stages = _to_headers(start, headers, False, model)
        stages += _queue_prefill(headers, first, report, prompt_tokens, model)
    stages.append(Stage("decode", first, end, MEASURED))
    return [s for s in stages if s.name != UNATTRIBUTED or s.duration > _EPS_S]


def json_stages(start: float, end: float, report: BackendReport, prompt_tokens: int, output_tokens: int,
                model: LatencyModel, load: float) -> list[Stage]:
    """A whole answer: the gateway measures only the total; the backend's report or estimates split it."""
    total = max(0.0, end - start)
    r = report
    reported = sum(x for x in (r.queue_s, r.prefill_s, r.decode_s) if x is not None)
    if r.server_s is not None:
        # The server's own total: what the gateway measured beyond it is network.
        net, net_src = max(0.0, total - r.server_s), MEASURED
    elif r.queue_s is not None and r.prefill_s is not None and r.decode_s is not None:
        net, net_src = max(0.0, total - reported), MEASURED
    else:
        net, net_src = min(model.net.get(time.monotonic()), max(0.0, total - reported)), ESTIMATED
    room = max(0.0, total - net - reported)
    p, p_src = r.prefill_s, REPORTED
    if p is None:
        p, p_src = min(model.prefill_s(prompt_tokens), room), ESTIMATED
        room -= p
    d, d_src = r.decode_s, REPORTED
    if d is None:
        d, d_src = min(max(0, output_tokens - 1) * model.tpot(load), room), ESTIMATED
        room -= d
    q, q_src = r.queue_s, REPORTED
    if q is None:
        q, q_src = room, ESTIMATED
        room = 0.0
    parts = [("network", net, net_src), ("queue", q, q_src), ("prefill", p, p_src), ("decode", d, d_src)]
    if room > _EPS_S:
        parts.append((UNATTRIBUTED, room, MEASURED))
    return _lay(start, parts)


def _queue_prefill(t0: float, t1: float, report: BackendReport, prompt_tokens: int, model: LatencyModel) -> list[Stage]:
    """Headers left at once: the wait for the first event is queue then prefill."""
    window = max(0.0, t1 - t0)
    q, p = report.queue_s, report.prefill_s
    if q is not None and p is not None:
        return _lay(t0, [("queue", q, REPORTED), ("prefill", p, REPORTED),
                         (UNATTRIBUTED, max(0.0, window - q - p), MEASURED)])
    if p is not None:
        return _lay(t0, [("queue", max(0.0, window - p), ESTIMATED), ("prefill", p, REPORTED)])
    if q is not None:
        return _lay(t0, [("queue", q, REPORTED), ("prefill", max(0.0, window - q), ESTIMATED)])
    p = min(window, model.prefill_s(prompt_tokens))
    return _lay(t0, [("queue", window - p, ESTIMATED), ("prefill", p, ESTIMATED)])


def _lay(start: float, parts: list[tuple[str, float, str]]) -> list[Stage]:
    out, t = [], start
    for name, dur, src in parts:
        out.append(Stage(name, t, t + dur, src))
        t += dur
    return out
