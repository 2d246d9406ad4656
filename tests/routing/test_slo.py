"""Per-request latency targets: best-fit routing, fallback when unmeetable, early 503 for sheddable ones."""

from __future__ import annotations

import httpx
import pytest

from app.config import ModelAlias
from app.errors import InvalidRequest
from app.routing.context import RouteContext
from app.routing.latency_model import LatencyModel, Prior
from app.routing.prefix_index import BackendPrefixes
from app.routing.slo import LatencyTarget, best_fit, for_alias, from_headers
from app.routing.state import InflightBook
from tests.conftest import start_gateway
from tests.support import Process, free_port, write_yaml


class _Config:
    def __init__(self, cost):
        self.cost = cost


class _Backend:
    def __init__(self, cost):
        self.config = _Config(cost)


class State:
    def __init__(self, name, prefill_tps, cost=1.0, inflight=0):
        self.name, self.inflight = name, inflight
        self.model = LatencyModel(Prior(prefill_tokens_per_s=prefill_tps, tpot_s=0.02, slots=8))
        self.scraped_waiting, self.others_waiting, self.book = None, 0.0, InflightBook()
        self.prefixes, self.uncached_inflight = BackendPrefixes(), 0.0
        self.prefilling, self.prefill_busy_since = 0, 0.0
        self.backend = _Backend(cost)


def ctx(ttft_ms=None, tpot_ms=None) -> RouteContext:
    c = RouteContext(stream=True, prompt_tokens=1000, max_tokens=10, now=0.0)
    c.target = LatencyTarget(None if ttft_ms is None else ttft_ms / 1000, None if tpot_ms is None else tpot_ms / 1000)
    return c


def test_the_cheapest_backend_that_meets_the_target_wins_not_the_fastest():
    fast, cheap = State("fast", 100_000, cost=10), State("cheap", 2_000, cost=1)  # TTFT ~10 ms vs ~500 ms
    assert best_fit([fast, cheap], ctx(ttft_ms=800), chosen=0) == (1, True)


def test_a_target_only_the_fast_backend_meets_goes_there():
    fast, cheap = State("fast", 100_000, cost=10), State("cheap", 2_000, cost=1)
    assert best_fit([fast, cheap], ctx(ttft_ms=100), chosen=1) == (0, True)


def test_among_equally_cheap_the_tightest_fit_is_taken():
    a, b = State("a", 100_000), State("b", 4_000)  # ~10 ms vs ~250 ms, both within 400 ms
    assert best_fit([a, b], ctx(ttft_ms=400), chosen=0) == (1, True)


def test_no_feasible_backend_keeps_the_strategy_pick_and_says_so():
    a, b = State("a", 2_000), State("b", 2_000)
    assert best_fit([a, b], ctx(ttft_ms=5), chosen=1) == (1, False)


def test_a_tpot_target_counts_too():
    a = State("a", 100_000)
    assert best_fit([a], ctx(tpot_ms=5), chosen=0) == (0, False)
    assert best_fit([a], ctx(tpot_ms=50), chosen=0) == (0, True)


def test_headers_override_the_alias_default_and_bad_values_are_the_clients_error():
    spec = ModelAlias(backends=("x",), ttft_slo_ms=900, tpot_slo_ms=80)
    t = for_alias(from_headers({"x-slipstream-ttft-slo-ms": "300"}), spec)
    assert (t.ttft_s, t.tpot_s, t.source) == (0.3, 0.08, "header")
    assert for_alias(from_headers({}), spec).source == "alias"
    for bad in ("0", "-5", "soon", "inf"):
        with pytest.raises(InvalidRequest):
            from_headers({"x-slipstream-ttft-slo-ms": bad})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slo")
    port = free_port()
    sim = write_yaml(tmp / "sim.yaml", {"simulator": {"seed": 1, "backends": {
        "b": dict(port=port, model="m", prefill_tokens_per_s=2000, tpot_ms=1, output=dict(median=4, sigma=0, max=4))}}})
    proc = Process(["simulate", "--config", str(sim)], tmp / "sim.log")
    proc.wait_listening(port)
    config = {"auth": {"mode": "open"},
              "backends": {"b": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}},
              "models": {"m": {"backends": ["b"]}}}
    gw = start_gateway(tmp, None, config)
    yield gw
    gw.process.stop()
    proc.stop()


def post(gw, headers: dict) -> httpx.Response:
    body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hello " * 200}]}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_a_sheddable_request_with_an_unmeetable_target_is_refused_early_with_retry_after(gateway):
    r = post(gateway, {"x-slipstream-ttft-slo-ms": "0.5", "x-slipstream-priority": "batch"})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "latency_target_unmeetable"
    assert int(r.headers["retry-after"]) >= 1


def test_an_interactive_request_with_an_unmeetable_target_is_still_served(gateway):
    assert post(gateway, {"x-slipstream-ttft-slo-ms": "0.5"}).status_code == 200


def test_a_sheddable_request_with_a_reachable_target_is_served(gateway):
    assert post(gateway, {"x-slipstream-ttft-slo-ms": "20000", "x-slipstream-priority": "batch"}).status_code == 200


def test_metrics_count_requests_by_latency_target_result(gateway):
    post(gateway, {"x-slipstream-ttft-slo-ms": "0.5", "x-slipstream-priority": "batch"})
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    assert 'slipstream_latency_target_requests_total{gen_ai_request_model="m",result="shed"}' in text
    assert 'result="unmeetable"' in text or 'result="met"' in text


def test_a_malformed_target_is_a_400(gateway):
    r = post(gateway, {"x-slipstream-ttft-slo-ms": "fast"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-slipstream-ttft-slo-ms"
