"""The record stage: one finished request becomes metrics, latency-model updates and spans."""

from __future__ import annotations

import logging

from app.config import TelemetryConfig
from app.record import AttemptRecord, Outcome, RequestRecord
from app.routing.latency_model import LatencyModel
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

    def learn(self, record: RequestRecord) -> None:
        """Feed the final attempt's measured and reported figures to its backend's latency model."""
        if not record.attempt_log or record.outcome is not Outcome.OK:
            return
        a = record.attempt_log[-1]
        model = self.models.get(a.backend)
        if model is None or a.error_type or not a.end:
            return
        r = a.report
        prompt = record.usage.prompt_tokens if record.usage else record.prompt_tokens_hint
        output = record.usage.completion_tokens if record.usage else 0
        ahead = max(0, a.load - 1)
        model.observe_latency(a.end - a.start)
        if r.queue_s is not None:
            model.observe_queue(r.queue_s, ahead)
        if r.prefill_s is not None:
            model.observe_prefill(prompt, r.prefill_s)
        if a.stream and a.first_event:
            model.observe_network(max(0.0, (a.headers or a.start) - a.start))
            model.observe_decode(output, a.end - a.first_event, a.load)
            if r.queue_s is None:
                wait = a.first_event - (a.headers or a.start)
                if r.prefill_s is None and ahead == 0:
                    # Nothing else was in flight here: the wait before the first token was prefill.
                    model.observe_prefill(prompt, wait)
                else:
                    # Queue is what the measured wait leaves after (reported or estimated) prefill.
                    prefill = r.prefill_s if r.prefill_s is not None else model.prefill_s(prompt)
                    model.observe_queue(max(0.0, wait - prefill), ahead)
        elif r.decode_s is not None:
            model.observe_decode(r.output_tokens or output, r.decode_s, a.load)
        elif output > 1:
            # A whole answer with no report: what the total leaves after the modelled wait is decode.
            wait = model.ttft(prompt, ahead=ahead)
            model.observe_decode(output, max(0.0, (a.end - a.start) - wait), a.load)

    def shutdown(self) -> None:
        self.tracing.shutdown()
