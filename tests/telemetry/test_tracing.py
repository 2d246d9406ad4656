"""Span trees and attributes of real requests: a gateway served by uvicorn in this process (so the
SDK's in-memory exporter can read its spans) in front of the real simulator fleet, and a gateway
process exporting over OTLP/HTTP to a real receiver process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.config import GatewayConfig
from app.http.server import create_app
from tests.conftest import ACME_KEY, gateway_config, start_gateway
from tests.support import ROOT, free_port, sim_stats, wait_until

MSG = [{"role": "user", "content": "a secret prompt about telemetry"}]


class InProcessGateway:
    def __init__(self, fleet, models: dict | None = None) -> None:
        self.port = free_port()
        self.exporter = InMemorySpanExporter()
        raw = gateway_config(fleet, self.port)
        raw["models"].update(models or {})
        config = GatewayConfig.model_validate(raw)
        self.app = create_app(config, span_exporter=self.exporter)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        assert wait_until(lambda: self.server.started, timeout=10)
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self):
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=ACME_KEY, max_retries=0)

    def spans_of(self, request_id: str, timeout: float = 5.0) -> list:
        """The finished spans of one request (found through its SERVER span's request id)."""
        def server_span():
            self.app.app.state.gateway.telemetry.tracing.force_flush()
            for s in self.exporter.get_finished_spans():
                if s.kind is SpanKind.SERVER and s.attributes.get("slipstream.request_id") == request_id:
                    return s
            return None

        assert wait_until(lambda: server_span() is not None, timeout=timeout)
        trace_id = server_span().context.trace_id
        return [s for s in self.exporter.get_finished_spans() if s.context.trace_id == trace_id]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def gw(fleet):
    g = InProcessGateway(fleet)
    yield g
    g.stop()


def tree(spans):
    by_id = {s.context.span_id: s for s in spans}
    server = next(s for s in spans if s.kind is SpanKind.SERVER)
    children = {}
    for s in spans:
        if s.parent is not None and s.parent.span_id in by_id:
            children.setdefault(s.parent.span_id, []).append(s)
    return server, lambda span: sorted(children.get(span.context.span_id, []), key=lambda x: x.start_time)


def test_streamed_request_span_tree(gw):
    raw = gw.client().chat.completions.with_raw_response.create(
        model="chat", messages=MSG, max_tokens=12, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    list(raw.parse())
    spans = gw.spans_of(raw.headers["x-request-id"])
    server, kids = tree(spans)
    assert server.name == "POST /v1/chat/completions"
    assert server.attributes["gen_ai.request.model"] == "chat"
    names = [s.name for s in kids(server)]
    assert names == ["route", "chat m-fast"]
    attempt = kids(server)[1]
    assert attempt.kind is SpanKind.CLIENT
    a = attempt.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "llama_cpp"
    assert a["gen_ai.request.model"] == "m-fast" and a["gen_ai.response.model"] == "m-fast"
    assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert a["gen_ai.usage.output_tokens"] == 12 and a["gen_ai.usage.input_tokens"] > 0
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    assert a["gen_ai.request.max_tokens"] == 12
    stages = kids(attempt)
    # llama.cpp reports prefill (in the last chunk) but no queue time; its headers wait for a slot, so
    # the wait before them is network (estimated from its /health round trip) and queue (measured).
    # Time its report does not cover between the headers and the first token is shown as such.
    named = [(s.name, s.attributes["slipstream.timing.source"]) for s in stages]
    assert [n for n in named if n[0] != "unattributed"] == [
        ("network", "estimated"), ("queue", "measured"), ("prefill", "reported"), ("decode", "measured")]
    assert all(src == "measured" for name, src in named if name == "unattributed")
    total = attempt.end_time - attempt.start_time
    assert abs(sum(s.end_time - s.start_time for s in stages) - total) < 1_000_000  # within 1 ms
    assert stages[0].start_time == attempt.start_time
    assert server.start_time <= attempt.start_time and attempt.end_time <= server.end_time
    # The prediction routing made, beside what was measured, on the attempt and on the request span.
    for span in (attempt, server):
        p = span.attributes
        assert p["slipstream.predicted.source"] == "estimated"
        assert p["slipstream.predicted.output_tokens"] == 12  # ignore_eos: max_tokens is the length
        assert 0 < p["slipstream.predicted.ttft_s"] < p["slipstream.predicted.e2e_s"]
        assert 0 < p["slipstream.measured.ttft_s"] < p["slipstream.measured.e2e_s"] <= total / 1e9 + 0.001


def test_cache_spans_carry_the_question_category(fleet):
    g = InProcessGateway(fleet, {"cached": {"backends": ["fast"], "cache": {"exact": {"enabled": True}}}})
    try:
        ask = [{"role": "user", "content": f"What is the price of bitcoin right now? {time.time()}"}]
        raw = g.client().chat.completions.with_raw_response.create(model="cached", messages=ask, temperature=0)
        assert raw.headers["x-slipstream-cache"] == "miss"
        server, kids = tree(g.spans_of(raw.headers["x-request-id"]))
        assert server.attributes["slipstream.cache.category"] == "volatile"
        lookup = next(s for s in kids(server) if s.name == "cache lookup")
        assert lookup.attributes["slipstream.cache.category"] == "volatile"
    finally:
        g.stop()


def test_a_traced_gateway_has_every_score_computed(gw):
    # The route span lists each candidate's score; without tracing no one reads them and the router
    # lets the default strategy skip those its pick does not need (RouteContext.scored).
    assert gw.app.app.state.gateway.router.scores_read


def test_the_route_span_shows_why_each_candidate_scored_what_it_did(fleet):
    # Beside each candidate's score, the TTFT the ranking predicted for it and the prompt tokens it was
    # believed to hold: a reader sees a warm server passed over for its queue, not only two numbers.
    g = InProcessGateway(fleet, {"pair": {"backends": ["fast", "slow"]}})
    try:
        system = {"role": "system", "content": "You are a terse assistant for invoices. " * 30}
        first = ""
        for k in range(2):
            raw = g.client().chat.completions.with_raw_response.create(
                model="pair", messages=[system, {"role": "user", "content": f"question {k}"}], max_tokens=4)
            first = first or raw.headers["x-slipstream-backend"]
        server, kids = tree(g.spans_of(raw.headers["x-request-id"]))
        route = next(s for s in kids(server) if s.name == "route").attributes
        chosen = route["slipstream.route.chosen"]
        scores = dict(c.split("=") for c in route["slipstream.route.candidates"])
        ttft = dict(c.split("=") for c in route["slipstream.route.predicted_ttft_s"])
        held = dict(c.split("=") for c in route["slipstream.route.believed_cached_tokens"])
        assert set(scores) == set(ttft) == set(held) == {"fast", "slow"}
        assert route["slipstream.predicted.source"] == "estimated"
        assert all(float(v) > 0 for v in ttft.values())
        # The second request's prompt was sent to the first's backend before: believed held there only.
        other = next(name for name in held if name != first)
        assert float(held[first]) > 100 and float(held[other]) == 0.0
        attempt = next(s for s in kids(server) if s.kind is SpanKind.CLIENT).attributes
        assert abs(float(ttft[chosen]) - attempt["slipstream.predicted.ttft_s"]) < 1e-3
    finally:
        g.stop()


def test_tgi_json_stages_are_reported_where_tgi_reports_them(gw):
    raw = gw.client().chat.completions.with_raw_response.create(model="tgi", messages=MSG, max_tokens=5, extra_body={"ignore_eos": True})
    spans = gw.spans_of(raw.headers["x-request-id"])
    server, kids = tree(spans)
    attempt = kids(server)[-1]
    assert attempt.attributes["gen_ai.provider.name"] == "tgi"
    assert [(s.name, s.attributes["slipstream.timing.source"]) for s in kids(attempt)] == [
        ("network", "measured"), ("queue", "reported"), ("prefill", "estimated"), ("decode", "estimated")]


def test_vllm_stream_without_report_is_estimated(gw):
    raw = gw.client().chat.completions.with_raw_response.create(model="slow", messages=MSG, max_tokens=3, stream=True,
                                                                extra_body={"ignore_eos": True})
    list(raw.parse())
    spans = gw.spans_of(raw.headers["x-request-id"])
    server, kids = tree(spans)
    attempt = kids(server)[-1]
    assert attempt.attributes["gen_ai.provider.name"] == "vllm"
    assert [(s.name, s.attributes["slipstream.timing.source"]) for s in kids(attempt)] == [
        ("network", "measured"), ("queue", "estimated"), ("prefill", "estimated"), ("decode", "measured")]


def test_incoming_traceparent_is_honoured_and_forwarded(gw, fleet):
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    raw = gw.client().chat.completions.with_raw_response.create(
        model="chat", messages=MSG, max_tokens=2, extra_headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    spans = gw.spans_of(raw.headers["x-request-id"])
    server, kids = tree(spans)
    assert f"{server.context.trace_id:032x}" == trace_id
    assert f"{server.parent.span_id:016x}" == parent
    attempt = kids(server)[-1]
    forwarded = sim_stats(fleet.ports["fast"])["last_traceparent"]
    assert forwarded == f"00-{trace_id}-{attempt.context.span_id:016x}-01"


def test_retries_are_events_and_failed_attempts_are_spans(gw):
    import openai

    with pytest.raises(openai.InternalServerError) as exc:
        gw.client().chat.completions.create(model="dead", messages=MSG)
    spans = gw.spans_of(exc.value.response.headers["x-request-id"])
    server, kids = tree(spans)
    attempts = [s for s in kids(server) if s.kind is SpanKind.CLIENT]
    assert len(attempts) == 3
    assert all(s.attributes["error.type"] == "upstream_unreachable" for s in attempts)
    assert [e.name for e in server.events].count("retry") == 2
    assert server.attributes["error.type"] == "upstream_unreachable"


def test_no_content_in_spans_by_default(gw):
    raw = gw.client().chat.completions.with_raw_response.create(model="chat", messages=MSG, max_tokens=2)
    for span in gw.spans_of(raw.headers["x-request-id"]):
        for value in span.attributes.values():
            assert "secret prompt" not in str(value)


def test_export_over_otlp_http_to_a_real_receiver(fleet, tmp_path):
    port = free_port()
    receiver = subprocess.Popen([sys.executable, str(ROOT / "bench/otlp_receiver.py"), str(port)])
    try:
        assert wait_until(lambda: _up(f"http://127.0.0.1:{port}/healthz"), timeout=10)
        config = gateway_config(fleet, 0)
        config["telemetry"] = {"tracing": {"enabled": True, "capture_content": True}}
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "50",
               "OTEL_SERVICE_NAME": "slipstream-test"}
        gw = _start_with_env(tmp_path, fleet, config, env)
        try:
            client = gw.client()
            stream = client.chat.completions.create(model="chat", messages=MSG, max_tokens=4, stream=True)
            list(stream)

            def exported():
                return httpx.get(f"http://127.0.0.1:{port}/spans").json()

            assert wait_until(lambda: any(s["name"] == "decode" for s in exported()), timeout=10)
            spans = exported()
            names = {s["name"] for s in spans}
            assert {"POST /v1/chat/completions", "chat m-fast", "route", "network", "queue", "prefill", "decode"} <= names
            assert all(s["resource"]["service.name"] == "slipstream-test" for s in spans)
            server = next(s for s in spans if s["name"] == "POST /v1/chat/completions")
            assert "secret prompt" in server["attributes"]["gen_ai.input.messages"]  # capture switched on here
        finally:
            gw.process.stop()
    finally:
        receiver.terminate()


def test_dead_collector_never_slows_requests(fleet, tmp_path):
    config = gateway_config(fleet, 0)
    config["telemetry"] = {"tracing": {"enabled": True}}
    gw = _start_with_env(tmp_path, fleet, config, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
                                                  "OTEL_BSP_SCHEDULE_DELAY": "10"})
    try:
        client = gw.client()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            client.chat.completions.create(model="chat", messages=MSG, max_tokens=2)
            times.append(time.perf_counter() - t0)
        assert sorted(times)[15] < 0.05  # median well under the exporter's own retry waits
    finally:
        gw.process.stop()


def _start_with_env(tmp, fleet, config, env):
    import os

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return start_gateway(tmp, fleet, config)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _up(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False
