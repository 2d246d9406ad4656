"""The ops interface, hot reload, deadline-aware fallback and hedging, against real processes."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from tests.conftest import ACME_KEY, ADMIN_KEY, gateway_config, start_gateway
from tests.support import Process, free_port, sim_stats, wait_until, write_yaml

ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
MSG = [{"role": "user", "content": "hello"}]


def test_admin_needs_an_admin_key(gateway):
    assert httpx.get(f"{gateway.url}/admin/backends").status_code == 401
    r = httpx.get(f"{gateway.url}/admin/backends", headers={"authorization": f"Bearer {ACME_KEY}"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_admin_backends_shows_live_figures(gateway):
    gateway.client().chat.completions.create(model="chat", messages=MSG, max_tokens=3)
    body = httpx.get(f"{gateway.url}/admin/backends", headers=ADMIN).json()
    fast = next(b for b in body["backends"] if b["name"] == "fast")
    assert fast["breaker"]["state"] == "closed" and fast["inflight"] == 0
    assert fast["latency_model"]["samples"]["decode"] >= 1
    assert {"net_s", "tpot_s", "prefill_tokens_per_s", "residual_queue_s", "typical_residual_queue_s", "slots",
            "failure_rate"} <= set(fast["latency_model"])


def test_admin_backends_and_metrics_show_predicted_against_measured(gateway):
    client = gateway.client()
    for _ in range(4):
        stream = client.chat.completions.create(model="chat", messages=MSG, max_tokens=8, stream=True,
                                                stream_options={"include_usage": True}, stop=["zzz"])
        for _ in stream:
            pass
    body = httpx.get(f"{gateway.url}/admin/backends", headers=ADMIN).json()
    errors = [b["prediction_error"] for b in body["backends"] if b["prediction_error"]["e2e_samples"]]
    assert errors and errors[0]["ttft_samples"] >= 1 and errors[0]["e2e_median_abs_error"] >= 0
    assert errors[0]["source"] == "estimated vs measured"
    shapes = [o for o in body["output_lengths"] if o["alias"] == "chat" and o["stop"] and o["max_tokens_up_to"] == 8]
    assert shapes and shapes[0]["samples"] >= 3 and 0 < shapes[0]["output_tokens"] <= 8
    metrics = httpx.get(f"{gateway.url}/metrics").text
    for kind in ("predicted", "measured"):
        assert f'figure="ttft",kind="{kind}"' in metrics and f'figure="e2e",kind="{kind}"' in metrics


def test_admin_backends_say_where_each_answer_decode_figure_came_from(gateway):
    # Timing data carries its source. A JSON client's call to vLLM is streamed upstream and assembled, so
    # the gateway times its decode and the in-flight book measures its batch. (The reported and estimated
    # tags, where an answer's first token is never seen: tests/routing/test_learning.py; this fleet's
    # other backends decode in no time, which teaches nothing.)
    client = gateway.client()
    for _ in range(4):
        client.chat.completions.create(model="slow", messages=MSG, max_tokens=8, stop=["zzz"])
    body = httpx.get(f"{gateway.url}/admin/backends", headers=ADMIN).json()
    slow = next(b for b in body["backends"] if b["name"] == "slow")
    level = slow["latency_model"]["answer_tpot_s"]["answers"]["1"]
    assert (level["source"], level["batch_source"]) == ("measured", "measured")
    for b in body["backends"]:
        for kind in b["latency_model"]["answer_tpot_s"].values():
            for figure in kind.values():
                assert figure["source"] in {"measured", "reported", "estimated"}
                assert figure["batch_source"] in {"measured", "estimated"}


def test_route_explain_sends_nothing(gateway, fleet):
    before = sim_stats(fleet.ports["fast"])["requests"]
    r = httpx.post(f"{gateway.url}/admin/route/explain", headers=ADMIN,
                   json={"model": "chat", "messages": MSG, "max_tokens": 20})
    body = r.json()
    assert body["would_use"] == "chat"
    alias = body["chain"][0]
    assert alias["choice"] == "fast" and alias["strategy"] == "latency_aware"
    assert alias["candidates"][0]["source"] == "estimated" and alias["candidates"][0]["predicted_e2e_s"] > 0
    assert sim_stats(fleet.ports["fast"])["requests"] == before


def routing_config(fleet) -> dict:
    config = gateway_config(fleet, 0)
    config["models"]["big"] = {"backends": ["slow"], "fallbacks": ["small"]}
    config["models"]["small"] = {"backends": ["fast"]}
    config["models"]["hedged"] = {"backends": ["hang", "fast"], "strategy": "round_robin",
                                  "hedge": {"enabled": True, "after_factor": 1.0, "min_delay_ms": 50, "budget_ratio": 1.0}}
    return config


@pytest.fixture(scope="module")
def routing_gw(fleet, tmp_path_factory):
    gw = start_gateway(tmp_path_factory.mktemp("routing"), fleet, routing_config(fleet))
    yield gw
    gw.process.stop()


def test_deadline_too_short_for_the_big_model_goes_to_the_small_one_first(routing_gw, fleet):
    before = sim_stats(fleet.ports["slow"])["requests"]
    # "slow" decodes at 40 ms a token: 50 tokens cannot come back within 300 ms.
    raw = routing_gw.client().chat.completions.with_raw_response.create(
        model="big", messages=MSG, max_tokens=50, extra_body={"ignore_eos": True},
        extra_headers={"x-slipstream-timeout-ms": "300"})
    assert raw.headers["x-slipstream-fallback"] == "small; reason=deadline"
    assert raw.headers["x-slipstream-model"] == "m-fast"
    assert sim_stats(fleet.ports["slow"])["requests"] == before  # no time was spent on the big model


def test_hedge_races_a_late_first_token(routing_gw, fleet):
    client = routing_gw.client()
    for _ in range(4):  # round robin puts every other first attempt on the hanging backend
        t0 = time.perf_counter()
        stream = client.chat.completions.create(model="hedged", messages=MSG, max_tokens=3, stream=True)
        assert len(list(stream)) >= 3
        assert time.perf_counter() - t0 < 1.0
    # The hanging backend's requests were cancelled when the hedge won, freeing its slots.
    assert wait_until(lambda: sim_stats(fleet.ports["hang"])["running"] == 0, timeout=2)


def test_hot_reload_swaps_config_and_drops_nothing(fleet, tmp_path):
    config = gateway_config(fleet, 0)
    gw = start_gateway(tmp_path, fleet, config)
    path = tmp_path / "gateway.yaml"
    try:
        client = gw.client()
        stream = client.chat.completions.create(model="slow", messages=MSG, max_tokens=25, stream=True,
                                                extra_body={"ignore_eos": True})
        first = next(iter(stream))
        # Add an alias and reload with SIGHUP while the stream runs.
        config["models"]["renamed"] = {"backends": ["fast"]}
        path.write_text(yaml.safe_dump(config))
        import signal

        gw.process.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "renamed" in {m.id for m in client.models.list()}, timeout=5)
        rest = list(stream)
        assert rest[-1].choices[0].finish_reason == "length" and first is not None
        assert client.chat.completions.create(model="renamed", messages=MSG, max_tokens=2).choices
        # A broken file is refused and changes nothing.
        path.write_text("models: [oops")
        r = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        assert r.status_code == 422 and "invalid YAML" in r.json()["message"]
        assert client.chat.completions.create(model="renamed", messages=MSG, max_tokens=2).choices
    finally:
        gw.process.stop()


def test_a_reload_keeps_what_routing_learned_of_the_servers_it_still_names(fleet, tmp_path):
    # A reload rebuilt the answer lengths, the prediction errors and the served models' token ratios
    # empty: the first minute after every reload priced answers at the default length, and
    # /admin/backends showed no prediction error. A backend under the same name, URL and model is the
    # same server serving the same model; one whose URL or model changed starts afresh.
    config = gateway_config(fleet, 0)
    gw = start_gateway(tmp_path, fleet, config)
    path = tmp_path / "gateway.yaml"
    view = lambda: httpx.get(f"{gw.url}/admin/backends", headers=ADMIN).json()
    named = lambda body, name: next(b for b in body["backends"] if b["name"] == name)
    try:
        client = gw.client()
        for alias in ("chat", "slow", "tgi"):
            for _ in range(3):
                stream = client.chat.completions.create(model=alias, messages=MSG, max_tokens=8, stream=True,
                                                        stream_options={"include_usage": True}, stop=["zzz"])
                for _ in stream:
                    pass
        before = view()
        assert named(before, "fast")["prediction_error"]["e2e_samples"] == 3
        assert named(before, "slow")["latency_model"]["samples"]["decode"] >= 1
        config["backends"]["slow"]["base_url"] = f"http://127.0.0.1:{fleet.ports['tgi']}/v1"  # another server
        config["backends"]["tgi"]["model"] = "m-tgi-2"  # the same server, another model: its own rates
        config["models"]["renamed"] = {"backends": ["fast"]}
        write_yaml(path, config)
        assert httpx.post(f"{gw.url}/admin/reload", headers=ADMIN).json()["reloaded"] is True
        after = view()
        assert "renamed" in {m.id for m in client.models.list()}
        fast, was = named(after, "fast"), named(before, "fast")
        assert fast["prediction_error"] == was["prediction_error"]
        # (Its round-trip samples go on growing: the scrapes of its load.)
        assert fast["latency_model"]["samples"]["decode"] == was["latency_model"]["samples"]["decode"] > 0
        assert fast["latency_model"]["prompt_tokens_per_server_token"] == was["latency_model"]["prompt_tokens_per_server_token"]
        assert fast["prefix_index"] == was["prefix_index"]
        lengths = lambda body: {(o["alias"], o["max_tokens_up_to"], o["stop"]): o["samples"] for o in body["output_lengths"]}
        assert lengths(after) == lengths(before) and lengths(after)[("chat", 8, True)] == 3
        for name in ("slow", "tgi"):
            assert named(before, name)["prediction_error"]["e2e_samples"] == 3
            assert named(after, name)["prediction_error"]["e2e_samples"] == 0
        assert named(after, "slow")["latency_model"]["samples"]["decode"] == 0
    finally:
        gw.process.stop()


def test_a_config_that_validates_but_cannot_start_is_refused_and_the_file_is_still_watched(fleet, tmp_path):
    # The semantic cache's model cannot load here (its folder lies under a file). Such a reload used to
    # raise out of the reloader: /admin/reload answered 500, and a change seen by the file watcher ended
    # the watcher, so no later change to the file was ever picked up.
    (tmp_path / "occupied").write_text("")
    port = free_port()
    config = gateway_config(fleet, port)
    path = write_yaml(tmp_path / "gateway.yaml", config)
    proc = Process(["serve", "--config", str(path)], tmp_path / "gateway.log",
                   env={"SLIPSTREAM_MODEL_DIR": str(tmp_path / "occupied" / "models")})
    try:
        proc.wait_listening(port)
        url = f"http://127.0.0.1:{port}"
        config["models"]["chat"]["cache"] = {"semantic": {"enabled": True}}
        write_yaml(path, config)
        assert wait_until(lambda: "config reload refused" in proc.log(), timeout=10)
        r = httpx.post(f"{url}/admin/reload", headers=ADMIN)
        assert r.status_code == 422 and "cannot start its cache" in r.json()["message"]
        # The running config still serves, and the next good change to the file is picked up.
        del config["models"]["chat"]["cache"]
        config["models"]["renamed"] = {"backends": ["fast"]}
        write_yaml(path, config)
        models = lambda: {m["id"] for m in httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer {ACME_KEY}"}).json()["data"]}
        assert wait_until(lambda: "renamed" in models(), timeout=10)
    finally:
        proc.stop()


def test_a_reload_names_the_settings_that_wait_for_a_restart(fleet, tmp_path):
    # The listener's limits and the log level are set when the process starts; a reload used to answer
    # "reloaded" for them and change nothing, warning only for host and port.
    config = gateway_config(fleet, 0)
    gw = start_gateway(tmp_path, fleet, config)
    path = tmp_path / "gateway.yaml"
    try:
        config["server"].update(max_body_bytes=4096, log_level="debug", queue_timeout_s=5)
        write_yaml(path, config)
        r = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        assert r.json() == {"reloaded": True, "message": "reloaded; restart to apply server.max_body_bytes, server.log_level"}
        # Still the size the process started with: the reload could not apply the new one.
        big = {"model": "chat", "messages": [{"role": "user", "content": "x" * 8000}], "max_tokens": 1}
        assert httpx.post(f"{gw.url}/v1/chat/completions", json=big,
                          headers={"authorization": f"Bearer {ACME_KEY}"}).status_code == 200
        # Compared with what the process runs, not with the last file: a later reload still says so.
        config["models"]["renamed"] = {"backends": ["fast"]}
        write_yaml(path, config)
        r = httpx.post(f"{gw.url}/admin/reload", headers=ADMIN)
        assert r.json()["message"] == "reloaded; restart to apply server.max_body_bytes, server.log_level"
        assert "server.max_body_bytes, server.log_level take effect only on restart" in gw.process.log()
    finally:
        gw.process.stop()
