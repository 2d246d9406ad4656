"""The record stage: one finished request becomes metrics, spans and logs. What routing learns from it is
not telemetry's business: each attempt's owner feeds the learner when it ends (app.dispatch.attempt)."""

from __future__ import annotations

import logging
from typing import Any

from app.config import TelemetryConfig
from app.protocols import OPERATIONS
from app.record import AttemptRecord, RequestRecord
from app.routing.latency_model import LatencyModel
from app.telemetry.metrics import Metrics
from app.telemetry.recent import RecentRequests
from app.telemetry.tracing import Tracing

log = logging.getLogger("slipstream.request")


class Telemetry:
    def __init__(self, config: TelemetryConfig, models: dict[str, LatencyModel], exporter=None,
                 metrics: Metrics | None = None) -> None:
        self.config = config
        self.tracing = Tracing(config.tracing, exporter)
        # The process's metrics, when given (they outlive a config reload); otherwise this gateway's own.
        self.metrics = (metrics or Metrics()) if config.metrics else None
        self.models = models
        # The console's ring of recent requests (a reload hands the old one on: app.reload).
        self.recent = RecentRequests(config.recent_requests)

    def start_request(self, record: RequestRecord, path: str, traceparent: str | None) -> Any:
        """The request's live SERVER span, when tracing (else None)."""
        return self.tracing.start_request(record, "POST", path, traceparent)

    def start_attempt(self, parent: Any, endpoint: str, attempt: AttemptRecord) -> tuple[Any, dict[str, str] | None]:
        """The attempt's live CLIENT span under `parent`, and the extra headers for the upstream call
        (the span's traceparent), when tracing."""
        span, traceparent = self.tracing.start_attempt(parent, endpoint, attempt)
        return span, ({"traceparent": traceparent} if traceparent else None)

    def finish(self, record: RequestRecord) -> None:
        """Called once per request, after its response is complete (or failed)."""
        if self.metrics is not None:
            self.metrics.observe(record, OPERATIONS.get(record.endpoint, record.endpoint))
        if self.tracing.enabled:
            self.tracing.finish(record, self.models, record.params)
        self.recent.add(record)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request %s tenant=%s alias=%s backend=%s stream=%s status=%s outcome=%s attempts=%d fallback=%s cache=%s ms=%.1f",
                record.request_id, record.tenant, record.alias, record.backend, record.stream, record.status,
                record.outcome.value, record.attempts, record.fallback, record.cache, record.duration_s * 1000,
            )

    def shutdown(self) -> None:
        self.tracing.shutdown()
