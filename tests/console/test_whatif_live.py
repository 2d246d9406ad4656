"""The live what-if replays a config on a simulated fleet, reaching nothing outside the replay."""

from __future__ import annotations

from app.http.console.whatif_live import policy


def test_a_whatif_replay_reaches_no_redis_of_the_live_config():
    # The replay runs in process-local stores: no live Redis is written, and no Redis URL variable is read.
    live = {"cache": {"store": "redis", "redis_url_env": "REDIS_URL"},
            "limits": {"store": "redis", "redis_url": "redis://:pw@r:6379/1"},
            "responses": {"store": "redis", "redis_url_env": "REDIS_URL"},
            "routing": {"share_prefixes": True, "redis_url": "redis://r:6379", "channel": "live:prefixes"},
            "backends": {}, "models": {}}
    replay = policy(live, {"backends": {}})
    for section in ("cache", "limits", "responses"):
        assert replay[section]["store"] == "memory"
        assert "redis_url" not in replay[section] and "redis_url_env" not in replay[section]
    # Nor are the replay's placements told to the live replicas.
    assert replay["routing"]["share_prefixes"] is False and "redis_url" not in replay["routing"]


def test_a_whatif_replay_reaches_its_simulated_backends_directly():
    # The live backends' CA bundles and proxies are theirs: the replay's simulators are on loopback, in plain HTTP.
    live = {"backends": {"a": {"base_url": "https://vllm.corp/v1", "model": "m", "ca_bundle": "/etc/ca.pem",
                               "proxy_env": "PROXY"}}, "models": {"chat": {"backends": ["a"]}}}
    replay = policy(live, {"backends": {"a": {"model": "m"}}})
    assert replay["backends"]["a"]["base_url"].startswith("http://127.0.0.1:")
    assert not {"ca_bundle", "proxy", "proxy_env"} & set(replay["backends"]["a"])
