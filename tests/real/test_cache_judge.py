"""The semantic cache's judge read as a probability, on a real llama.cpp server (SmolLM2-135M).

The judge's yes-probability comes from the first token's log-probabilities, which reach the judge only
if the gateway keeps them when it rebuilds a non-streamed answer from llama-server's stream. SmolLM2 is
no usable judge (README, "Semantic cache quality"); here it only has to give a ratio, and the gateway
must act on that ratio: serve above the threshold, refuse below it.
"""

from __future__ import annotations

import httpx
import pytest

from app.admission.auth import hash_key
from app.cache.judge import judge_body, yes_probability
from app.config import JudgeConfig
from tests.real.conftest import ADMIN, KEY
from tests.support import Process, free_port, write_yaml

FIRST = "How do I reset my home wifi router?"
REWORDED = "What is the way to reset my home wifi router?"
AUTH = {"authorization": f"Bearer {KEY}"}


def _policy(min_yes: float) -> dict:
    # The guard is off, so the judge alone decides each candidate at similarity >= 0.8; answers cut by
    # max_tokens are stored too, so the first question's short answer is a cache entry.
    return {"exact": {"enabled": True}, "finish_reasons": ["stop", "length"],
            "semantic": {"enabled": True, "threshold": 0.8, "guard": False,
                         "judge": {"alias": "judge", "timeout_ms": 60_000, "min_yes_probability": min_yes}}}


@pytest.fixture(scope="module")
def judged(llama_servers, tmp_path_factory):
    """A gateway whose aliases `lenient` and `strict` are judged by SmolLM2 at thresholds just under and
    just over the ratio the same server gives the module's pair when asked directly."""
    a, _ = llama_servers
    asked = judge_body(JudgeConfig(alias="smol-a", min_yes_probability=0.5), FIRST, REWORDED)
    ratio = yes_probability(httpx.post(f"{a.url}/chat/completions", json=asked, timeout=60).json())
    assert ratio is not None and 0.05 < ratio < 0.95, ratio
    tmp = tmp_path_factory.mktemp("judged-gateway")
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "clients": [{"tenant": "t", "key_sha256": hash_key(KEY)}], "admin_keys": [hash_key(ADMIN)]},
        "backends": {"a": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp"}},
        "cache": {"store": "memory", "embedding": {"timeout_ms": 5000}},
        "models": {
            "judge": {"backends": ["a"], "retry": {"max_attempts": 1}},
            # Halfway to 0 and to 1: far beyond the few hundredths a batched server's ratio moves by.
            "lenient": {"backends": ["a"], "cache": _policy(ratio / 2)},
            "strict": {"backends": ["a"], "cache": _policy((1 + ratio) / 2)},
        },
    }
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gateway.yaml", config))], tmp / "gateway.log")
    proc.wait_listening(port)
    yield f"http://127.0.0.1:{port}"
    proc.stop()


def _ask(url: str, model: str, question: str) -> httpx.Response:
    r = httpx.post(f"{url}/v1/chat/completions", headers=AUTH, timeout=120,
                   json={"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 8,
                         "temperature": 0})
    assert r.status_code == 200, r.text
    return r


def _cached_then_reworded(url: str, model: str) -> httpx.Response:
    assert _ask(url, model, FIRST).headers["x-slipstream-cache"] == "miss"
    flushed = httpx.post(f"{url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert flushed.status_code == 200, flushed.text
    return _ask(url, model, REWORDED)


def _counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(f"{name} ")))


def test_a_ratio_over_the_threshold_serves_the_hit_and_one_under_refuses_it(judged):
    served = _cached_then_reworded(judged, "lenient")
    assert (served.headers["x-slipstream-cache"], served.headers["x-slipstream-cache-verifier"]) == ("semantic-hit", "judge")
    assert _counter(judged, "slipstream_cache_judge_failures_total") == 0
    refused = _cached_then_reworded(judged, "strict")
    assert refused.headers["x-slipstream-cache"] == "miss"
    # A refusal, not a failure: the judge answered, with a ratio under the threshold.
    assert _counter(judged, "slipstream_cache_judge_rejections_total") == 1
    assert _counter(judged, "slipstream_cache_judge_failures_total") == 0
