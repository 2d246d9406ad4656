"""What each console page shows, as bounded JSON built from state the gateway already keeps: the
router's backend states and latency models, the ring of recent requests, the cache's and the
limiter's counters. Nothing here runs per request; it runs when a page asks (and app.http.console.routes
caches each answer for a second, so ten open tabs cost what one does).

Every timing says where it came from: `measured` (gateway clock), `reported` (the backend said so),
`estimated` (the latency model).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from app.record import Outcome, RequestRecord
from app.routing.health import BreakerState
from app.telemetry import recent as R
from app.telemetry.recent import Entry, revive
from app.telemetry.stages import Stage
from app.telemetry.tracing import attempt_stages

if TYPE_CHECKING:
    from app.gateway import Gateway

# Bounds on what one answer carries, whatever the traffic.
ROWS = 100
POINTS = 120
WINDOW_S = 300.0
# The fleet's figures come from at most this many of the newest requests in the window: a view
# built on the event loop must stay well under a millisecond or two whatever the traffic.
SAMPLE = 300


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def wall_clock(record_instant: float, now_perf: float, now_wall: float) -> float:
    """A perf_counter instant as Unix time."""
    return now_wall - (now_perf - record_instant)


def gateway_added_s(record: RequestRecord) -> float | None:
    """Total minus upstream (all attempts, the waits between them and before each for a free slot or a
    sibling's prefix) minus the cache: the gateway's own time, measured. None when no upstream call
    finished (a cache hit has its own figure)."""
    log = record.attempt_log
    if not record.finished or not log or not all(a.end for a in log):
        return None
    cache = record.cache_end - record.cache_start if record.cache_end else 0.0
    return max(0.0, record.duration_s - cache - (max(a.end for a in log) - min(a.routed for a in log)))


def _measured(e: Entry) -> tuple[float | None, float | None]:
    """The final attempt's measured TTFT (streams) and E2E, from the attempt's start (what was predicted)."""
    if e[R.OUTCOME] != _OK or e[R.LAST_BACKEND] is None or e[R.LAST_ERROR] or not e[R.LAST_END]:
        return None, None
    ttft = e[R.LAST_FIRST] - e[R.LAST_START] if e[R.LAST_STREAM] and e[R.LAST_FIRST] else None
    return ttft, e[R.LAST_END] - e[R.LAST_START]


_OK = Outcome.OK.value


def _entry_added_s(e: Entry) -> float | None:
    """gateway_added_s of an entry."""
    if not e[R.FINISHED] or e[R.LAST_BACKEND] is None or not e[R.LAST_END]:
        return None
    cache = e[R.CACHE_END] - e[R.CACHE_START] if e[R.CACHE_END] else 0.0
    return max(0.0, e[R.FINISHED] - e[R.RECEIVED] - cache - (e[R.LAST_END] - e[R.FIRST_ROUTED]))


def _recent(gw: Gateway, now: float) -> list[Entry]:
    """The newest SAMPLE finished requests of the window, oldest first."""
    out = [e for e in gw.telemetry.recent.newest(SAMPLE) if e[R.FINISHED] and now - e[R.FINISHED] <= WINDOW_S]
    out.reverse()
    return out


def _state_of(s, now: float) -> tuple[str, float]:
    """healthy | ejected (breaker open: cooldown left) | probing (half-open) | rate_limited (429 cooling)."""
    if s.breaker.state is BreakerState.OPEN:
        return "ejected", s.breaker.seconds_until_available(now)
    if s.breaker.state is BreakerState.HALF_OPEN:
        return "probing", 0.0
    if s.limited_until > now:
        return "rate_limited", s.limited_until - now
    return "healthy", 0.0


async def fleet(gw: Gateway) -> dict:
    """Built in steps, one backend at a time, handing the event loop back between them: requests in
    flight wait for one backend's figures at most, never the whole view's."""
    now_m, now_p, now_w = time.monotonic(), time.perf_counter(), time.time()
    records = _recent(gw, now_p)
    per_backend: dict[str, list[Entry]] = defaultdict(list)
    for e in records:
        if e[R.LAST_BACKEND] is not None:
            per_backend[e[R.LAST_BACKEND]].append(e)
    routed = sum(len(v) for v in per_backend.values())
    queued = gw.router.queue.by_tenant() if hasattr(gw.router.queue, "by_tenant") else {}
    out = []
    for name, s in list(gw.router.states.items()):
        await asyncio.sleep(0)
        state, cooldown = _state_of(s, now_m)
        snap = s.model.snapshot(now_m)
        mine = per_backend.get(name, [])
        points, ttft_err, e2e_err = [], [], []
        for e in mine:
            p_ttft, p_e2e = e[R.PRED_TTFT], e[R.PRED_E2E]  # estimated
            ttft, e2e = _measured(e)
            if e2e is None or p_e2e is None:
                continue
            e2e_err.append(abs(p_e2e - e2e) / e2e if e2e > 0 else 0.0)
            if ttft is not None and ttft > 0:
                ttft_err.append(abs(p_ttft - ttft) / ttft)
            points.append([round(wall_clock(e[R.LAST_START], now_p, now_w), 3), _ms(p_ttft) if ttft is not None else None,
                           _ms(ttft), _ms(p_e2e), _ms(e2e)])
        load = gw.backend_load.get(name)
        slots = s.model.slots
        out.append({
            "name": name, "model": s.backend.config.model, "flavor": s.backend.config.flavor,
            "state": state, "cooldown_s": round(cooldown, 2), "breaker": s.breaker.state.value, "trips": s.breaker.trips,
            "inflight": s.inflight, "max_concurrency": s.capacity,
            "slots": slots, "slots_source": s.model.slots_source,
            "backend_waiting": None if s.scraped_waiting is None else s.scraped_waiting,
            "backend_running": None if load is None else load.running,
            "learned": {
                "net_ms": _ms(snap["net_s"]), "residual_queue_ms": _ms(snap["residual_queue_s"]),
                "prefill_tokens_per_s": None if snap["prefill_tokens_per_s"] is None else round(snap["prefill_tokens_per_s"]),
                "prefill_overhead_ms": _ms(snap["prefill_overhead_s"]), "tpot_ms": _ms(snap["tpot_s"]),
                # Slowdown under batch: TPOT at a full batch over TPOT alone.
                "batch_slowdown": round(s.model.tpot(slots or s.capacity, now_m) / s.model.tpot(1, now_m), 3)
                if s.model.tpot(1, now_m) > 0 else None, "batch_of": slots or s.capacity,
                "tpot_growth": snap["tpot_growth"], "output_tokens": round(snap["output_tokens"], 1),
                "failure_rate": round(snap["failure_rate"], 4), "samples": snap["samples"], "source": "estimated",
            },
            # Whatever else the latency model publishes (figures other work adds show up here as they land).
            "model_extra": {k: v for k, v in snap.items() if k not in _SHOWN},
            "prefix": {"accuracy": round(s.prefixes.accuracy, 4), "verified_requests": s.prefixes.verified},
            "requests": len(mine), "share": round(len(mine) / routed, 4) if routed else 0.0,
            "median_error": {"ttft": _round(statistics.median(ttft_err)) if ttft_err else None,
                             "e2e": _round(statistics.median(e2e_err)) if e2e_err else None, "n": len(e2e_err)},
            "series": _thin(points),
        })
    return {"now": round(now_w, 3), "window_s": WINDOW_S, "queued": gw.router.queued, "queued_by_tenant": queued,
            "backends": out, "overhead": overhead(records, now_p, now_w), "capture_content": gw.telemetry.tracing.capture_content}


_SHOWN = {"net_s", "residual_queue_s", "slots", "slots_source", "slots_at_least", "prefill_tokens_per_s", "prefill_overhead_s",
          "tpot_s", "tpot_growth", "output_tokens", "failure_rate", "observed_latency_s", "samples"}


def _round(v: float) -> float:
    return round(v, 4)


def _thin(points: list[list]) -> list[list]:
    """At most POINTS points: the newest, evenly spaced."""
    if len(points) <= POINTS:
        return points
    step = len(points) / POINTS
    return [points[int(i * step)] for i in range(POINTS - 1)] + [points[-1]]


def overhead(records: list[Entry], now_p: float, now_w: float, buckets: int = 30) -> dict:
    """Gateway added time (total minus upstream minus cache) at p50 and p99: now (the last minute) and
    over the window in buckets, for the chart."""
    pairs = [(e[R.FINISHED], g) for e in records if (g := _entry_added_s(e)) is not None]
    last_min = [g for t, g in pairs if now_p - t <= 60]
    series = []
    if pairs:
        lo = min(t for t, _ in pairs)
        width = max((now_p - lo) / buckets, 1.0)
        grouped: dict[int, list[float]] = defaultdict(list)
        for t, g in pairs:
            grouped[min(int((t - lo) / width), buckets - 1)].append(g)
        for i in sorted(grouped):
            v = grouped[i]
            series.append([round(wall_clock(lo + (i + 1) * width, now_p, now_w), 3), _ms(_q(v, 50)), _ms(_q(v, 99)), len(v)])
    return {"p50_ms": _ms(_q(last_min, 50)), "p99_ms": _ms(_q(last_min, 99)), "n": len(last_min),
            "source": "measured", "series": series}


def _record_measured(r: RequestRecord) -> tuple[float | None, float | None]:
    a = r.answered_by
    if a is None or r.outcome is not Outcome.OK or a.error_type or not a.end:
        return None, None
    return (a.first_event - a.start if a.stream and a.first_event else None), a.end - a.start


def _last_tried(r: RequestRecord) -> str:
    """The backend of the attempt that ended last (a request no attempt answered)."""
    return max(r.attempt_log, key=lambda a: a.end or a.start).backend if r.attempt_log else ""


def request_row(r: RequestRecord, now_p: float, now_w: float) -> dict:
    a = r.answered_by
    ttft, e2e = _record_measured(r)
    retry_reasons = [x.error_type for x in r.attempt_log if x.error_type]
    return {
        "id": r.request_id, "at": round(wall_clock(r.received, now_p, now_w), 3), "endpoint": r.endpoint,
        "alias": r.alias, "tenant": r.tenant, "backend": r.backend or _last_tried(r),
        "status": r.status, "outcome": r.outcome.value, "error": r.error_type, "cache": r.cache, "stream": r.stream,
        "attempts": r.attempts, "retries": r.retries, "fallback": r.fallback, "errors": retry_reasons,
        "target": r.target_result, "total_ms": _ms(r.duration_s), "ttft_ms": _ms(ttft), "e2e_ms": _ms(e2e),
        "predicted_ttft_ms": _ms(a.predicted.ttft_s) if a is not None and a.predicted else None,
        "predicted_e2e_ms": _ms(a.predicted.e2e_s) if a is not None and a.predicted else None,
        "gateway_ms": _ms(gateway_added_s(r)),
    }


# Rows built between hand-backs of the event loop: 100 rows at once held the loop for 1.4 ms
# (bench/overhead.py's console poller, median, here); in steps of 25, each holds it a quarter of that.
_ROWS_PER_STEP = 25


async def requests(gw: Gateway, limit: int = ROWS) -> dict:
    """Built in steps, as the fleet view is: requests in flight wait for a quarter of it at most."""
    now_p, now_w = time.perf_counter(), time.time()
    ring = gw.telemetry.recent
    rows = []
    for n, e in enumerate(ring.newest(min(limit, ROWS))):  # a snapshot: the ring may move meanwhile
        if n and n % _ROWS_PER_STEP == 0:
            await asyncio.sleep(0)
        rows.append(request_row(revive(e), now_p, now_w))
    return {"now": round(now_w, 3), "ring_size": ring.size, "held": len(ring), "seen": ring.seq, "rows": rows,
            "capture_content": gw.telemetry.tracing.capture_content}


def request_detail(gw: Gateway, request_id: str) -> dict | None:
    entry = next((e for e in gw.telemetry.recent.newest(gw.telemetry.recent.size) if e[R.ID] == request_id), None)
    if entry is None:
        return None
    r = revive(entry)
    now_p, now_w = time.perf_counter(), time.time()
    t0 = r.received

    def off(t: float) -> float:
        return round((t - t0) * 1000, 3)

    stages: list[dict] = []
    if r.cache_end:
        stages.append({"name": "cache", "start_ms": off(r.cache_start), "end_ms": off(r.cache_end), "source": "measured"})
    attempts = []
    for a in r.attempt_log:
        # Measured waits before it was sent, each its own bar: not the gateway's own time.
        for name, waited in (("slot_wait", a.slot_wait_s), ("prefix_wait", a.burst_wait_s)):
            if waited > 0:
                end = a.start - (a.burst_wait_s if name == "slot_wait" else 0.0)
                stages.append({"name": name, "start_ms": off(end - waited), "end_ms": off(end), "source": "measured"})
        attempts.append({
            "number": a.number, "alias": a.alias, "backend": a.backend, "status": a.status, "error": a.error_type,
            "load": a.load, "start_ms": off(a.start), "end_ms": off(a.end) if a.end else None,
            "predicted": None if a.predicted is None else {
                "queue_ms": _ms(a.predicted.queue_s), "ttft_ms": _ms(a.predicted.ttft_s), "e2e_ms": _ms(a.predicted.e2e_s),
                "decode_tokens": round(a.predicted.decode_tokens, 1), "source": "estimated"},
            "prefix": None if a.prefix is None else {"matched_blocks": a.prefix.blocks,
                                                     "matched_tokens_estimated": round(a.prefix.matched_tokens, 1)},
            "reported_cached_tokens": a.cached_reported,
        })
        if a is not r.answered_by and a.end:
            stages.append({"name": f"attempt {a.number} ({a.backend}, {a.error_type or a.status})",
                           "start_ms": off(a.start), "end_ms": off(a.end), "source": "measured"})
    final = r.answered_by
    model = gw.models.get(final.backend) if final is not None else None
    if final is not None and model is not None and final.end and not final.error_type:
        parts: list[Stage] = attempt_stages(r, final, model)
        stages += [{"name": s.name, "start_ms": off(s.start), "end_ms": off(s.end), "source": s.source} for s in parts]
    added = gateway_added_s(r)
    if added is None and r.finished and r.cache_end and not r.attempt_log:  # a cache hit: all but the lookup is the gateway's
        added = max(0.0, r.duration_s - (r.cache_end - r.cache_start))
    out = {
        "request": request_row(r, now_p, now_w), "trace_id": entry[R.TRACE_ID], "stages": stages,
        "gateway_ms": _ms(added), "total_ms": _ms(r.duration_s), "attempts": attempts,
        "answered": None if final is None else final.number,  # a hedge's winner need not be the last attempt
        "routes": [{"alias": d.alias, "strategy": d.strategy, "chosen": d.chosen, "reason": d.reason,
                    "candidates": {k: round(v, 6) if isinstance(v, float) else v for k, v in d.candidates.items()}}
                   for d in r.routes],
        "events": [{"at_ms": off(e.at), "name": e.name, "attributes": e.attributes} for e in r.events[:20]],
        "usage": None if r.usage is None else {"prompt_tokens": r.usage.prompt_tokens,
                                               "completion_tokens": r.usage.completion_tokens, "source": "reported"},
        "prompt_tokens_estimated": r.prompt_tokens_hint,
        "capture_content": gw.telemetry.tracing.capture_content,
    }
    if gw.telemetry.tracing.capture_content and r.body is not None:
        out["content"] = {"request": r.body, "answer": r.output_text}
    return out


def cache(gw: Gateway) -> dict:
    c = gw.cache
    st = c.stats
    looked = st.hits + st.semantic_hits + st.misses
    w = c.writer_stats
    return {
        "store": c.config.store,
        "lookups": looked, "exact_hits": st.hits, "semantic_hits": st.semantic_hits, "misses": st.misses,
        "bypassed": st.bypassed, "stale_served": st.stale_served,
        "exact_hit_rate": round(st.hits / looked, 4) if looked else None,
        "semantic_hit_rate": round(st.semantic_hits / looked, 4) if looked else None,
        "guard_rejections": st.guard_rejections, "verifier_rejections": st.judge_rejections, "verifier_failures": st.judge_failures,
        "category_rejections": st.category_rejections,
        "embed_timeouts": st.embed_timeouts, "store_errors": st.errors, "stores": st.stores,
        "writer": {"written": w.written, "lost": w.lost, "batches": w.batches, "retries": w.retries},
    }
