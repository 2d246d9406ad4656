"""A Redis behind a password, named by an environment variable (`redis_url_env`): the stores use it, and the URL
(its password) shows nowhere an operator or a client can read."""

from __future__ import annotations

import httpx
from redis import Redis

from tests.conftest import ACME_KEY, ADMIN_KEY, gateway_config
from tests.support import Process, RedisServer, free_port, wait_until, write_yaml

PASSWORD = "pw-s3cret-4bd1"


def test_a_password_protected_redis_named_by_an_environment_variable_serves_and_stays_out_of_sight(fleet, tmp_path):
    redis = RedisServer(tmp_path)
    redis.start()
    redis.client().config_set("requirepass", PASSWORD)
    url = f"redis://:{PASSWORD}@127.0.0.1:{redis.port}/0"
    port = free_port()
    config = gateway_config(fleet, port)
    config["cache"] = {"store": "redis", "redis_url_env": "SLIPSTREAM_TEST_REDIS_URL", "key_prefix": "envurl:"}
    config["limits"] = {"store": "redis", "redis_url_env": "SLIPSTREAM_TEST_REDIS_URL", "on_redis_error": "closed"}
    path = write_yaml(tmp_path / "gateway.yaml", config)
    proc = Process(["serve", "--config", str(path)], tmp_path / "gateway.log", env={"SLIPSTREAM_TEST_REDIS_URL": url})
    try:
        proc.wait_listening(port)
        base, key = f"http://127.0.0.1:{port}", {"authorization": f"Bearer {ACME_KEY}"}
        ask = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "temperature": 0}
        with httpx.Client(base_url=base, timeout=10) as http:
            # limits.on_redis_error is closed: a limiter that could not reach Redis would answer 503.
            assert http.post("/v1/chat/completions", json=ask, headers=key).headers["x-slipstream-cache"] == "miss"
            assert wait_until(lambda: http.post("/v1/chat/completions", json=ask, headers=key)
                              .headers["x-slipstream-cache"] == "hit", timeout=10)
            # Responses' stored turns follow the cache's Redis.
            made = http.post("/v1/responses", json={"model": "chat", "input": "hi"}, headers=key).json()
            assert http.get(f"/v1/responses/{made['id']}", headers=key).status_code == 200
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}
            seen = [http.get("/admin/backends", headers=admin).text, http.get("/admin/tenants", headers=admin).text,
                    http.post("/admin/reload", headers=admin).text, http.get("/metrics").text]
        assert any(k.startswith(b"envurl:") for k in Redis(port=redis.port, password=PASSWORD).keys("*"))
    finally:
        proc.stop()
        redis.stop()
    for text in (*seen, proc.log()):
        assert PASSWORD not in text
