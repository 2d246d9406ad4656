"""How a cache hit counts against a tenant's limits (a real gateway process in front of the simulator).

An exact hit takes no backend, concurrency slot or tokens, so it is looked up before admission and
served even when the tenant is at its request limit, without using up any of it. A semantic lookup
runs after admission: its embedding costs CPU that the limits protect.
"""

from __future__ import annotations

import openai
import pytest

from app.admission.auth import hash_key
from tests.cache.test_cache import settle
from tests.conftest import gateway_config, start_gateway

KEY = "sk-test-capped-0123456789"


@pytest.fixture(scope="module")
def capped(fleet, tmp_path_factory):
    config = gateway_config(fleet, 0)
    config["auth"]["clients"].append({"tenant": "capped", "key_sha256": hash_key(KEY)})
    # An hour-long "minute": two requests per test, with no refill during it.
    config["limits"] = {"window_s": 3600, "tenants": {"capped": {"limits": {"requests_per_minute": 2}}}}
    config["models"]["exact-only"] = {"backends": ["fast"], "cache": {"exact": {"enabled": True}}}
    gw = start_gateway(tmp_path_factory.mktemp("capped"), fleet, config)
    yield gw
    gw.process.stop()


def ask(gw, content: str):
    raw = gw.client(KEY).chat.completions.with_raw_response.create(
        model="exact-only", messages=[{"role": "user", "content": content}], temperature=0, max_tokens=16)
    return raw.headers, raw.parse()


def test_an_exact_hit_is_served_at_the_request_limit_and_uses_none_of_it(capped):
    h1, r1 = ask(capped, "What does a gateway do?")
    assert h1["x-slipstream-cache"] == "miss"
    settle(capped)  # the write happens after the response: wait until it is in the store
    for _ in range(3):  # hits take nothing from the limit: the second miss below is still admitted
        h, r = ask(capped, "What does a gateway do?")
        assert h["x-slipstream-cache"] == "hit" and r.choices[0].message.content == r1.choices[0].message.content
    assert ask(capped, "What does a router do?")[0]["x-slipstream-cache"] == "miss"
    with pytest.raises(openai.RateLimitError):  # the limit itself still holds for what is not cached
        ask(capped, "What does a load balancer do?")
    h, _ = ask(capped, "What does a gateway do?")  # over the limit, the cached answer is still served
    assert h["x-slipstream-cache"] == "hit"
