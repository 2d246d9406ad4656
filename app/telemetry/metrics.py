"""Prometheus metrics: GenAI-convention histograms per request, and live gauges read at scrape time.

Names follow the OpenTelemetry GenAI metric conventions (dots to underscores, unit suffix), with the
buckets the conventions advise. One process per replica: prometheus-client's per-process registry is
then exact (several uvicorn workers would each report only their share).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from app.record import Outcome, RequestRecord
from app.routing.health import BreakerState
from app.routing.prefix_index import BLOCK_CHARS

if TYPE_CHECKING:
    from app.gateway import Gateway

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5)
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))  # 0.01 .. 81.92 s
TOKEN_BUCKETS = tuple(4**i for i in range(14))  # 1 .. 67M
PREDICTION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60)
_BREAKER_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class Metrics:
    def __init__(self) -> None:
        # One per process: a config reload swaps the gateway but keeps these, so counters and
        # histograms never reset and requests that finish on the replaced gateway are counted.
        self._draining: list[Gateway] = []
        self._carried: dict[str, float] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        labels = ["gen_ai_operation_name", "gen_ai_request_model", "slipstream_backend"]
        self.duration = Histogram("gen_ai_server_request_duration", "Time from request received to response done, seconds.",
                                  labels + ["slipstream_outcome", "slipstream_cache"], buckets=DURATION_BUCKETS, registry=r, unit="seconds")
        self.ttft = Histogram("gen_ai_server_time_to_first_token", "Time to the first token of streamed responses, seconds.",
                              labels, buckets=TTFT_BUCKETS, registry=r, unit="seconds")
        self.tpot = Histogram("gen_ai_server_time_per_output_token", "Decode time per output token after the first, seconds.",
                              labels, buckets=TPOT_BUCKETS, registry=r, unit="seconds")
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens used per request, as the backend reported.",
                                labels + ["gen_ai_token_type"], buckets=TOKEN_BUCKETS, registry=r)
        self.attempts = Counter("slipstream_upstream_attempts", "Upstream attempts by backend and result.",
                                ["slipstream_backend", "result"], registry=r)
        self.retries = Counter("slipstream_retries", "Retries made.", ["gen_ai_request_model"], registry=r)
        self.fallbacks = Counter("slipstream_fallbacks", "Answers served by a fallback model.",
                                 ["gen_ai_request_model", "reason"], registry=r)
        # category: volatile | code | general | none (bypassed): three values and one, never a client's text.
        self.cache = Counter("slipstream_cache_requests", "Cache outcome per request and question category.",
                             ["gen_ai_request_model", "result", "category"], registry=r)
        # The prefix index's predictions against what backends reported reusing (bounded labels:
        # backend names from the config, four results).
        self.prefix_predicted = Counter("slipstream_prefix_predicted_cached_tokens",
                                        "Prompt tokens the prefix index predicted cached (share of the reported prompt).",
                                        ["slipstream_backend"], registry=r)
        self.prefix_reported = Counter("slipstream_prefix_reported_cached_tokens", "Prompt tokens backends reported reused from their cache.",
                                       ["slipstream_backend"], registry=r)
        self.prefix_prompt = Counter("slipstream_prefix_prompt_tokens", "Prompt tokens of requests whose cached tokens were reported.",
                                     ["slipstream_backend"], registry=r)
        self.targets = Counter("slipstream_latency_target_requests",
                               "Requests with a latency target: met (as predicted at routing), unmeetable, shed.",
                               ["gen_ai_request_model", "result"], registry=r)
        # Routing's predictions beside what was measured, per backend (both from the attempt's start):
        # figure = ttft | e2e, kind = predicted | measured (bounded: backends from the config).
        self.prediction = Histogram("slipstream_route_latency", "Predicted (at routing, an estimate) and measured TTFT and "
                                    "end-to-end time of answered attempts, seconds.",
                                    ["slipstream_backend", "figure", "kind"], buckets=PREDICTION_BUCKETS, registry=r, unit="seconds")
        self.prefix_requests = Counter("slipstream_prefix_requests",
                                       "Requests by predicted vs reported prefix hit: hit, miss, false_hit (predicted, not reused), missed_hit.",
                                       ["slipstream_backend", "result"], registry=r)

    def _labelled(self, metric, *values: str):
        """The metric's child for these label values, looked up once: prometheus_client's labels() costs
        more than the observation (label sets are bounded by the config, so this dict is too)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe(self, record: RequestRecord, operation: str) -> None:
        # Every label below comes from config (alias, backend) or a fixed set: a client or a backend
        # can never add a series (record.alias is set only for configured aliases).
        """Fold one finished request into the histograms and counters."""
        backend = record.backend or "none"
        base = (operation, record.alias or "unknown", backend)
        outcome = record.outcome.value
        self._labelled(self.duration, *base, outcome, record.cache).observe(record.duration_s)
        if record.alias:
            self._labelled(self.cache, record.alias, record.cache, record.cache_category or "none").inc()
        if record.stream and record.first_token and record.outcome is Outcome.OK:
            self._labelled(self.ttft, *base).observe(record.first_token - record.received)
        if record.usage is not None:
            self._labelled(self.tokens, *base, "input").observe(record.usage.prompt_tokens)
            self._labelled(self.tokens, *base, "output").observe(record.usage.completion_tokens)
            n = record.usage.completion_tokens
            if record.stream and record.first_token and n > 1 and record.outcome is Outcome.OK:
                self._labelled(self.tpot, *base).observe((record.finished - record.first_token) / (n - 1))
        for a in record.attempt_log:
            # A backend's own error codes are its text, not ours: they would grow labels without bound.
            result = a.error_type or "ok"
            if result not in _ATTEMPT_RESULTS:
                result = f"status_{a.status}" if 100 <= a.status <= 599 else "other"
            self._labelled(self.attempts, a.backend, result).inc()
        last = record.answered_by
        if last is not None and last.predicted is not None and record.outcome is Outcome.OK and last.end:
            p, h = last.predicted, self.prediction
            self._labelled(h, last.backend, "e2e", "predicted").observe(p.e2e_s)
            self._labelled(h, last.backend, "e2e", "measured").observe(last.end - last.start)
            if last.stream and last.first_event:
                self._labelled(h, last.backend, "ttft", "predicted").observe(p.ttft_s)
                self._labelled(h, last.backend, "ttft", "measured").observe(last.first_event - last.start)
        if last is not None and last.cached_reported is not None and last.prefix is not None and record.prefix is not None:
            total = last.report.prompt_tokens or 0
            if total and record.prefix.chars:
                share = min(1.0, last.prefix.blocks * BLOCK_CHARS / record.prefix.chars)
                self.observe_prefix(last.backend, share, last.cached_reported, total)
        if record.retries:
            self._labelled(self.retries, record.alias).inc(record.retries)
        if record.fallback:
            self._labelled(self.fallbacks, record.alias, record.fallback).inc()
        if record.target_result and record.alias:
            self._labelled(self.targets, record.alias, record.target_result).inc()

    def observe_prefix(self, backend: str, predicted_share: float, cached: int, total: int) -> None:
        """One request's predicted prefix match (a share of its prompt) against the reported reuse."""
        reported_share = cached / total if total else 0.0
        self._labelled(self.prefix_predicted, backend).inc(predicted_share * total)
        self._labelled(self.prefix_reported, backend).inc(cached)
        self._labelled(self.prefix_prompt, backend).inc(total)
        if predicted_share <= 0.05 and reported_share <= 0.05:
            result = "miss"
        elif reported_share < 0.5 * predicted_share:
            result = "false_hit"
        elif predicted_share < 0.5 * reported_share:
            result = "missed_hit"
        else:
            result = "hit"
        self._labelled(self.prefix_requests, backend, result).inc()

    def register_live(self, current: Callable[[], Gateway]) -> None:
        """Report live gauges from `current()` (the serving gateway) and the ones still draining."""
        self.registry.register(_LiveCollector(current, self._draining, self._carried))

    def draining(self, gateway: Gateway) -> None:
        """A reload replaced `gateway`: keep counting what it does until it is closed."""
        self._draining.append(gateway)

    def retired(self, gateway: Gateway) -> None:
        """A replaced gateway is closed: fold its final counts in, so no counter goes down."""
        self._draining[:] = [g for g in self._draining if g is not gateway]
        for name, value in _gateway_counters(gateway).items():
            self._carried[name] = self._carried.get(name, 0) + value

    def render(self) -> bytes:
        return generate_latest(self.registry)


# Counters a gateway keeps in its own state (not in the registry): name, help, how to read one.
_STATE_COUNTERS: tuple[tuple[str, str, Callable[[Gateway], float]], ...] = (
    ("slipstream_cache_errors", "Cache store failures (the cache failed open).", lambda g: g.cache.stats.errors),
    ("slipstream_cache_guard_rejections", "Semantic matches rejected by the guard.", lambda g: g.cache.stats.guard_rejections),
    ("slipstream_cache_judge_rejections", "Semantic matches the LLM judge refused (it answered no).",
     lambda g: g.cache.stats.judge_rejections),
    ("slipstream_cache_judge_failures",
     "Semantic matches refused because the LLM judge gave no verdict (it failed, timed out or answered neither).",
     lambda g: g.cache.stats.judge_failures),
    ("slipstream_cache_history_rejections", "Semantic matches whose earlier turns did not match.",
     lambda g: g.cache.stats.history_rejections),
    ("slipstream_cache_category_rejections",
     "Semantic matches refused by their categories (too old for the asked one, below the stored one's threshold).",
     lambda g: g.cache.stats.category_rejections),
    ("slipstream_cache_beyond_window", "Semantic lookups skipped (exact only): the text is longer than the embedder reads.",
     lambda g: g.cache.stats.beyond_window),
    ("slipstream_cache_embed_timeouts", "Semantic lookups that were misses because the embedding was late.",
     lambda g: g.cache.stats.embed_timeouts),
    ("slipstream_cache_writes", "Cache entries written to the store.", lambda g: g.cache.writer_stats.written),
    ("slipstream_cache_writes_lost", "Cache entries given up after retries or a full write queue.",
     lambda g: g.cache.writer_stats.lost),
    ("slipstream_retry_budget_denied", "Retries refused by the retry budget.", lambda g: g.budget.denied),
)


def _gateway_counters(gw: Gateway) -> dict[str, float]:
    return {name: read(gw) for name, _, read in _STATE_COUNTERS}


class _LiveCollector:
    """Gauges read from the gateway's state when Prometheus scrapes: nothing is kept per request."""

    def __init__(self, current: Callable[[], Gateway], draining: list[Gateway], carried: dict[str, float]) -> None:
        self.current = current
        self.draining = draining
        self.carried = carried

    def collect(self):
        gw = self.current()
        live = [gw, *(g for g in self.draining if g is not gw)]
        inflight = GaugeMetricFamily("slipstream_backend_inflight", "Requests in flight to each backend.", labels=["slipstream_backend"])
        breaker = GaugeMetricFamily("slipstream_backend_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open (ejected).",
                                    labels=["slipstream_backend"])
        running = GaugeMetricFamily("slipstream_backend_running", "Requests the backend reports running (vLLM /metrics).", labels=["slipstream_backend"])
        waiting = GaugeMetricFamily("slipstream_backend_waiting", "Requests the backend reports waiting (vLLM /metrics).", labels=["slipstream_backend"])
        kv = GaugeMetricFamily("slipstream_backend_kv_cache_usage", "KV-cache use the backend reports, 0..1 (vLLM /metrics).", labels=["slipstream_backend"])
        accuracy = GaugeMetricFamily("slipstream_prefix_index_accuracy",
                                     "Agreement (0..1) of the prefix index's predicted matches with reported cached tokens.",
                                     labels=["slipstream_backend"])
        blocks = GaugeMetricFamily("slipstream_prefix_index_blocks", "Prompt blocks the prefix index holds per backend.",
                                   labels=["slipstream_backend"])
        for name, state in gw.router.states.items():
            accuracy.add_metric([name], state.prefixes.accuracy)
            blocks.add_metric([name], len(state.prefixes))
            # Requests still finishing on a replaced gateway hold slots on the same backend.
            inflight.add_metric([name], sum(g.router.states[name].inflight for g in live if name in g.router.states))
            breaker.add_metric([name], _BREAKER_VALUE[state.breaker.state])
            load = gw.backend_load.get(name)
            if load is not None:
                for family, value in ((running, load.running), (waiting, load.waiting), (kv, load.kv_cache_usage)):
                    if value is not None:
                        family.add_metric([name], value)
        yield from (inflight, breaker, running, waiting, kv, accuracy, blocks)
        yield GaugeMetricFamily("slipstream_queued_requests", "Requests waiting for a backend slot in this gateway.",
                                value=sum(g.router.queued for g in live))
        counts = dict(self.carried)
        for g in live:
            for name, value in _gateway_counters(g).items():
                counts[name] = counts.get(name, 0) + value
        for name, help_text, _ in _STATE_COUNTERS:
            yield CounterMetricFamily(name, help_text, value=counts.get(name, 0))
        # Admission counters already carry over a reload (the new gateway adopts the old one's).
        yield from gw.admission.counters.families(gw.router.queue.by_tenant())


# Attempt results named by the gateway itself; anything else is labelled by its HTTP status.
_ATTEMPT_RESULTS = frozenset({
    "ok", "cancelled", "connect_timeout", "first_token_timeout", "stream_idle_timeout", "upstream_timeout",
    "deadline_exceeded", "upstream_unreachable", "upstream_bad_response", "upstream_misconfigured",
    "context_length_exceeded", "rate_limit_error", "upstream_error", "invalid_request_error",
})
