"""Fixtures: a real Redis Stack server, and gateways with the cache on, one per store kind."""

from __future__ import annotations

import subprocess

import pytest
import redis

from tests.conftest import gateway_config, start_gateway
from tests.support import ROOT, free_port, wait_until

CACHE_POLICY = {
    "exact": {"enabled": True, "ttl_s": 300},
    "semantic": {"enabled": True, "ttl_s": 300, "threshold": 0.9},
    "stale_s": 60,
}


class RedisServer:
    """A redis-server process (with RediSearch) on a loopback port; can be stopped and restarted."""

    def __init__(self, tmp) -> None:
        self.port = free_port()
        self.log = tmp / f"redis-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(ROOT / "scripts" / "redis-server"), "--port", str(self.port), "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        client = redis.Redis(port=self.port)
        assert wait_until(lambda: _pings(client), timeout=10), self.log.read_text()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def _pings(client: redis.Redis) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def cache_config(fleet, store: str, redis_url: str | None) -> dict:
    config = gateway_config(fleet, 0)
    config["cache"] = {"store": store, "redis_url": redis_url, "timeout_ms": 200}
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
