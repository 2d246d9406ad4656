"""Gateway features on /v1/responses as on chat: tenant token accounting from input_tokens/output_tokens, the
deadline header, Server-Timing and the routing headers, GenAI metrics, the semantic-cache-free exact replay."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from app.admission.auth import hash_key
from tests.conftest import ADMIN_KEY, start_gateway
from tests.protocols.responses.conftest import responses_config
from tests.support import set_faults, wait_until

BUDGET_KEY = "sk-test-budget-0123456789"
MODELS = ["native", "translated"]


@pytest.fixture(scope="module")
def gw(responses_fleet, tmp_path_factory):
    config = responses_config(responses_fleet)
    config["auth"]["admin_keys"] = [hash_key(ADMIN_KEY)]
    config["auth"]["clients"].append({"tenant": "budget", "key_sha256": hash_key(BUDGET_KEY)})
    config["limits"] = {"tenants": {"budget": {"limits": {"token_budget": {"tokens": 10**6, "period": "day"}}}}}
    # A model whose backend fails falls back to a chat-only one (passthrough -> translated across the fallback).
    config["models"]["falls"] = {"backends": ["flaky"], "retry": {"max_attempts": 1}, "fallbacks": ["translated"]}
    config["models"]["semantic"] = {"backends": ["chat2"], "cache": {
        "exact": {"enabled": False}, "semantic": {"enabled": True, "ttl_s": 300, "threshold": 0.9}}}
    config["cache"] = {"embedding": {"timeout_ms": 5000}}
    g = start_gateway(tmp_path_factory.mktemp("responses-features"), responses_fleet, config)
    yield g
    g.process.stop()


def used(gw) -> int:
    r = httpx.get(f"{gw.url}/admin/tenants", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5)
    return next(t for t in r.json()["tenants"] if t["tenant"] == "budget")["usage"]["tenant budget"]["token_budget"]["used"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_tenants_tokens_are_the_answers_input_and_output_tokens(gw, model, stream):
    client = gw.client(BUDGET_KEY)
    before = used(gw)
    if stream:
        r = list(client.responses.create(model=model, input="count my tokens please", stream=True))[-1].response
    else:
        r = client.responses.create(model=model, input="count my tokens please")
    spent = r.usage.input_tokens + r.usage.output_tokens
    assert wait_until(lambda: used(gw) - before == spent, 5), (used(gw) - before, spent)


@pytest.mark.parametrize("model", MODELS)
def test_server_timing_and_routing_headers(gw, model):
    raw = gw.client().responses.with_raw_response.create(model=model, input="hi")
    assert raw.headers["x-slipstream-backend"] in ("native", "chat") and raw.headers["x-request-id"]
    assert re.search(r"\bgateway;dur=[\d.]+", raw.headers["server-timing"])
    with gw.client().responses.with_streaming_response.create(model=model, input="hi", stream=True) as r:
        assert "server-timing" in r.headers and r.headers["content-type"].startswith("text/event-stream")
        r.read()


def test_genai_metrics_count_responses_as_chat_operations_with_their_tokens(gw):
    gw.client().responses.create(model="translated", input="metrics please")
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    line = re.search(r'gen_ai_client_token_usage_sum\{gen_ai_operation_name="chat",gen_ai_request_model="translated",'
                     r'gen_ai_token_type="input",slipstream_backend="chat"\} ([\d.e+]+)', text)
    assert line and float(line.group(1)) > 0


def test_the_deadline_header_bounds_a_responses_call(gw, responses_fleet):
    port = responses_fleet.ports["flaky"]
    set_faults(port, hang_rate=1.0)
    try:
        with pytest.raises(openai.APIStatusError) as err:
            gw.client().responses.create(model="flaky", input="x", extra_headers={"x-slipstream-timeout-ms": "300"})
        assert err.value.status_code == 504 and err.value.code in ("deadline_exceeded", "upstream_timeout")
    finally:
        set_faults(port)


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_native_backend_falls_back_to_a_translated_model(gw, responses_fleet, stream):
    port = responses_fleet.ports["flaky"]
    set_faults(port, error_rate=1.0)
    try:
        if stream:
            with gw.client().responses.with_streaming_response.create(model="falls", input="hi", stream=True) as r:
                headers, body = r.headers, r.read()
            assert b"response.completed" in body
        else:
            raw = gw.client().responses.with_raw_response.create(model="falls", input="hi")
            headers = raw.headers
            assert raw.parse().status == "completed"
        assert headers["x-slipstream-fallback"].startswith("translated") and headers["x-slipstream-backend"] == "chat"
    finally:
        set_faults(port)


def test_the_semantic_cache_serves_the_same_last_user_turn(gw):
    question = "How do I reset the password of my router model zx81?"
    first = gw.client().responses.with_raw_response.create(model="semantic", input=question, temperature=0)
    assert first.headers["x-slipstream-cache"] == "miss"
    stored = first.parse()

    # The entry is written in the background: wait until it is stored.
    r = httpx.post(f"{gw.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    assert r.status_code == 200, r.text
    hit = gw.client().responses.with_raw_response.create(
        model="semantic", input="Please, how can I reset the password of my Router model zx81?", temperature=0)
    assert hit.headers["x-slipstream-cache"] == "semantic-hit"
    assert hit.parse().output_text == stored.output_text and hit.parse().usage.input_tokens == 0
    assert hit.parse().id != stored.id
