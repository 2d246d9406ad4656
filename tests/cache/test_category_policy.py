"""Per-category TTLs and thresholds through the gateway, against both stores, and their config errors.

The volatile TTL is 3 s here (300 s by default), so expiry is seen within a test, not after minutes.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import httpx
import orjson
import pytest

from app.cache.service import Cache
from app.cache.store import MemoryStore
from app.config import CacheConfig, CachePolicy, ConfigError, load_config
from app.protocols import CHAT, COMPLETIONS, MESSAGES, RESPONSES
from tests.cache.conftest import cache_config
from tests.cache.test_cache import ask, settle
from tests.conftest import start_gateway
from tests.support import sim_stats

VOLATILE_TTL_S = 3.0
SEMANTIC = {"enabled": True, "ttl_s": 300, "threshold": 0.9}
CATEGORIES = {"volatile": {"ttl_s": VOLATILE_TTL_S}}


@pytest.fixture(scope="module", params=["memory", "redis"])
def gw(request, fleet, tmp_path_factory):
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else None
    config = cache_config(fleet, request.param, url)
    exact = {"enabled": True, "ttl_s": 300}
    config["models"].update({
        "categorised": {"backends": ["fast"], "cache": {"exact": exact, "semantic": SEMANTIC, "categories": CATEGORIES}},
        "strict-code": {"backends": ["fast"], "cache": {"exact": exact, "semantic": SEMANTIC, "categories": {
            **CATEGORIES, "code": {"threshold": 0.995}}}},
        # Similarity alone (no guard): the category rules must hold whatever the verifiers would say.
        "similarity-only": {"backends": ["fast"], "cache": {"exact": {"enabled": False}, "semantic": {
            **SEMANTIC, "threshold": 0.7, "guard": False, "context": False}, "categories": {
            **CATEGORIES, "code": {"threshold": 0.995}}}},
        "volatile-off": {"backends": ["fast"], "cache": {"exact": exact, "semantic": SEMANTIC, "categories": {
            "volatile": {"ttl_s": 0}}}},
    })
    g = start_gateway(tmp_path_factory.mktemp(f"categories-{request.param}"), fleet, config)
    yield g
    g.process.stop()


def category_rejections(gw) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    return float(re.search(r"^slipstream_cache_category_rejections_total (\S+)$", text, re.MULTILINE).group(1))


def tag() -> str:
    return uuid.uuid4().hex[:6]


def test_the_response_names_the_question_s_category(gw):
    t = tag()
    assert ask(gw, f"What is the price of bitcoin on exchange {t} right now?", model="categorised")[0][
        "x-slipstream-cache-category"] == "volatile"
    assert ask(gw, f"Write a Python function to reverse a string {t}", model="categorised")[0][
        "x-slipstream-cache-category"] == "code"
    assert ask(gw, f"How do I reset the password of my router model {t}?", model="categorised")[0][
        "x-slipstream-cache-category"] == "general"


def test_a_volatile_answer_expires_after_the_volatile_ttl_and_a_general_one_does_not(gw):
    t = tag()
    volatile = f"What is the price of bitcoin on exchange {t} right now?"
    general = f"How do I reset the password of my router model {t}?"
    ask(gw, volatile, model="categorised")
    ask(gw, general, model="categorised")
    settle(gw)
    h, _ = ask(gw, volatile, model="categorised")
    assert (h["x-slipstream-cache"], h["x-slipstream-cache-category"]) == ("hit", "volatile")
    time.sleep(VOLATILE_TTL_S + 0.2)
    assert ask(gw, volatile, model="categorised")[0]["x-slipstream-cache"] == "miss"
    assert ask(gw, general, model="categorised")[0]["x-slipstream-cache"] == "hit"


def test_a_volatile_paraphrase_is_served_within_the_volatile_ttl_only(gw):
    t = tag()
    ask(gw, f"What is the price of bitcoin on exchange {t} right now?", model="categorised")
    settle(gw)
    paraphrase = f"Please, what is the price of bitcoin on exchange {t} right now?"
    h, _ = ask(gw, paraphrase, model="categorised")
    assert h["x-slipstream-cache"] == "semantic-hit", dict(h)
    time.sleep(VOLATILE_TTL_S + 0.2)
    assert ask(gw, paraphrase, model="categorised")[0]["x-slipstream-cache"] == "miss"


def test_a_volatile_question_never_gets_a_general_answer_older_than_the_volatile_ttl(gw):
    t = tag()
    ask(gw, f"How do I reset the password of my router model {t}?", model="similarity-only")
    settle(gw)
    volatile = f"How do I reset the password of my router model {t} right now?"
    h, _ = ask(gw, volatile, model="similarity-only")
    assert (h["x-slipstream-cache"], h["x-slipstream-cache-category"]) == ("semantic-hit", "volatile")
    time.sleep(VOLATILE_TTL_S + 0.2)
    assert ask(gw, volatile, model="similarity-only")[0]["x-slipstream-cache"] == "miss"
    assert category_rejections(gw) >= 1
    # The general entry itself lives on (300 s) for general questions.
    general = f"Please, how can I reset the password of my Router model {t}?"
    assert ask(gw, general, model="similarity-only")[0]["x-slipstream-cache"] == "semantic-hit"


def test_a_client_ttl_cannot_lengthen_a_volatile_entry(gw):
    q = f"What is the price of bitcoin on exchange {tag()} right now?"
    ask(gw, q, model="categorised", headers={"x-slipstream-cache-ttl": "3600"})
    settle(gw)
    assert ask(gw, q, model="categorised")[0]["x-slipstream-cache"] == "hit"
    time.sleep(VOLATILE_TTL_S + 0.2)
    assert ask(gw, q, model="categorised")[0]["x-slipstream-cache"] == "miss"


def test_a_category_with_ttl_zero_is_never_cached(gw, fleet):
    q = f"What is the price of bitcoin on exchange {tag()} right now?"
    h, _ = ask(gw, q, model="volatile-off")
    assert h["x-slipstream-cache"] == "bypass" and "x-slipstream-cache-category" not in h
    settle(gw)
    calls = sim_stats(fleet.ports["fast"])["requests"]
    assert ask(gw, q, model="volatile-off")[0]["x-slipstream-cache"] == "bypass"
    assert sim_stats(fleet.ports["fast"])["requests"] == calls + 1
    # A general question on the same alias is cached as before.
    general = f"How do I reset the password of my router model {tag()}?"
    ask(gw, general, model="volatile-off")
    settle(gw)
    assert ask(gw, general, model="volatile-off")[0]["x-slipstream-cache"] == "hit"


def test_a_code_threshold_applies_to_code_questions_only(gw):
    t = tag()
    code = f"Write a Python function to reverse a string {t}"
    code_again = f"Can you write a Python function to reverse a string {t}?"  # similarity about 0.97
    general = f"How do I reset the password of my router model {t}?"
    general_again = f"Please, how can I reset the password of my Router model {t}?"  # about 0.99
    for model in ("categorised", "strict-code"):
        ask(gw, code, model=model)
        ask(gw, general, model=model)
    settle(gw)
    assert ask(gw, code_again, model="categorised")[0]["x-slipstream-cache"] == "semantic-hit"
    assert ask(gw, code_again, model="strict-code")[0]["x-slipstream-cache"] == "miss"
    assert ask(gw, general_again, model="strict-code")[0]["x-slipstream-cache"] == "semantic-hit"


def test_a_stored_code_question_keeps_its_threshold_against_a_general_one(gw):
    t = tag()
    ask(gw, f"Write a Python function to reverse a string {t}", model="similarity-only")
    settle(gw)
    asked = f"How do I reverse a string {t}?"  # general, 0.78 to 0.87 similar: above the alias's 0.7
    no_store = {"cache-control": "no-store"}  # the asked question must not become an entry of its own
    h, _ = ask(gw, asked, model="similarity-only", headers=no_store)
    assert (h["x-slipstream-cache"], h["x-slipstream-cache-category"]) == ("miss", "general")
    # A caller's own threshold is the caller's choice: no category changes it.
    h, _ = ask(gw, asked, model="similarity-only", headers={**no_store, "x-slipstream-cache-threshold": "0.7"})
    assert h["x-slipstream-cache"] == "semantic-hit"


def test_metrics_count_cache_results_per_category(gw):
    ask(gw, f"What is the price of bitcoin on exchange {tag()} right now?", model="categorised")
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    assert 'slipstream_cache_requests_total{category="volatile",gen_ai_request_model="categorised",result="miss"}' in text


GOOD = """
auth: {mode: open}
backends:
  a: {base_url: "http://127.0.0.1:9/v1", model: m}
models:
  chat:
    backends: [a]
    cache:
      semantic: {enabled: true}
      categories: CATEGORIES
"""


def error_for(tmp_path, categories: str) -> str:
    path = tmp_path / "gw.yaml"
    path.write_text(GOOD.replace("CATEGORIES", categories))
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    return str(exc.value)


def test_category_defaults_keep_volatile_answers_five_minutes_and_the_rest_as_the_alias_says(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text(GOOD.replace("      categories: CATEGORIES\n", ""))
    categories = load_config(path, environ={}).models["chat"].cache.categories
    assert categories.volatile.ttl_s == 300
    assert (categories.code.ttl_s, categories.code.threshold, categories.general.ttl_s) == (None, None, None)


@pytest.mark.parametrize("categories, key", [
    ("{volatile: {ttl_s: -1}}", "models.chat.cache.categories.volatile.ttl_s"),
    ("{code: {threshold: 1.5}}", "models.chat.cache.categories.code.threshold"),
    ("{code: {threshold: 0}}", "models.chat.cache.categories.code.threshold"),
    ("{weather: {ttl_s: 60}}", "models.chat.cache.categories.weather"),
    ("{general: {ttl: 60}}", "models.chat.cache.categories.general.ttl"),
    # Infinity is no "forever": an entry's expiry is JSON, where it reads back null (an entry never served).
    ("{code: {ttl_s: .inf}}", "models.chat.cache.categories.code.ttl_s"),
    ("{volatile: {ttl_s: .nan}}", "models.chat.cache.categories.volatile.ttl_s"),
])
def test_a_bad_category_setting_fails_naming_its_key(tmp_path, categories, key):
    assert key in error_for(tmp_path, categories)


def test_setting_only_the_volatile_threshold_keeps_the_volatile_ttl(tmp_path):
    # The five minutes are the volatile TTL's own default, not the section's: a config that tunes the
    # threshold alone must not give prices and scores the store's hour.
    path = tmp_path / "gw.yaml"
    path.write_text(GOOD.replace("CATEGORIES", "{volatile: {threshold: 0.9}}"))
    volatile = load_config(path, environ={}).models["chat"].cache.categories.volatile
    assert (volatile.ttl_s, volatile.threshold) == (300, 0.9)


def test_an_exact_entry_older_than_the_asked_category_allows_is_not_served_fresh():
    """An exact entry written before categories existed (no category: general, the store's hour) is
    still in Redis after an upgrade, and one written before a reload shortened the volatile TTL keeps
    its own expiry: neither is served as a hit to a volatile question older than the volatile TTL."""
    policy = CachePolicy.model_validate({"exact": {"ttl_s": 3600}})  # volatile: the shipped 300 s
    body = {"model": "m", "temperature": 0, "messages": [
        {"role": "user", "content": "What is the price of bitcoin right now?"}]}
    req = CHAT.parse(orjson.dumps(body))
    answer = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                                                        "message": {"role": "assistant", "content": "$1"}}]}

    async def lookup(age_s: float) -> str:
        cache = Cache(CacheConfig(), MemoryStore(10), None)
        plan = cache.plan("t", req, policy, {})
        assert plan.category == "volatile"
        now = time.time()
        old = orjson.dumps({"v": 1, "body": answer, "created": now - age_s, "fresh_until": now - age_s + 3600})
        await cache.store.set(plan.exact_key, old, 3600)
        await cache.lookup(plan)
        await cache.aclose()
        return plan.status

    assert asyncio.run(lookup(60)) == "hit"  # within the volatile TTL
    assert asyncio.run(lookup(600)) == "miss"  # ten minutes old: the volatile question is asked again


ASKED = "What is the price of bitcoin right now?"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.mark.parametrize("protocol, body", [
    # A photo beside the question: the answer is text, stored by the exact cache.
    (CHAT, {"model": "m", "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": ASKED}, IMAGE]}]}),
    # The question, a tool call and its result: the model answers from a result that ages.
    (CHAT, {"model": "m", "temperature": 0, "messages": [
        {"role": "user", "content": ASKED},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "price", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "97000"}]}),
    (MESSAGES, {"model": "m", "max_tokens": 64, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": ASKED},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": "iVBORw0KGgo="}}]}]}),
    (RESPONSES, {"model": "m", "temperature": 0, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": ASKED}, {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]}),
    (COMPLETIONS, {"model": "m", "temperature": 0, "prompt": ["Hello", ASKED]}),
])
def test_a_request_only_the_exact_cache_holds_is_classified_by_its_text(protocol, body):
    """Media, tool turns and prompt lists are not compared semantically, but their exact entries live as
    long as their category says: a volatile question with a photo is not kept for the store's hour."""
    req = protocol.parse(orjson.dumps(body))
    plan = Cache(CacheConfig(), MemoryStore(10), None).plan("t", req, CachePolicy(), {})
    assert plan.exact_key is not None
    assert plan.category == "volatile"
