"""The cache as a client sees it, against both stores: hits are exact, honest and never foreign."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import openai
import pytest

from tests.conftest import ADMIN_KEY
from tests.support import set_faults, sim_stats, wait_until


def ask(gw, content: str, model: str = "cached", key: str | None = None, headers: dict | None = None, **kw):
    client = gw.client(key) if key else gw.client()
    params = {"temperature": 0, "max_tokens": 64, **kw}
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], extra_headers=headers or {}, **params
    )
    return raw.headers, raw.parse()


def ask_stream(gw, content: str, include_usage: bool = False, **kw):
    client = gw.client()
    opts = {"stream_options": {"include_usage": True}} if include_usage else {}
    raw = client.chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": content}], temperature=0, max_tokens=64,
        stream=True, **opts, **kw,
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return raw.headers, chunks, text


def unique(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def settle(gw) -> None:
    """Cache writes happen after the response, in the background: wait until they are in the store."""
    r = httpx.post(f"{gw.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    assert r.status_code == 200, r.text


def test_exact_hit_serves_the_same_answer_without_a_backend_call(cached_gateway, fleet):
    q = unique("Explain what a gateway does")
    h1, r1 = ask(cached_gateway, q)
    assert h1["x-slipstream-cache"] == "miss"
    settle(cached_gateway)
    calls = sim_stats(fleet.ports["fast"])["requests"]
    h2, r2 = ask(cached_gateway, q)
    assert h2["x-slipstream-cache"] == "hit"
    assert r2.choices[0].message.content == r1.choices[0].message.content
    assert r2.id != r1.id
    assert sim_stats(fleet.ports["fast"])["requests"] == calls
    # Honest usage: same prompt and answer, and the prompt is reported as served from cache.
    assert r2.usage.completion_tokens == r1.usage.completion_tokens
    assert r2.usage.prompt_tokens_details.cached_tokens == r1.usage.prompt_tokens
    # The same names on a hit as on the miss; the filling call's llama.cpp timings are not this answer's.
    assert r1.model == r2.model == "cached"
    assert h1["x-slipstream-model"] == h2["x-slipstream-model"] == "m-fast"
    assert "timings" in r1.model_extra and "timings" not in r2.model_extra


def test_hit_replayed_as_a_stream_honours_include_usage(cached_gateway):
    q = unique("Stream a cached answer")
    _, r1 = ask(cached_gateway, q)
    settle(cached_gateway)
    h, chunks, text = ask_stream(cached_gateway, q)
    assert h["x-slipstream-cache"] == "hit"
    assert text == r1.choices[0].message.content
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "stop"
    _, chunks, _ = ask_stream(cached_gateway, q, include_usage=True)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r1.usage.completion_tokens


def test_finished_stream_is_assembled_and_cached(cached_gateway):
    q = unique("Cache my stream")
    h, _, text = ask_stream(cached_gateway, q)
    assert h["x-slipstream-cache"] == "miss"
    settle(cached_gateway)
    h2, r2 = ask(cached_gateway, q)
    assert h2["x-slipstream-cache"] == "hit"
    assert r2.choices[0].message.content == text


@pytest.mark.parametrize("change", [
    {"temperature": 0.0, "max_tokens": 63}, {"stop": ["\n"]}, {"seed": 7}, {"top_p": 0.5},
    {"response_format": {"type": "json_object"}},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
])
def test_any_parameter_that_changes_output_changes_the_key(cached_gateway, change):
    q = unique("Parameters matter")
    ask(cached_gateway, q)
    settle(cached_gateway)
    h, _ = ask(cached_gateway, q, **change)
    assert h["x-slipstream-cache"] == "miss"


# OpenAI asks applications to send each end user's id as safety_identifier (which replaced `user`) and to bucket
# its prompt cache with prompt_cache_key: neither changes an answer, and like `user` neither may split the cache.
def test_end_user_identifiers_share_the_tenants_cache(cached_gateway):
    q = unique("Which planet has the most moons")
    ask(cached_gateway, q, user="u1", safety_identifier="u1", prompt_cache_key="u1", prompt_cache_retention="24h")
    settle(cached_gateway)
    h, _ = ask(cached_gateway, q, user="u2", safety_identifier="u2", prompt_cache_key="u2")
    assert h["x-slipstream-cache"] == "hit"


def test_sampled_requests_bypass_the_cache(cached_gateway):
    q = unique("Be creative")
    h, _ = ask(cached_gateway, q, temperature=1.0)
    assert h["x-slipstream-cache"] == "bypass"
    settle(cached_gateway)
    h, _ = ask(cached_gateway, q, temperature=1.0)
    assert h["x-slipstream-cache"] == "bypass"


def test_no_cache_skips_lookup_and_refreshes(cached_gateway):
    q = unique("Refresh me")
    ask(cached_gateway, q)
    settle(cached_gateway)
    h, _ = ask(cached_gateway, q, headers={"cache-control": "no-cache"})
    assert h["x-slipstream-cache"] == "miss"
    settle(cached_gateway)
    assert ask(cached_gateway, q)[0]["x-slipstream-cache"] == "hit"


def test_no_store_does_not_write(cached_gateway):
    q = unique("Forget me")
    ask(cached_gateway, q, headers={"cache-control": "no-store"})
    settle(cached_gateway)
    assert ask(cached_gateway, q, headers={"cache-control": "no-store"})[0]["x-slipstream-cache"] == "miss"


def test_per_request_ttl_is_absolute(cached_gateway):
    q = unique("Short lived")
    ask(cached_gateway, q, headers={"x-slipstream-cache-ttl": "1"})
    settle(cached_gateway)
    assert ask(cached_gateway, q)[0]["x-slipstream-cache"] == "hit"  # a hit does not extend the entry
    time.sleep(1.0)
    assert ask(cached_gateway, q)[0]["x-slipstream-cache"] == "miss"


def test_bad_cache_headers_are_400(cached_gateway):
    with pytest.raises(openai.BadRequestError):
        ask(cached_gateway, "x", headers={"x-slipstream-cache-ttl": "forever"})
    with pytest.raises(openai.BadRequestError):
        ask(cached_gateway, "x", headers={"x-slipstream-cache-threshold": "2"})


@pytest.mark.parametrize("model", ["cached", "chat"])  # semantic cache on, and off
def test_bad_cache_headers_are_400_on_a_request_the_cache_would_not_keep_too(cached_gateway, model):
    # The same header is right or wrong whatever the request: a sampled one (not cached) gets the same 400 as a
    # deterministic one, not a 200 that hides the mistake until the client's next deterministic request.
    for header in ({"x-slipstream-cache-ttl": "forever"}, {"x-slipstream-cache-threshold": "2"}):
        with pytest.raises(openai.BadRequestError) as err:
            ask(cached_gateway, "x", model=model, headers=header, temperature=0.7)
        assert err.value.body["param"] == next(iter(header))


def test_semantic_hit_for_a_paraphrase(cached_gateway):
    topic = uuid.uuid4().hex[:6]
    _, r1 = ask(cached_gateway, f"How do I reset the password of my router model {topic}?")
    settle(cached_gateway)
    h, r2 = ask(cached_gateway, f"Please, how can I reset the password of my Router model {topic}?")
    assert h["x-slipstream-cache"] == "semantic-hit"
    assert h["x-slipstream-cache-verifier"] == "guard"
    assert 0.9 <= float(h["x-slipstream-cache-similarity"]) < 1.0
    assert r2.choices[0].message.content == r1.choices[0].message.content
    # No model read this prompt: only the answer's tokens are counted.
    assert r2.usage.prompt_tokens == 0 and r2.usage.completion_tokens == r1.usage.completion_tokens


@pytest.mark.parametrize("first, second", [
    ("Turn on the lights in the kitchen", "Turn off the lights in the kitchen"),
    ("How many eggs do I need for 4 people?", "How many eggs do I need for 6 people?"),
    ("What is the population of Sweden?", "What is the population of Norway?"),
    ("Why does my code not compile?", "Why does my code compile?"),
    # Served with the guard's word once: an operator or a minus sign was no token, and a swap of two nouns was one
    # block moved.
    ("What is 5 + 3?", "What is 5 - 3?"),
    ("How do I print hello world in C?", "How do I print hello world in C++?"),
    ("How many cups are in a gallon?", "How many gallons are in a cup?"),
    ("How much is 100 USD in EUR?", "How much is 100 EUR in USD?"),
    ("Is -5 less than 3?", "Is 5 less than 3?"),
])
def test_near_misses_are_not_served(cached_gateway, first, second):
    tag = uuid.uuid4().hex[:6]
    ask(cached_gateway, f"{first} {tag}")
    settle(cached_gateway)
    h, _ = ask(cached_gateway, f"{second} {tag}", headers={"x-slipstream-cache-threshold": "0.5"})
    assert h["x-slipstream-cache"] == "miss"


# A participant's `name` is part of what the model reads (OpenAI: "provides the model information to differentiate
# between participants of the same role"); the semantic lookup compared the last turn's text only, and bob got
# alice's answer to "What is my name?" at similarity 1.0.
def test_a_named_participant_is_never_served_another_participants_answer(cached_gateway):
    client = cached_gateway.client()
    question = f"What is my name? [{uuid.uuid4().hex[:8]}]"

    def ask_as(name: str):
        raw = client.chat.completions.with_raw_response.create(
            model="cached", messages=[{"role": "user", "name": name, "content": question}], temperature=0, max_tokens=64)
        return raw.headers["x-slipstream-cache"]

    assert ask_as("alice") == "miss"
    settle(cached_gateway)
    assert ask_as("bob") == "miss"
    assert ask_as("alice") == "hit"  # the exact cache holds it, name and all


def test_a_question_asked_in_another_tense_is_not_served(cached_gateway):
    # Only the tense differs: the contextual check never read "was" (a function word) and served today's answer.
    session = {"role": "system", "content": f"Session {uuid.uuid4().hex[:8]}."}  # the question stays word for word
    client = cached_gateway.client()

    def ask_(question: str):
        raw = client.chat.completions.with_raw_response.create(
            model="cached", messages=[session, {"role": "user", "content": question}], temperature=0, max_tokens=64,
            extra_headers={"x-slipstream-cache-threshold": "0.5"})
        return raw.headers["x-slipstream-cache"]

    assert ask_("Who is the CEO of Apple?") == "miss"
    settle(cached_gateway)
    assert ask_("Who was the CEO of Apple?") == "miss"


def test_code_that_differs_only_in_its_indentation_is_another_question(cached_gateway):
    # Normalised text folds whitespace and the embeddings read none: these two programs (one prints 'done' three
    # times, the other once) were the same question at similarity 1.0, served by the guard.
    loop = "for i in range(3):\n    print(i)\n    print('done')\n"
    session = {"role": "system", "content": f"Session {uuid.uuid4().hex[:8]}."}
    client = cached_gateway.client()

    def ask_(question: str):
        raw = client.chat.completions.with_raw_response.create(
            model="cached", messages=[session, {"role": "user", "content": question}], temperature=0, max_tokens=64)
        return raw.headers["x-slipstream-cache"]

    assert ask_(f"What does this print?\n\n{loop}") == "miss"
    settle(cached_gateway)
    assert ask_(f"What does this print?\n\n{loop.replace('    print(' + repr('done'), 'print(' + repr('done'))}") == "miss"
    assert ask_(f"Please, what does this print?\n\n{loop}") == "semantic-hit"  # the same layout, reworded


def test_follow_up_never_matches_another_conversation(cached_gateway):
    client = cached_gateway.client()
    tag = uuid.uuid4().hex[:6]

    def convo(first: str):
        messages = [
            {"role": "user", "content": f"{first} {tag}"},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "How long does it take?"},
        ]
        raw = client.chat.completions.with_raw_response.create(model="cached", messages=messages, temperature=0)
        return raw.headers["x-slipstream-cache"]

    assert convo("I want to bake bread") == "miss"
    settle(cached_gateway)
    assert convo("I want to learn Spanish") == "miss"
    assert convo("I want to bake bread") == "hit"


def test_tenants_never_share_answers(cached_gateway, fleet):
    async def one(i: int, q: str):
        async with cached_gateway.async_client(key=f"sk-tenant-{i}") as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="cached", messages=[{"role": "user", "content": q}], temperature=0)
            return raw.headers["x-slipstream-cache"]

    base = unique("Tenant question")
    variants = [base, base + "?", base.replace("question", "query")]

    async def round_(n: int):
        return await asyncio.gather(*(one(i, v) for i in range(n) for v in variants))

    first = asyncio.run(round_(8))
    assert all(s == "miss" for s in first[:3]) or first  # concurrent misses are fine
    settle(cached_gateway)
    # Each tenant now has its own copies; a new tenant still finds nothing.
    calls = sim_stats(fleet.ports["fast"])["requests"]
    again = asyncio.run(round_(8))
    assert set(again) <= {"hit", "semantic-hit"}
    assert sim_stats(fleet.ports["fast"])["requests"] == calls
    h, _ = ask(cached_gateway, base)  # the default tenant (acme) never asked: a miss
    assert h["x-slipstream-cache"] == "miss"


def test_truncated_answers_are_not_cached(cached_gateway):
    q = unique("Long answer cut short")
    _, r = ask(cached_gateway, q, max_tokens=2, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    settle(cached_gateway)
    assert ask(cached_gateway, q, max_tokens=2, extra_body={"ignore_eos": True})[0]["x-slipstream-cache"] == "miss"


def test_broken_streams_and_errors_are_not_cached(cached_gateway, flaky):
    q = unique("Flaky answer")
    client = cached_gateway.client()
    set_faults(flaky, disconnect_rate=1.0)
    stream = client.chat.completions.create(model="cached-flaky", messages=[{"role": "user", "content": q}],
                                            temperature=0, max_tokens=30, stream=True, extra_body={"ignore_eos": True})
    with pytest.raises(openai.APIError):
        list(stream)
    set_faults(flaky, error_rate=1.0)
    with pytest.raises(openai.InternalServerError):
        ask(cached_gateway, q, model="cached-flaky")
    set_faults(flaky)
    settle(cached_gateway)
    assert ask(cached_gateway, q, model="cached-flaky")[0]["x-slipstream-cache"] == "miss"


def test_stale_answer_stands_in_when_every_backend_fails(cached_gateway, flaky):
    q = unique("Stale but useful")
    _, r1 = ask(cached_gateway, q, model="cached-flaky", headers={"x-slipstream-cache-ttl": "1"})
    settle(cached_gateway)
    time.sleep(1.1)  # past the entry's TTL
    set_faults(flaky, error_rate=1.0)
    h, r2 = ask(cached_gateway, q, model="cached-flaky")
    assert h["x-slipstream-cache"] == "stale"
    assert r2.choices[0].message.content == r1.choices[0].message.content


def test_redis_going_down_fails_open_and_recovers(fleet, tmp_path):
    from tests.cache.conftest import cache_config
    from tests.conftest import start_gateway
    from tests.support import RedisServer

    server = RedisServer(tmp_path)
    server.start()
    gw = start_gateway(tmp_path, fleet, cache_config(fleet, "redis", server.url))
    try:
        q = unique("Survive the outage")
        ask(gw, q)
        settle(gw)
        assert ask(gw, q)[0]["x-slipstream-cache"] == "hit"
        server.stop()
        # Redis is gone: every call still answers, as a miss, and none waits long for the cache.
        for i in range(5):
            t0 = time.perf_counter()
            h, r = ask(gw, f"{q} {i}")
            assert h["x-slipstream-cache"] == "miss" and r.choices[0].message.content
            assert time.perf_counter() - t0 < 1.0
        assert "cache store unavailable" in gw.process.log()
        server.start()  # same port: the client reconnects by itself
        q2 = unique("After the outage")
        ask(gw, q2)
        assert wait_until(lambda: ask(gw, q2)[0]["x-slipstream-cache"] == "hit", timeout=5, interval=0.3)
    finally:
        gw.process.stop()
        server.stop()
