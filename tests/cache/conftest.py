"""Fixtures: gateways with the cache on, one per store kind (the Redis server is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import gateway_config, start_gateway

CACHE_POLICY = {
    "exact": {"enabled": True, "ttl_s": 300},
    "semantic": {"enabled": True, "ttl_s": 300, "threshold": 0.9},
    "stale_s": 60,
}


def cache_config(fleet, store: str, redis_url: str | None) -> dict:
    config = gateway_config(fleet, 0)
    # Generous embedding timeout: these tests check behaviour on a shared 2-core machine, not speed.
    config["cache"] = {"store": store, "redis_url": redis_url, "timeout_ms": 200, "embedding": {"timeout_ms": 5000}}
    config["models"]["cached"] = {"backends": ["fast"], "cache": CACHE_POLICY}
    config["models"]["cached-flaky"] = {"backends": ["flaky"], "retry": {"max_attempts": 1}, "cache": CACHE_POLICY}
    config["models"]["exact-only"] = {"backends": ["fast"], "cache": {"exact": {"enabled": True}}}
    config["auth"]["clients"] += [
        {"tenant": f"tenant{i}", "key_sha256": __import__("hashlib").sha256(f"sk-tenant-{i}".encode()).hexdigest()}
        for i in range(8)
    ]
    return config


@pytest.fixture(scope="module", params=["memory", "redis"])
def cached_gateway(request, fleet, tmp_path_factory):
    """The same tests run against the in-process store and the Redis store."""
    url = None
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
    gw = start_gateway(tmp_path_factory.mktemp(f"cache-{request.param}"), fleet, cache_config(fleet, request.param, url))
    gw.store = request.param
    yield gw
    gw.process.stop()
