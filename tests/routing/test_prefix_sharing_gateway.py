"""routing.share_prefixes end to end: real gateway replicas, a real Redis, simulated backends with prompt caches.

A replica that shares hears which backend computed a prompt another replica placed, so its own index (and
/admin/route/explain) holds that prefix there; a replica that does not share knows only its own placements."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ADMIN_KEY, start_gateway
from tests.support import set_faults, start_simulated, wait_until

NAMES = ("a", "b")
SIM = dict(slots=4, prefill_tokens_per_s=2000, tpot_ms=2, prefix_cache_tokens=65536, report="llamacpp",
           output=dict(median=4, sigma=0, max=4))
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    ports, proc = start_simulated(tmp_path_factory.mktemp("sharefleet"), {n: dict(model="m", **SIM) for n in NAMES}, seed=7)
    yield ports
    proc.stop()


def replica(tmp_path_factory, fleet, redis_url: str | None):
    from app.admission.auth import hash_key

    config = {
        "auth": {"mode": "open", "admin_keys": [hash_key(ADMIN_KEY)]},
        "backends": {n: {"base_url": f"http://127.0.0.1:{p}/v1", "model": "m", "flavor": "llamacpp"}
                     for n, p in fleet.items()},
        "models": {"fleet": {"backends": list(NAMES), "retry": {"max_attempts": 1}}},
        **({"routing": {"share_prefixes": True, "redis_url": redis_url, "channel": "test:share"}} if redis_url else {}),
    }
    return start_gateway(tmp_path_factory.mktemp("replica"), None, config)


@pytest.fixture(scope="module")
def replicas(fleet, redis_server, tmp_path_factory):
    """Two sharing replicas and one that does not share, on the same backends."""
    gws = [replica(tmp_path_factory, fleet, redis_server.url), replica(tmp_path_factory, fleet, redis_server.url),
           replica(tmp_path_factory, fleet, None)]
    yield gws
    for gw in gws:
        gw.process.stop()


def body(sys_prompt: str, question: str) -> dict:
    return {"model": "fleet", "max_tokens": 4,
            "messages": [{"role": "system", "content": sys_prompt}, {"role": "user", "content": question}]}


def system(tag: str) -> str:
    return f"[{tag}] You answer for the {tag} desk and follow its policy in every reply. " * 25


def matched(gw, payload: dict) -> dict[str, int]:
    r = httpx.post(f"{gw.url}/admin/route/explain", json=payload, headers=ADMIN, timeout=10)
    r.raise_for_status()
    return {c["backend"]: c["prefix"]["matched_blocks"] for c in r.json()["chain"][0]["candidates"]}


def sharing(gw) -> dict | None:
    r = httpx.get(f"{gw.url}/admin/backends", headers=ADMIN, timeout=10)
    r.raise_for_status()
    return r.json()["prefix_sharing"]


def test_a_replica_holds_warm_the_prefix_another_replica_placed(replicas):
    one, two, alone = replicas
    sys_prompt = system("billing")
    r = httpx.post(f"{one.url}/v1/chat/completions", json=body(sys_prompt, "first question?"), timeout=30)
    r.raise_for_status()
    warm = r.headers["x-slipstream-backend"]
    cold = next(n for n in NAMES if n != warm)
    later = body(sys_prompt, "second question?")
    assert wait_until(lambda: matched(two, later)[warm] > 10, timeout=5), matched(two, later)
    assert matched(two, later)[cold] == 0
    assert matched(alone, later) == {"a": 0, "b": 0}  # no feed: it knows only what it placed itself
    assert sharing(one)["published"] >= 1 and sharing(two)["received"] >= 1
    assert sharing(alone) is None


def test_a_request_that_failed_before_computing_its_prompt_is_not_told(replicas, fleet):
    one, two, _ = replicas
    sys_prompt = system("failing")
    for port in fleet.values():
        set_faults(port, error_rate=1.0)
    try:
        r = httpx.post(f"{one.url}/v1/chat/completions", json=body(sys_prompt, "will this fail?"), timeout=30)
        assert r.status_code >= 500
    finally:
        for port in fleet.values():
            set_faults(port)
    # A placement told after this one is heard, so by then this one would have been too.
    marker = system("marker")
    httpx.post(f"{one.url}/v1/chat/completions", json=body(marker, "after the failure"), timeout=30).raise_for_status()
    assert wait_until(lambda: max(matched(two, body(marker, "again")).values()) > 10, timeout=5)
    assert matched(two, body(sys_prompt, "and now?")) == {"a": 0, "b": 0}
