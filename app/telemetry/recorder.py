"""The record stage: one finished request becomes metrics, latency-model updates and spans."""

from __future__ import annotations

import logging

from app.config import TelemetryConfig
from app.record import AttemptRecord, Outcome, RequestRecord
from app.routing.latency_model import QUEUE_NOISE_S, LatencyModel
from app.routing.router import BackendState
from app.telemetry.metrics import Metrics
from app.telemetry.tracing import OPERATIONS, Tracing

log = logging.getLogger("slipstream.request")


class Telemetry:
    def __init__(self, config: TelemetryConfig, models: dict[str, LatencyModel], exporter=None) -> None:
        self.config = config
        self.tracing = Tracing(config.tracing, exporter)
        self.metrics = Metrics() if config.metrics else None
        self.models = models

    def start_request(self, record: RequestRecord, path: str, traceparent: str | None) -> None:
        self.tracing.start_request(record, "POST", path, traceparent)

    def start_attempt(self, record: RequestRecord, attempt: AttemptRecord) -> dict[str, str] | None:
        """Extra headers for the upstream call: the attempt span's traceparent, when tracing."""
        traceparent = self.tracing.start_attempt(record, attempt)
        return {"traceparent": traceparent} if traceparent else None

    def finish(self, record: RequestRecord) -> None:
        """Called once per request, after its response is complete (or failed)."""
        self.learn(record)
        if self.metrics is not None:
            self.metrics.observe(record, OPERATIONS.get(record.endpoint, record.endpoint))
        if self.tracing.enabled:
            self.tracing.finish(record, self.models, record.params)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request %s tenant=%s alias=%s backend=%s stream=%s status=%s outcome=%s attempts=%d fallback=%s cache=%s ms=%.1f",
                record.request_id, record.tenant, record.alias, record.backend, record.stream, record.status,
                record.outcome.value, record.attempts, record.fallback, record.cache, record.duration_s * 1000,
            )

    def learn_first_token(self, a: AttemptRecord, prompt_tokens: int) -> None:
        """A stream's first event arrived: learn its network, queue and prefill now, not when its
        decode ends (which on a slow backend is many seconds later, while the queue builds)."""
        model = self.models.get(a.backend)
        if model is None or not a.first_event:
            return
        r = a.report
        ahead = max(0, a.load - 1)
        expected_queue = a.predicted.queue_s if a.predicted else 0.0
        model.observe_network(max(0.0, (a.headers or a.start) - a.start))
        if r.queue_s is not None:
            model.observe_queue(r.queue_s, ahead, expected_queue)
        else:
            self._learn_wait(model, a.first_event - (a.headers or a.start), r.prefill_s, prompt_tokens, ahead,
                             expected_queue)

    def learn_progress(self, a: AttemptRecord, state: BackendState, events: int, now: float) -> None:
        """A stream is `events` events into its decode: a TPOT sample over the events since the last
        one, so a backend that slowed down is seen within a second or two, even mid-answer, rather
        than when its longest answers end. The batch is the backend's in-flight count now."""
        model = self.models.get(a.backend)
        last_events, last_at = a.progress if a.progress[1] else (1, a.first_event)
        a.progress = (events, now)
        if model is not None and last_at and now > last_at and events > last_events:
            model.observe_decode(events - last_events + 1, now - last_at, state.inflight, count_output=False)

    def learn(self, record: RequestRecord) -> None:
        """Feed the final attempt's measured and reported figures to its backend's latency model."""
        if not record.attempt_log or record.outcome is not Outcome.OK:
            return
        a = record.attempt_log[-1]
        model = self.models.get(a.backend)
        if model is None or a.error_type or not a.end:
            return
        r = a.report
        # Prefill is learned against the prompt size routing predicts from (estimated from the body's
        # length before any usage exists), so the fitted line and its use agree on what x means.
        prompt = record.prompt_tokens_hint
        output = record.usage.completion_tokens if record.usage else 0
        model.observe_latency(a.end - a.start)
        if a.stream and a.first_event:
            # Queue and prefill were learned at the first token (learn_first_token); a prefill the
            # backend reports only at the end (llama.cpp's timings) is taken now.
            if r.prefill_s is not None:
                model.observe_prefill(prompt, r.prefill_s)
            model.observe_decode(output, a.end - a.first_event, a.load)
            return
        ahead = max(0, a.load - 1)
        expected_queue = a.predicted.queue_s if a.predicted else 0.0
        if r.queue_s is not None:
            model.observe_queue(r.queue_s, ahead, expected_queue)
        if r.prefill_s is not None:
            model.observe_prefill(prompt, r.prefill_s)
        if r.decode_s is not None:
            model.observe_decode(r.output_tokens or output, r.decode_s, a.load)
        elif output > 1:
            # A whole answer with no report: what the total leaves after the predicted wait is decode.
            wait = a.predicted.ttft_s if a.predicted else model.ttft(prompt)
            model.observe_decode(output, max(0.0, (a.end - a.start) - wait), a.load, measured=False)

    @staticmethod
    def _learn_wait(model: LatencyModel, wait: float, reported_prefill: float | None, prompt: int, ahead: int,
                    expected_queue: float) -> None:
        """Split a stream's measured wait for its first token into queue and prefill."""
        if reported_prefill is not None:
            model.observe_queue(max(0.0, wait - reported_prefill), ahead, expected_queue)
            return
        if ahead == 0:
            # Nothing else was in flight here: the wait was prefill (and the backend's fixed costs).
            model.observe_prefill(prompt, wait)
            return
        # Queue is what the wait leaves after the modelled prefill; the model's error widens what
        # counts as no wait at all, and a wait that was not queueing teaches prefill too.
        prefill = model.prefill_s(prompt)
        tolerance = QUEUE_NOISE_S + 0.5 * prefill
        model.observe_queue(max(0.0, wait - prefill), ahead, expected_queue, tolerance)
        if wait - prefill <= tolerance:
            model.observe_prefill(prompt, wait)

    def shutdown(self) -> None:
        self.tracing.shutdown()
