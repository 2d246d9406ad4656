"""Limits hold across three real gateway processes sharing one real Redis, and clients read them.

Every gateway here is a real `python -m app serve` process in front of the simulator fleet; Redis is
a real redis-server. Each tenant below is used by one test only, so tests do not share counters.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import openai
import pytest

from app.admission.auth import hash_key
from tests.conftest import ADMIN_KEY, gateway_config, start_gateway
from tests.support import wait_until

# One hour "minutes": refill during a test is then negligible (N per window means N per test).
WINDOW_S = 3600
TENANTS = {
    "burst": {"limits": {"requests_per_minute": 30}},
    "tok": {"limits": {"tokens_per_minute": 2000}},
    "long": {"limits": {"tokens_per_minute": 100}},
    "conc": {"limits": {"concurrent_requests": 1}},
    "budget": {"limits": {"token_budget": {"tokens": 150, "period": "day"}}},
    "aliased": {"limits": {"requests_per_minute": 100, "models": {"tgi": {"requests_per_minute": 1}}}},
}


def key(tenant: str) -> str:
    return f"sk-test-{tenant}-0123456789"


def limits_config(fleet, port: int, redis_url: str | None, prefix: str, **extra) -> dict:
    config = gateway_config(fleet, port)
    config["auth"]["clients"] += [{"tenant": t, "key_sha256": hash_key(key(t))} for t in TENANTS]
    # A key with limits of its own under an unlimited tenant.
    config["auth"]["clients"].append({"tenant": "keyed", "key_sha256": hash_key(key("keyed")),
                                      "limits": {"requests_per_minute": 2}})
    config["limits"] = {
        "store": "redis" if redis_url else "memory", "redis_url": redis_url, "key_prefix": prefix,
        # A generous timeout: these tests are about atomicity, not about a loaded box failing open.
        "timeout_ms": 1000, "window_s": WINDOW_S, "tenants": TENANTS, **extra,
    }
    return config


@pytest.fixture(scope="module")
def replicas(fleet, redis_server, tmp_path_factory):
    prefix = f"rl-{uuid.uuid4().hex[:8]}:"
    gws = []
    for i in range(3):
        tmp = tmp_path_factory.mktemp(f"replica{i}")
        gws.append(start_gateway(tmp, fleet, limits_config(fleet, 0, redis_server.url, prefix)))
    yield gws
    for gw in gws:
        gw.process.stop()


def chat(model: str = "chat", **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8, **extra}


async def _post_many(urls: list[str], api_key: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {api_key}"}) as client:
        return await asyncio.gather(*(client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=chat())
                                      for i in range(n)))


def test_a_request_limit_holds_across_three_replicas(replicas):
    responses = asyncio.run(_post_many([gw.url for gw in replicas], key("burst"), 60))
    admitted = sum(1 for r in responses if r.status_code == 200)
    limited = [r for r in responses if r.status_code == 429]
    assert 29 <= admitted <= 31, [r.status_code for r in responses]
    assert admitted + len(limited) == 60
    err = limited[0].json()["error"]
    assert err["code"] == "rate_limit_exceeded" and err["type"] == "requests" and "tenant burst" in err["message"]
    assert limited[0].headers["x-ratelimit-limit-requests"] == "30"
    assert limited[0].headers["x-ratelimit-remaining-requests"] == "0"
    assert int(limited[0].headers["retry-after"]) >= 1


def _stream(gw, tenant: str, **extra):
    """One streamed chat call; returns (response headers, usage, finish reasons, event count)."""
    client = gw.client(key(tenant))
    raw = client.chat.completions.with_raw_response.create(
        **chat(stream=True, stream_options={"include_usage": True}, **extra))
    usage, reasons, events = None, [], 0
    for chunk in raw.parse():
        events += 1
        if chunk.usage is not None:
            usage = chunk.usage
        reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
    return raw.headers, usage, reasons, events


def _tenant_usage(gw, tenant: str) -> dict:
    r = httpx.get(f"{gw.url}/admin/tenants", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5)
    r.raise_for_status()
    return next(t for t in r.json()["tenants"] if t["tenant"] == tenant)["usage"][f"tenant {tenant}"]


def test_streamed_tokens_are_reserved_at_admission_then_reconciled(replicas):
    gw = replicas[0]
    headers, usage, reasons, _ = _stream(gw, "tok", max_tokens=50)
    # Reserved: the prompt estimate (11 characters: 2 tokens) plus max_tokens.
    assert headers["x-ratelimit-remaining-tokens"] == str(2000 - 2 - 50)
    assert reasons and usage is not None
    used = usage.prompt_tokens + usage.completion_tokens
    assert used != 52  # the simulator's count differs from the estimate, so reconciling shows
    # The reservation is corrected to what the backend reported, on another replica's view too.
    assert wait_until(lambda: abs(_tenant_usage(replicas[1], "tok")["tokens"]["remaining"] - (2000 - used)) <= 1, 5)


def test_a_stream_is_never_cut_by_a_limit_and_its_overrun_is_charged(replicas):
    gw = replicas[0]
    # 2 + 60 tokens reserved of 100: the first stream is admitted; a second one while it runs is not.
    client = gw.client(key("long"))
    stream = client.chat.completions.create(**chat(max_tokens=60, stream=True, extra_body={"ignore_eos": True},
                                                    stream_options={"include_usage": True}))
    first = next(iter(stream))
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(**chat(max_tokens=60))
    assert exc.value.body["type"] == "tokens"
    chunks = [first, *stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage.completion_tokens == 60 and len(text.split()) == 60  # the whole answer arrived
    assert wait_until(lambda: abs(_tenant_usage(gw, "long")["tokens"]["remaining"]
                                  - (100 - usage.prompt_tokens - 60)) <= 1, 5)


def test_openai_sdk_reads_the_429_and_its_headers(replicas):
    client = replicas[1].client(key("keyed"))
    for _ in range(2):
        client.chat.completions.create(**chat())
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(**chat())
    err = exc.value
    assert err.status_code == 429 and err.code == "rate_limit_exceeded" and err.type == "requests"
    assert "key " in err.message  # the key's own limit refused it (named by a digest prefix, not the key)
    assert key("keyed") not in err.message
    h = err.response.headers
    assert h["x-ratelimit-limit-requests"] == "2" and h["x-ratelimit-remaining-requests"] == "0"
    assert h["x-ratelimit-reset-requests"].endswith("s")
    # One request refills in 30 min here: longer than the SDK would sleep, so it is told not to retry.
    assert 1700 < int(h["retry-after"]) <= 1800 and h["x-should-retry"] == "false"


def test_openai_sdk_retries_after_the_wait_it_is_told(replicas):
    import threading

    gw = replicas[2]
    hold = gw.client(key("conc")).chat.completions.create(
        **chat(model="slow", max_tokens=60, stream=True))  # holds the tenant's one slot for ~2.4 s
    next(iter(hold))
    # The slot frees at 0.5 s; a concurrency refusal says "retry in 1 s": the SDK waits that long and
    # its retry gets the answer.
    threading.Timer(0.5, hold.close).start()
    started = time.monotonic()
    sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key("conc"), max_retries=2)
    answer = sdk.chat.completions.with_raw_response.create(**chat())
    waited = time.monotonic() - started
    assert answer.http_response.status_code == 200
    assert answer.retries_taken >= 1 and 0.9 <= waited < 5


def test_a_token_budget_refuses_with_insufficient_quota(replicas):
    client = replicas[0].client(key("budget"))
    client.chat.completions.create(**chat(max_tokens=100, extra_body={"ignore_eos": True}))
    # Settled to what was used (over 100 of 150), a second such call no longer fits today.
    assert wait_until(lambda: _tenant_usage(replicas[0], "budget")["token_budget"]["used"] > 100, 5)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(**chat(max_tokens=100))
    assert exc.value.code == "insufficient_quota" and "daily token budget" in exc.value.message
    assert exc.value.response.headers["x-should-retry"] == "false"


def test_an_alias_override_has_its_own_counter(replicas):
    client = replicas[0].client(key("aliased"))
    client.chat.completions.create(**chat(model="tgi"))
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(**chat(model="tgi"))
    assert "model tgi" in exc.value.message
    client.chat.completions.create(**chat())  # other aliases keep the tenant-wide limit


def test_metrics_count_admitted_and_limited_by_tenant(replicas):
    text = "".join(httpx.get(f"{gw.url}/metrics", timeout=5).text for gw in replicas)
    assert 'slipstream_admission_requests_total{priority="interactive",result="admitted",tenant="burst"}' in text
    assert 'slipstream_rate_limited_total{limit="requests",tenant="burst"}' in text


def test_unlimited_tenants_see_no_ratelimit_headers(replicas):
    r = httpx.post(f"{replicas[0].url}/v1/chat/completions", json=chat(),
                   headers={"authorization": "Bearer sk-test-acme-0123456789"}, timeout=10)
    assert r.status_code == 200 and "x-ratelimit-limit-requests" not in r.headers


# --- Redis going away mid-run ---------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path):
    from tests.support import RedisServer

    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def test_redis_killed_mid_run_follows_the_policy(fleet, own_redis, tmp_path):
    prefix = "rl-kill:"
    (tmp_path / "open").mkdir()
    (tmp_path / "closed").mkdir()
    fail_open = start_gateway(tmp_path / "open", fleet, limits_config(fleet, 0, own_redis.url, prefix))
    fail_closed = start_gateway(tmp_path / "closed", fleet,
                                limits_config(fleet, 0, own_redis.url, prefix, on_redis_error="closed"))
    try:
        headers = {"authorization": f"Bearer {key('keyed')}"}  # 2 requests per window, shared

        def post(gw):
            return httpx.post(f"{gw.url}/v1/chat/completions", json=chat(), headers=headers, timeout=10)

        assert [post(fail_open).status_code for _ in range(3)] == [200, 200, 429]
        assert post(fail_closed).status_code == 429  # the same counter
        own_redis.stop()
        during = [post(fail_open).status_code for _ in range(20)]
        closed = post(fail_closed)
        assert during == [200] * 20  # open: admitted while the limiter is gone
        assert closed.status_code == 503 and closed.json()["error"]["code"] == "rate_limiter_unavailable"
        assert closed.headers["retry-after"] == "1"
        metrics = httpx.get(f"{fail_open.url}/metrics", timeout=5).text
        assert 'slipstream_limiter_errors_total{policy="open"}' in metrics
        log = fail_open.process.log()
        assert 1 <= log.count("rate limiter store unavailable") <= 2  # rate-limited, not one per request
        # Back: the limits apply again (the counters were in the Redis that went away, so they start full).
        own_redis.start()  # on the same port
        assert wait_until(lambda: post(fail_closed).status_code == 200, 5)
        # The open gateway may still be inside its short skip window (or reconnecting) for a call or
        # two, admitting them uncounted; once it asks Redis again, the shared counter runs out.
        assert wait_until(lambda: post(fail_open).status_code == 429, 5)
    finally:
        fail_open.process.stop()
        fail_closed.process.stop()


def test_hot_reload_applies_new_limits_and_keeps_the_counts(fleet, tmp_path):
    from tests.support import write_yaml

    config = limits_config(fleet, 0, None, "rl-reload:")  # the in-process limiter (no Redis)
    gw = start_gateway(tmp_path, fleet, config)
    try:
        headers = {"authorization": f"Bearer {key('burst')}"}

        def post():
            return httpx.post(f"{gw.url}/v1/chat/completions", json=chat(), headers=headers, timeout=10)

        assert all(post().status_code == 200 for _ in range(5))
        config["limits"]["tenants"]["burst"] = {"limits": {"requests_per_minute": 6}}
        write_yaml(tmp_path / "gateway.yaml", config)
        r = httpx.post(f"{gw.url}/admin/reload", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
        assert r.json()["reloaded"] is True
        # 5 of the 6 were used before the reload: one more fits.
        assert [post().status_code for _ in range(2)] == [200, 429]
    finally:
        gw.process.stop()
