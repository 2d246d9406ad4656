"""OpenTelemetry traces: a SERVER span per request, a CLIENT span per upstream attempt, and under
each attempt its network, queue, prefill and decode spans with real start and end times.

The live spans (server, attempts) exist while the request runs, so an incoming `traceparent` is
honoured and the attempt's context is forwarded to the backend (vLLM and TGI join the trace). Every
other span is written at the end from the request's record, with explicit timestamps: the hot path
records plain numbers and this module alone turns them into spans. Names and attributes follow the
OpenTelemetry GenAI semantic conventions (v1.41); ours are `slipstream.*`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.config import TracingConfig
from app.protocols import OPERATIONS
from app.record import AttemptRecord, RequestRecord
from app.routing.latency_model import LatencyModel
from app.routing.learning import processed_prompt
from app.telemetry.stages import Stage, json_stages, stream_stages
from app.upstream.adapters import adapter_for

log = logging.getLogger("slipstream.tracing")

# perf_counter instants -> epoch nanoseconds, fixed once per process.
_EPOCH_OFFSET = time.time() - time.perf_counter()
_PROVIDERS = {"vllm": "vllm", "tgi": "tgi", "llamacpp": "llama_cpp", "ollama": "ollama", "openai": "openai"}


def ns(t: float) -> int:
    return int((t + _EPOCH_OFFSET) * 1e9)


def build_exporter(config: TracingConfig) -> SpanExporter | None:
    """The exporter named by OTEL_TRACES_EXPORTER (or config): otlp over http/protobuf or grpc, console, none.

    Endpoint, headers and timeouts come from the standard OTEL_EXPORTER_OTLP_* variables.
    """
    kind = os.environ.get("OTEL_TRACES_EXPORTER", config.exporter).split(",")[0].strip()
    if kind == "none":
        return None
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", config.protocol))
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        return Grpc()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    return Http()


class Tracing:
    """Span creation for the pipeline; a disabled instance does nothing and costs a flag check."""

    def __init__(self, config: TracingConfig, exporter: SpanExporter | None = None) -> None:
        self.capture_content = config.capture_content or os.environ.get(
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"
        exporter = exporter if exporter is not None else (build_exporter(config) if config.enabled else None)
        self.enabled = exporter is not None
        if exporter is None:
            return
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", config.service_name)})
        # OTEL_TRACES_SAMPLER, when set, wins (the SDK reads it); otherwise the configured ratio.
        # An incoming traceparent's "sampled" flag is a client's say: it decides only when trusted, else
        # the trace id ratio decides for remote parents too (the trace id is kept either way).
        ratio = TraceIdRatioBased(config.sample_ratio)
        parent = {} if config.trust_parent_sampling else {"remote_parent_sampled": ratio}
        sampler = None if os.environ.get("OTEL_TRACES_SAMPLER") else ParentBased(ratio, **parent)
        self.provider = TracerProvider(resource=resource, sampler=sampler) if sampler else TracerProvider(resource=resource)
        # Batching in a background thread, with a bounded queue that drops when full: a slow or dead
        # collector never slows or fails a request. Small batches: encoding one holds the GIL, and
        # 512-span batches (the SDK default) showed as ~12 ms p99 stalls of the event loop.
        self.provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=config.max_queue_size, max_export_batch_size=config.export_batch_size,
            export_timeout_millis=5000))
        self.tracer = self.provider.get_tracer("slipstream")
        self._propagator = TraceContextTextMapPropagator()

    # --- live spans ---------------------------------------------------------------------------
    def start_request(self, record: RequestRecord, method: str, path: str, traceparent: str | None) -> Any:
        """The request's SERVER span (None when tracing is off): the pipeline keeps it in the record."""
        if not self.enabled:
            return None
        ctx = self._propagator.extract({"traceparent": traceparent}) if traceparent else None
        return self.tracer.start_span(f"{method} {path}", context=ctx, kind=SpanKind.SERVER, start_time=ns(record.received))

    def start_attempt(self, parent: Any, endpoint: str, attempt: AttemptRecord) -> tuple[Any, str | None]:
        """Open the attempt's CLIENT span under `parent` (the request's); returns it (its owner keeps it in
        the attempt's record) and the traceparent to forward to the backend."""
        if not self.enabled or parent is None or not parent.is_recording():
            return None, None
        op = OPERATIONS.get(endpoint, endpoint)
        span = self.tracer.start_span(
            f"{op} {attempt.request_model}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            start_time=ns(attempt.start),
            attributes={
                "gen_ai.operation.name": op,
                "gen_ai.provider.name": _PROVIDERS.get(attempt.flavor, attempt.flavor),
                "gen_ai.request.model": attempt.request_model,
                "server.address": attempt.server_address,
                "server.port": attempt.server_port,
                "slipstream.backend": attempt.backend,
                "slipstream.model_alias": attempt.alias,
                "slipstream.attempt": attempt.number,
            },
        )
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        return span, carrier.get("traceparent")

    # --- the record, turned into spans --------------------------------------------------------
    def finish(self, record: RequestRecord, models: dict[str, LatencyModel], request_params: dict | None) -> None:
        span = record.span
        if span is None:
            return
        tracer = self.tracer
        parent = trace.set_span_in_context(span)
        span.set_attributes({
            "http.request.method": "POST",
            "http.response.status_code": record.status,
            "gen_ai.operation.name": OPERATIONS.get(record.endpoint, record.endpoint),
            "gen_ai.request.model": record.alias,
            "slipstream.request_id": record.request_id,
            "slipstream.tenant": record.tenant,
            "slipstream.outcome": record.outcome.value,
            "slipstream.cache.status": record.cache,
            "slipstream.attempts": record.attempts,
            "slipstream.retries": record.retries,
        })
        if record.cache_category:
            span.set_attribute("slipstream.cache.category", record.cache_category)
        if record.fallback:
            span.set_attribute("slipstream.fallback", record.fallback)
        if record.target_result:
            span.set_attribute("slipstream.latency_target.result", record.target_result)
        if record.response_model:
            span.set_attribute("gen_ai.response.model", record.response_model)
        if record.usage is not None:
            span.set_attributes({"gen_ai.usage.input_tokens": record.usage.prompt_tokens,
                                 "gen_ai.usage.output_tokens": record.usage.completion_tokens})
        if record.error_type:
            span.set_attribute("error.type", record.error_type)
            if record.status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        if record.cache_end:
            cache = tracer.start_span("cache lookup", context=parent, start_time=ns(record.cache_start),
                                      attributes={"slipstream.cache.status": record.cache, "slipstream.timing.source": "measured"})
            if record.similarity is not None:
                cache.set_attribute("slipstream.cache.similarity", record.similarity)
            if record.cache_category:
                cache.set_attribute("slipstream.cache.category", record.cache_category)
            if record.embed_s:
                emb = tracer.start_span("embedding", context=trace.set_span_in_context(cache),
                                        start_time=ns(record.cache_start), attributes={"slipstream.timing.source": "measured"})
                emb.end(end_time=ns(record.cache_start + record.embed_s))
            cache.end(end_time=ns(record.cache_end))
        for route in record.routes:
            r = tracer.start_span("route", context=parent, start_time=ns(route.at), attributes={
                "slipstream.model_alias": route.alias, "slipstream.route.strategy": route.strategy,
                "slipstream.route.chosen": route.chosen, "slipstream.route.reason": route.reason,
                "slipstream.route.candidates": [f"{k}={v}" for k, v in route.candidates.items()],
            })
            if route.predicted_ttft_s:
                r.set_attributes({
                    "slipstream.route.predicted_ttft_s": [f"{k}={v}" for k, v in route.predicted_ttft_s.items()],
                    "slipstream.route.believed_cached_tokens": [f"{k}={v}" for k, v in route.believed_cached_tokens.items()],
                    "slipstream.predicted.source": "estimated"})
            r.end(end_time=ns(route.end))
        for event in record.events:
            span.add_event(event.name, attributes=event.attributes, timestamp=ns(event.at))
        answered = record.answered_by
        if answered is not None and answered.predicted is not None:
            span.set_attributes(prediction_attributes(answered))
        for attempt in record.attempt_log:
            self._finish_attempt(record, attempt, models.get(attempt.backend), request_params)
        if self.capture_content and record.body is not None:
            span.set_attribute("gen_ai.input.messages", orjson.dumps(record.body.get("messages", record.body.get("prompt"))).decode())
            if record.output_text is not None:
                span.set_attribute("gen_ai.output.messages", record.output_text)
        span.end(end_time=ns(record.finished or time.perf_counter()))

    def _finish_attempt(self, record: RequestRecord, a: AttemptRecord, model: LatencyModel | None, params: dict | None) -> None:
        span = a.span
        if span is None:
            return
        if params:
            for key, attr in (("max_tokens", "gen_ai.request.max_tokens"), ("temperature", "gen_ai.request.temperature"),
                              ("top_p", "gen_ai.request.top_p"), ("seed", "gen_ai.request.seed")):
                v = clamp_number(params.get(key))
                if v is not None:
                    span.set_attribute(attr, v)
        if a.error_type:
            span.set_attribute("error.type", a.error_type)
            span.set_status(Status(StatusCode.ERROR))
        if a.prefix is not None:
            # Matched: the prefix index's estimate at routing time; reported: what the backend said it reused.
            span.set_attributes({"slipstream.prefix.matched_blocks": a.prefix.blocks,
                                 "slipstream.prefix.matched_tokens": round(a.prefix.matched_tokens, 1),
                                 "slipstream.prefix.believed_tokens": round(a.prefix.tokens, 1)})
            if a.burst_wait_s:
                span.set_attribute("slipstream.prefix.burst_wait_s", round(a.burst_wait_s, 6))
        if a.cached_reported is not None:
            span.set_attribute("slipstream.prefix.reported_cached_tokens", a.cached_reported)
        if a.predicted is not None:
            span.set_attributes(prediction_attributes(a))
        end = a.end or record.finished or time.perf_counter()
        final = a is record.answered_by and not a.error_type
        if final:
            response_model = a.response_model or record.response_model
            if response_model:
                span.set_attribute("gen_ai.response.model", response_model)
            if record.finish_reasons:
                span.set_attribute("gen_ai.response.finish_reasons", list(record.finish_reasons))
            if record.usage is not None:
                span.set_attributes({"gen_ai.usage.input_tokens": record.usage.prompt_tokens,
                                     "gen_ai.usage.output_tokens": record.usage.completion_tokens})
            if model is not None and a.end:
                for stage in attempt_stages(record, a, model):
                    s = self.tracer.start_span(stage.name, context=trace.set_span_in_context(span), start_time=ns(stage.start),
                                               attributes={"slipstream.timing.source": stage.source})
                    if stage.name == "decode" and record.usage is not None:
                        s.set_attribute("gen_ai.usage.output_tokens", record.usage.completion_tokens)
                    s.end(end_time=ns(stage.end))
        span.end(end_time=ns(end))

    def shutdown(self) -> None:
        if self.enabled:
            self.provider.shutdown()

    def force_flush(self) -> None:
        if self.enabled:
            self.provider.force_flush()


def attempt_stages(record: RequestRecord, a: AttemptRecord, model: LatencyModel, end: float | None = None) -> list[Stage]:
    """The stage breakdown of a finished, successful attempt (or, with `end`, of one still running until then)."""
    end = a.end if end is None else end
    # Estimates use the model's units: the body's token estimate, of which the share the server processed.
    prompt = processed_prompt(record.prompt_tokens_hint, a.report, a.prefix.tokens if a.prefix is not None else 0.0)
    output = record.usage.completion_tokens if record.usage else 0
    if a.stream and a.first_event:
        return stream_stages(a.start, a.headers or a.start, a.first_event, end, a.report, prompt, model,
                             adapter_for(a.flavor).headers_at_slot)
    return json_stages(a.start, end, a.report, prompt, output, model, a.load)


_INT64 = (1 << 63) - 1


def prediction_attributes(a: AttemptRecord) -> dict:
    """What routing predicted for the attempt (estimates) beside what was measured, both in seconds from
    the attempt's start, so a trace viewer shows the two side by side."""
    p = a.predicted
    assert p is not None
    out = {"slipstream.predicted.queue_s": round(p.queue_s, 6), "slipstream.predicted.ttft_s": round(p.ttft_s, 6),
           "slipstream.predicted.e2e_s": round(p.e2e_s, 6), "slipstream.predicted.output_tokens": round(p.decode_tokens + 1, 1),
           "slipstream.predicted.source": "estimated"}
    if a.stream and a.first_event:
        out["slipstream.measured.ttft_s"] = round(a.first_event - a.start, 6)
    if a.end:
        out["slipstream.measured.e2e_s"] = round(a.end - a.start, 6)
    return out


def clamp_number(v: object) -> int | float | None:
    """A client-sent number as a span attribute can carry it: ints within int64, floats finite."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int):
        return max(-_INT64 - 1, min(_INT64, v))
    return v if math.isfinite(v) else None
