"""Prometheus /metrics and the Server-Timing header, as an operator and a browser see them."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cache.test_cache import settle
from tests.conftest import ACME_KEY, gateway_config, start_gateway
from tests.support import wait_until

AUTH = {"authorization": f"Bearer {ACME_KEY}"}


def scrape(url: str) -> dict[str, list]:
    text = httpx.get(f"{url}/metrics").text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def sample(families, name: str, **labels) -> float:
    for family in families.values():
        for s in family:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(f"{name} {labels}")


def test_request_histograms_by_alias_backend_and_outcome(gateway):
    client = gateway.client()
    for _ in range(3):
        list(client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "m"}], max_tokens=8,
                                            stream=True, extra_body={"ignore_eos": True}))
    m = scrape(gateway.url)
    labels = dict(gen_ai_operation_name="chat", gen_ai_request_model="chat", slipstream_backend="fast")
    assert sample(m, "gen_ai_server_request_duration_seconds_count", slipstream_outcome="ok", **labels) >= 3
    assert sample(m, "gen_ai_server_time_to_first_token_seconds_count", **labels) >= 3
    assert sample(m, "gen_ai_server_time_per_output_token_seconds_count", **labels) >= 3
    assert sample(m, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **labels) >= 24
    # The conventions' TTFT buckets.
    assert sample(m, "gen_ai_server_time_to_first_token_seconds_bucket", le="0.001", **labels) >= 0
    assert sample(m, "slipstream_upstream_attempts_total", slipstream_backend="fast", result="ok") >= 3


def test_live_gauges_and_error_outcomes(gateway):
    client = gateway.client()
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="dead", messages=[{"role": "user", "content": "x"}])
    m = scrape(gateway.url)
    assert sample(m, "slipstream_backend_inflight", slipstream_backend="fast") == 0
    assert sample(m, "slipstream_backend_breaker_state", slipstream_backend="fast") == 0
    assert sample(m, "slipstream_queued_requests") == 0
    assert sample(m, "slipstream_retries_total", gen_ai_request_model="dead") >= 2
    assert sample(m, "slipstream_upstream_attempts_total", slipstream_backend="dead", result="upstream_unreachable") >= 3
    assert sample(m, "gen_ai_server_request_duration_seconds_count", gen_ai_request_model="dead",
                  slipstream_outcome="upstream_error") >= 1


def test_vllm_load_is_scraped(fleet, tmp_path):
    config = gateway_config(fleet, 0)
    config["telemetry"] = {"scrape_interval_s": 0.1}
    gw = start_gateway(tmp_path, fleet, config)
    try:
        # "slow" is a vllm-flavour backend: the simulator serves vLLM's /metrics names. Wait for slow's own
        # figures (another backend's may come first), and for them to read idle: the session's other tests
        # share this simulator, and one may still be finishing there.
        def slow_idle() -> bool:
            try:
                m = scrape(gw.url)
                return (sample(m, "slipstream_backend_running", slipstream_backend="slow") == 0
                        and sample(m, "slipstream_backend_kv_cache_usage", slipstream_backend="slow") == 0)
            except KeyError:
                return False

        assert wait_until(slow_idle, timeout=10)
    finally:
        gw.process.stop()


def timings(header: str) -> dict[str, tuple[float, str | None]]:
    out = {}
    for part in header.split(","):
        m = re.match(r'\s*(\w+);dur=([\d.]+)(?:;desc="(\w+)")?', part)
        out[m.group(1)] = (float(m.group(2)), m.group(3))
    return out


def test_server_timing_on_a_json_answer(gateway):
    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH,
                   json={"model": "tgi", "messages": [{"role": "user", "content": "t"}], "max_tokens": 4, "ignore_eos": True})
    t = timings(r.headers["server-timing"])
    assert [k for k in t] == ["network", "queue", "prefill", "decode", "gateway"]
    # TGI reports its queue and its whole inference time, not how that splits (x-time-per-token is their ratio).
    assert t["queue"][1] == "reported" and t["prefill"][1] == t["decode"][1] == "estimated"
    assert t["gateway"][1] == "measured"


def test_every_server_timing_entry_says_its_source_the_cache_lookup_too(gateway):
    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH,
                   json={"model": "chat", "messages": [{"role": "user", "content": "timing sources"}], "max_tokens": 4,
                         "temperature": 0})
    t = timings(r.headers["server-timing"])
    assert "cache" in t  # a deterministic request is looked up
    assert all(source in ("measured", "reported", "estimated") for _, source in t.values()), t


def test_server_timing_on_a_stream_says_what_is_known_at_the_first_byte(gateway):
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", headers=AUTH,
                      json={"model": "chat", "messages": [{"role": "user", "content": "s"}], "max_tokens": 3, "stream": True}) as r:
        t = timings(r.headers["server-timing"])
        r.read()
    # "chat" is llama.cpp-flavoured: its headers wait for a slot, so the wait before them is network
    # (estimated) then queue (measured), and from headers to the first event is prefill.
    assert list(t) == ["network", "queue", "prefill", "gateway"]
    assert t["network"][1] == "estimated" and t["queue"][1] == "measured"
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", headers=AUTH,
                      json={"model": "tgi", "messages": [{"role": "user", "content": "s"}], "max_tokens": 3, "stream": True}) as r:
        t = timings(r.headers["server-timing"])
        r.read()
    # TGI sends a stream's headers at once: the wait for the first event is queue and prefill together.
    assert list(t) == ["network", "queue_prefill", "gateway"]


def test_a_wait_for_a_free_slot_is_its_own_measured_stage_not_the_gateways_time(gateway):
    # "slow" takes two requests at a time (max_concurrency 2), each ~0.3 s of decode: of three sent together,
    # one waits at the gateway until a slot frees.
    body = {"model": "slow", "messages": [{"role": "user", "content": "w"}], "max_tokens": 8, "ignore_eos": True}
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH, json=body,
                                                     timeout=10), range(3)))
    assert [r.status_code for r in answers] == [200, 200, 200]
    waited = [t for t in (timings(r.headers["server-timing"]) for r in answers) if "slot_wait" in t]
    assert waited, [r.headers["server-timing"] for r in answers]
    for t in waited:
        assert t["slot_wait"][1] == "measured" and t["slot_wait"][0] > 100
        assert t["gateway"][0] < 50, t  # the gateway's own time, not the wait
    # The console's request view draws the wait as its own bar, and leaves it out of the gateway's time.
    from tests.conftest import ADMIN_KEY

    waited_id = next(r.headers["x-request-id"] for r in answers if "slot_wait" in r.headers["server-timing"])
    view = httpx.get(f"{gateway.url}/console/api/requests/{waited_id}",
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
    bars = {s["name"]: s for s in view["stages"]}
    assert bars["slot_wait"]["source"] == "measured" and bars["slot_wait"]["end_ms"] - bars["slot_wait"]["start_ms"] > 100
    assert view["gateway_ms"] < 50, view["gateway_ms"]

    client = gateway.client()

    def streamed(_):
        chunks = list(client.chat.completions.create(
            model="slow", messages=body["messages"], max_tokens=8, stream=True, stream_options={"include_usage": True},
            extra_headers={"x-slipstream-server-timing": "usage"}, extra_body={"ignore_eos": True}))
        return chunks[-1].usage.model_extra["slipstream_timing"]

    with ThreadPoolExecutor(3) as pool:
        summaries = list(pool.map(streamed, range(3)))
    waited_streams = [s for s in summaries if "slot_wait" in s]
    assert waited_streams, summaries
    assert all(s["slot_wait"]["ms"] > 100 and s["gateway"]["ms"] < 50 for s in waited_streams), waited_streams


def test_opt_in_timing_summary_in_the_usage_chunk(gateway):
    client = gateway.client()
    chunks = list(client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "u"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_headers={"x-slipstream-server-timing": "usage"},
        extra_body={"ignore_eos": True}))
    summary = chunks[-1].usage.model_extra["slipstream_timing"]
    assert set(summary) >= {"network", "queue", "prefill", "decode", "gateway"}
    assert summary["prefill"]["source"] == "reported" and summary["decode"]["source"] == "measured"
    plain = list(client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "u"}], max_tokens=5,
                                                stream=True, stream_options={"include_usage": True}))
    assert "slipstream_timing" not in (plain[-1].usage.model_extra or {})


def test_grafana_dashboard_queries_only_metrics_we_export(gateway):
    import json

    from tests.support import ROOT

    dash = json.loads((ROOT / "helm/slipstream/dashboards/slipstream.json").read_text())
    exported = httpx.get(f"{gateway.url}/metrics").text
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\b((?:gen_ai|slipstream)_[a-z_]+)", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert base in exported, f"{panel['title']}: {name} is not exported"


def test_metrics_survive_a_config_reload(fleet, tmp_path):
    import yaml

    from tests.conftest import ADMIN_KEY

    gw = start_gateway(tmp_path, fleet)
    path = tmp_path / "gateway.yaml"
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    labels = dict(gen_ai_request_model="slow", slipstream_backend="slow", slipstream_outcome="ok")
    count = "gen_ai_server_request_duration_seconds_count"
    try:
        client = gw.client()
        for _ in range(2):
            client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "m"}], max_tokens=2)
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="dead", messages=[{"role": "user", "content": "x"}])
        before = scrape(gw.url)
        # A stream that starts on the old gateway and ends after the reload.
        stream = client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "s"}],
                                                max_tokens=25, stream=True, extra_body={"ignore_eos": True})
        next(iter(stream))
        config = yaml.safe_load(path.read_text())
        config["models"]["renamed"] = {"backends": ["fast"]}
        path.write_text(yaml.safe_dump(config))
        assert httpx.post(f"{gw.url}/admin/reload", headers=admin).status_code == 200
        assert sample(scrape(gw.url), "slipstream_backend_inflight", slipstream_backend="slow") == 1  # still draining
        assert list(stream)[-1].choices[0].finish_reason == "length"
        after = scrape(gw.url)
        chat = dict(gen_ai_request_model="chat", slipstream_backend="fast", slipstream_outcome="ok")
        assert sample(after, count, **chat) == sample(before, count, **chat) == 2  # not reset
        assert sample(after, "slipstream_retries_total", gen_ai_request_model="dead") == \
            sample(before, "slipstream_retries_total", gen_ai_request_model="dead") >= 1
        assert sample(after, count, **labels) == 1  # finished on the replaced gateway, counted
        assert wait_until(lambda: sample(scrape(gw.url), "slipstream_backend_inflight", slipstream_backend="slow") == 0)
    finally:
        gw.process.stop()


def _series_matching(selector: str, samples: list) -> list:
    """The samples a PromQL label selector such as `a="x", b=~"y|z", c!="w"` picks (anchored regexes)."""
    matchers = re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', selector)

    def ok(labels: dict) -> bool:
        for name, op, value in matchers:
            have = labels.get(name, "")
            hit = re.fullmatch(value, have) is not None if op in ("=~", "!~") else have == value
            if hit == (op in ("!=", "!~")):
                return False
        return True

    return [s for s in samples if ok(s.labels)]


def test_dashboard_end_to_end_panel_keeps_cache_hits_and_errors_apart(fleet, tmp_path):
    import json

    from tests.support import ROOT

    config = gateway_config(fleet, 0)
    config["models"]["chat"]["cache"] = {"exact": {"enabled": True}}
    gw = start_gateway(tmp_path, fleet, config)
    try:
        client = gw.client()
        question = [{"role": "user", "content": "dashboard"}]
        for _ in range(2):  # a miss that reaches the backend, then an exact hit
            client.chat.completions.create(model="chat", messages=question, max_tokens=200, temperature=0)
            settle(gw)  # the cache write happens after the response: wait until it is stored
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="dead", messages=question)
        families = scrape(gw.url)
    finally:
        gw.process.stop()
    counts = [s for f in families.values() for s in f if s.name == "gen_ai_server_request_duration_seconds_count"]
    assert {s.labels["slipstream_cache"] for s in counts} >= {"hit", "miss"}

    dash = json.loads((ROOT / "helm/slipstream/dashboards/slipstream.json").read_text())
    panel = next(p for p in dash["panels"] if p["title"].startswith("End-to-end latency of backend answers"))
    for target in panel["targets"]:
        selector = re.search(r"gen_ai_server_request_duration_seconds_bucket\{(.*?)\}", target["expr"]).group(1)
        picked = _series_matching(selector.replace("$model", ".*"), counts)
        assert picked and all(s.labels["slipstream_backend"] != "none" for s in picked)
        assert {s.labels["slipstream_outcome"] for s in picked} == {"ok"}
        assert {s.labels["slipstream_cache"] for s in picked} <= {"miss", "bypass"}
    others = next(p for p in dash["panels"] if p["title"].startswith("End-to-end latency of cache hits"))
    seen = set()
    for target in others["targets"]:
        selector = re.search(r"gen_ai_server_request_duration_seconds_bucket\{(.*?)\}", target["expr"]).group(1)
        seen |= {(s.labels["slipstream_cache"], s.labels["slipstream_outcome"])
                 for s in _series_matching(selector.replace("$model", ".*"), counts)}
    assert ("hit", "ok") in seen and any(outcome != "ok" for _, outcome in seen)
    assert all(cache not in ("miss", "bypass") or outcome != "ok" for cache, outcome in seen)
