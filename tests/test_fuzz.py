"""Bounded fuzzing of the real gateway: odd bodies, headers and routes never get a 500, and every error
is in its API's shape (OpenAI's; Anthropic's on /v1/messages). Hypothesis drives a fixed number of examples against the session's gateway process.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ACME_KEY, GLOBEX_KEY

# Each example is one HTTP call; the whole test stays within a few seconds' worth of calls.
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)
parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", "x"])},
                                       optional={"text": json_values, "image_url": json_values}), max_size=3)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool"]) | json_values},
                                          optional={"content": st.text(max_size=40) | parts | json_values,
                                                    "name": json_values, "tool_calls": json_values}), max_size=3) | json_values
PARAMS = ["stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "seed",
          "stop", "logprobs", "tools", "response_format", "ignore_eos", "user", "metadata"]


@st.composite
def bodies(draw):
    body = {"model": draw(st.sampled_from(["chat", "embed", "tgi", "slow", "nope", "", "ché", "模型"]) | json_values)}
    endpoint = draw(st.sampled_from(["chat/completions", "completions", "embeddings"]))
    if endpoint == "chat/completions" or draw(st.booleans()):
        body["messages"] = draw(messages)
    if endpoint != "chat/completions" or draw(st.booleans()):
        body["prompt" if endpoint == "completions" else "input"] = draw(
            st.text(max_size=30) | st.lists(st.text(max_size=5) | st.integers(0, 50), max_size=3) | json_values)
    for name in draw(st.lists(st.sampled_from(PARAMS), max_size=4, unique=True)):
        small = st.integers(-3, 8) | st.booleans() | st.none()
        body[name] = draw(small | json_values if name in ("max_tokens", "n", "max_completion_tokens") else json_values)
    if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 8:
        body["max_tokens"] = 8  # the simulator would generate them all
    body.pop("max_completion_tokens", None) if isinstance(body.get("max_completion_tokens"), int) else None
    if isinstance(body.get("n"), int) and body["n"] > 3:
        body["n"] = 3
    return endpoint, body


r_parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal", "x"])},
                                         optional={"text": json_values, "image_url": json_values, "refusal": json_values}),
                   max_size=3)
r_items = st.lists(st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "item_reference"]) | json_values,
    "role": st.sampled_from(["user", "system", "developer", "assistant", "tool"]) | json_values,
    "content": st.text(max_size=30) | r_parts | json_values, "call_id": st.text(max_size=8) | json_values,
    "name": st.text(max_size=8) | json_values, "arguments": st.text(max_size=8) | json_values,
    "output": st.text(max_size=8) | r_parts | json_values}), max_size=3)
R_PARAMS = ["stream", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "text",
            "reasoning", "metadata", "store", "previous_response_id", "truncation", "parallel_tool_calls", "include",
            "background", "user", "prompt"]


@st.composite
def responses_bodies(draw):
    """Responses bodies, to a backend that speaks Responses (chat: passthrough) and a chat-only one (tgi)."""
    body = {"model": draw(st.sampled_from(["chat", "tgi", "nope", ""]) | json_values)}
    if draw(st.integers(0, 9)):
        body["input"] = draw(st.text(max_size=30) | r_items | json_values)
    for name in draw(st.lists(st.sampled_from(R_PARAMS), max_size=4, unique=True)):
        if name == "max_output_tokens":
            body[name] = draw(st.integers(-3, 8) | json_values)
        elif name == "tools":
            body[name] = draw(st.lists(st.fixed_dictionaries({"type": st.sampled_from(["function", "web_search"]) | json_values},
                                                             optional={"name": json_values, "parameters": json_values}),
                                       max_size=2) | json_values)
        elif name == "stream":
            body[name] = draw(st.booleans() | json_values)
        else:
            body[name] = draw(json_values)
    return body


m_blocks = st.lists(st.fixed_dictionaries({"type": st.sampled_from(
    ["text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "document", "x"]) | json_values},
    optional={"text": st.text(max_size=20) | json_values, "source": json_values, "id": st.text(max_size=6) | json_values,
              "name": st.text(max_size=6) | json_values, "input": json_values, "tool_use_id": json_values,
              "content": st.text(max_size=10) | json_values, "thinking": json_values, "signature": json_values,
              "cache_control": json_values}), max_size=3)
m_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]) | json_values},
                                            optional={"content": st.text(max_size=30) | m_blocks | json_values}),
                      max_size=3) | json_values
M_PARAMS = ["stream", "system", "stop_sequences", "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking",
            "metadata", "service_tier", "mcp_servers", "container"]


@st.composite
def messages_bodies(draw):
    """Messages bodies, to a backend that speaks Messages (chat: passthrough) and a chat-only one (tgi: translated)."""
    body = {"model": draw(st.sampled_from(["chat", "tgi", "nope", ""]) | json_values)}
    if draw(st.integers(0, 9)):
        body["max_tokens"] = draw(st.integers(-3, 8) | json_values)
    if draw(st.integers(0, 9)):
        body["messages"] = draw(m_messages)
    for name in draw(st.lists(st.sampled_from(M_PARAMS), max_size=4, unique=True)):
        if name == "tools":
            body[name] = draw(st.lists(st.fixed_dictionaries({}, optional={
                "name": st.text(max_size=6) | json_values, "type": st.sampled_from(["custom", "web_search_20250305"]),
                "input_schema": json_values, "description": json_values}), max_size=2) | json_values)
        elif name == "tool_choice":
            body[name] = draw(st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "tool", "none", "x"])},
                                                    optional={"name": json_values}) | json_values)
        elif name == "thinking":
            body[name] = draw(st.fixed_dictionaries({"type": st.sampled_from(["enabled", "disabled", "x"])},
                                                    optional={"budget_tokens": json_values}) | json_values)
        elif name == "stream":
            body[name] = draw(st.booleans() | json_values)
        elif name == "system":
            body[name] = draw(st.text(max_size=20) | m_blocks | json_values)
        else:
            body[name] = draw(json_values)
    return body


header_values = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=30)
headers = st.dictionaries(st.sampled_from(["x-slipstream-timeout-ms", "x-slipstream-cache-ttl", "cache-control",
                                           "traceparent", "x-slipstream-priority", "x-slipstream-server-timing",
                                           "x-slipstream-cache-threshold", "content-type"]), header_values, max_size=3)


def _check_error(r: httpx.Response) -> None:
    assert r.status_code != 500 and r.status_code < 600, r.text[:300]
    if r.status_code >= 400:
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"]


@pytest.fixture(scope="module")
def http(gateway):
    with httpx.Client(base_url=gateway.url, timeout=20) as client:
        yield client


@FUZZ
@given(case=bodies(), extra=headers, key=st.sampled_from([ACME_KEY, GLOBEX_KEY]))
def test_fuzzed_bodies_and_headers_never_500(http, case, extra, key):
    endpoint, body = case
    r = http.post(f"/v1/{endpoint}", content=orjson.dumps(body),
                  headers={"authorization": f"Bearer {key}", "content-type": "application/json",
                           "x-slipstream-timeout-ms": "3000", **extra})
    _check_error(r)
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("text/event-stream"):
        last = [e for e in r.text.split("\n\n") if e.startswith("data: ")][-1]
        assert last == "data: [DONE]" or last.startswith('data: {"error"'), last


@FUZZ
@given(body=responses_bodies(), key=st.sampled_from([ACME_KEY, GLOBEX_KEY]))
def test_fuzzed_responses_bodies_never_500(http, body, key):
    r = http.post("/v1/responses", content=orjson.dumps(body),
                  headers={"authorization": f"Bearer {key}", "content-type": "application/json",
                           "x-slipstream-timeout-ms": "3000"})
    _check_error(r)
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("text/event-stream"):
        last = [e for e in r.text.split("\n\n") if e.strip()][-1]
        assert any(f'"type":"{t}"' in last for t in ("response.completed", "response.incomplete", "error")), last


def _check_anthropic_error(r: httpx.Response) -> None:
    assert r.status_code != 500 and r.status_code < 600, r.text[:300]
    if r.status_code >= 400:
        body = r.json()
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@FUZZ
@given(body=messages_bodies(), endpoint=st.sampled_from(["messages", "messages", "messages/count_tokens"]),
       auth=st.sampled_from(["x-api-key", "authorization"]), key=st.sampled_from([ACME_KEY, GLOBEX_KEY]))
def test_fuzzed_messages_bodies_never_500(http, body, endpoint, auth, key):
    credentials = {"x-api-key": key} if auth == "x-api-key" else {"authorization": f"Bearer {key}"}
    r = http.post(f"/v1/{endpoint}", content=orjson.dumps(body),
                  headers={**credentials, "content-type": "application/json", "anthropic-version": "2023-06-01",
                           "x-slipstream-timeout-ms": "3000"})
    _check_anthropic_error(r)
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("text/event-stream"):
        last = [e for e in r.text.split("\n\n") if e.strip()][-1]
        assert last.startswith(("event: message_stop", "event: error")), last


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode),
       endpoint=st.sampled_from(["messages", "messages/count_tokens"]))
def test_fuzzed_raw_bytes_to_messages_never_500(http, raw, endpoint):
    r = http.post(f"/v1/{endpoint}", content=raw, headers={"x-api-key": ACME_KEY})
    _check_anthropic_error(r)
    assert r.status_code >= 400


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode),
       endpoint=st.sampled_from(["chat/completions", "completions", "embeddings", "responses"]))
def test_fuzzed_raw_bytes_never_500(http, raw, endpoint):
    r = http.post(f"/v1/{endpoint}", content=raw, headers={"authorization": f"Bearer {ACME_KEY}"})
    _check_error(r)
    assert r.status_code >= 400


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
       path=st.sampled_from(["/v1/models", "/v1/models/chat", "/v1/chat/completions", "/metrics", "/readyz",
                             "/v1/responses", "/v1/responses/resp_1", "/v1/responses/resp_1/input_items",
                             "/healthz", "/admin/backends", "/admin/route/explain", "/admin/reload", "/v1", "/"])
       | st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="#?%"), max_size=30).map(lambda p: "/" + p),
       auth=st.sampled_from([None, f"Bearer {ACME_KEY}", "Bearer nope", "Basic x", ""]))
def test_fuzzed_routes_never_500(http, method, path, auth):
    r = http.request(method, path, headers={"authorization": auth} if auth is not None else {})
    assert r.status_code != 500 and r.status_code < 600, (method, path, r.text[:200])
    if r.status_code >= 400 and method != "HEAD":
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
