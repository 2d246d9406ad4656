"""What a client key can see and grow: its own models only, and no metric series of its making."""

from __future__ import annotations

import httpx

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, GLOBEX_KEY, gateway_config, start_gateway
from tests.support import free_port

OPS_KEY = "sk-test-ops-0123456789"


def test_models_list_shows_only_the_aliases_a_key_may_use(gateway):
    limited = {m.id for m in gateway.client(key=GLOBEX_KEY).models.list()}
    everything = {m.id for m in gateway.client(key=ACME_KEY).models.list()}
    assert limited == {"chat"}
    assert {"chat", "slow", "flaky"} <= everything


def test_unknown_model_names_never_become_metric_labels(gateway):
    headers = {"authorization": f"Bearer {ACME_KEY}"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=10) as http:
        for i in range(200):
            r = http.post("/v1/chat/completions", json={"model": f"nope-{i}-x", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 404
        text = http.get("/metrics").text
    assert "nope-" not in text


def test_metrics_and_readyz_can_require_an_ops_key(fleet, tmp_path):
    port = free_port()
    config = gateway_config(fleet, port)
    config["auth"]["ops_keys"] = [hash_key(OPS_KEY)]
    gw = start_gateway(tmp_path, fleet, config)
    try:
        for path in ("/metrics", "/readyz"):
            anonymous = httpx.get(f"{gw.url}{path}", timeout=10)
            client_key = httpx.get(f"{gw.url}{path}", headers={"authorization": f"Bearer {ACME_KEY}"}, timeout=10)
            ops = httpx.get(f"{gw.url}{path}", headers={"authorization": f"Bearer {OPS_KEY}"}, timeout=10)
            assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "authentication_error"
            assert client_key.status_code == 401
            assert ops.status_code in (200, 503)
        assert httpx.get(f"{gw.url}/healthz", timeout=10).status_code == 200  # liveness stays open
    finally:
        gw.process.stop()
