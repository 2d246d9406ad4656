"""bench/route_trace.py: a run's requests tagged by why their prompt was prefilled cold, and joined by request id
with the spans a gateway's console exporter wrote (the OpenTelemetry SDK's own exporter, into a log file)."""

import io
import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from bench.route_trace import decisions, spans, tag


def _q(key: str, backend: str, cached: int, prompt: int = 360) -> dict:
    return {"key": key, "backend": backend, "cached": cached, "prompt": prompt}


def test_a_cold_prefill_is_first_spill_or_evicted_by_where_its_prompt_was_before():
    requests = [
        _q("p0", "a", 4), _q("p1", "b", 4),  # each prompt's first prefill anywhere
        _q("p0", "a", 340),  # warm at home
        _q("p0", "b", 30),  # cold beside a home that held it: a spill
        _q("p1", "b", 20),  # cold where it had been: the server dropped it
        _q("p0", "b", 350), _q("p1", "b", None, None),  # warm; a request with no usage is not cold
    ]
    assert tag(requests) == ["first", "first", "", "spill", "evicted", "", ""]


def test_spans_are_read_from_a_log_between_other_lines_and_joined_to_their_request(tmp_path):
    log = io.StringIO()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=log)))
    tracer = provider.get_tracer("test")
    log.write("INFO: started {not json}\n")
    for rid, chosen, scores in (("r1", "a", ["a=1.5", "b=2.25"]), ("r2", "b", ["a=full", "b=0.5"])):
        with tracer.start_as_current_span("chat m") as request:
            request.set_attribute("slipstream.request_id", rid)
            with tracer.start_as_current_span("route") as route:
                route.set_attributes({"slipstream.route.chosen": chosen, "slipstream.route.candidates": scores,
                                      "slipstream.route.predicted_ttft_s": ["a=1.25", "b=2.0"],
                                      "slipstream.route.believed_cached_tokens": ["a=300.0", "b=0.0"]})
            with tracer.start_as_current_span("chat") as attempt:
                attempt.set_attributes({"slipstream.backend": chosen, "slipstream.predicted.queue_s": 0.5,
                                        "slipstream.predicted.ttft_s": 1.5, "slipstream.measured.ttft_s": 0.75,
                                        "slipstream.prefix.believed_tokens": 300.0})
    log.write("INFO: stopped\n")
    path = tmp_path / "gw.spans"
    path.write_text(log.getvalue())
    assert len(spans(path)) == 6 and all(json.dumps(s) for s in spans(path))
    found = decisions([path])
    assert found["r1"].scores == {"a": 1.5, "b": 2.25}
    assert found["r2"].scores["a"] == float("inf")  # a backend at its concurrency limit
    assert found["r1"].ttfts == {"a": 1.25, "b": 2.0} and found["r1"].held == {"a": 300.0, "b": 0.0}
    d = found["r1"]
    assert (d.predicted_queue_s, d.predicted_ttft_s, d.measured_ttft_s, d.believed_tokens) == (0.5, 1.5, 0.75, 300.0)
