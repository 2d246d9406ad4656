"""The API surface the OpenAI SDKs expect, beyond the proxied calls: model retrieval, the completions
stream's usage chunk, and server-specific values passed to the backend unjudged."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from tests.conftest import ACME_KEY, GLOBEX_KEY

AUTH = {"authorization": f"Bearer {ACME_KEY}"}
MSG = [{"role": "user", "content": "hello"}]


def test_models_retrieve_returns_the_alias(client):
    model = client.models.retrieve("chat")
    assert (model.id, model.object, model.owned_by) == ("chat", "model", "slipstream")
    listed = {m.id: m for m in client.models.list()}
    assert listed["chat"].created == model.created


def test_models_retrieve_unknown_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.models.retrieve("no-such-model")
    assert exc.value.code == "model_not_found"


def test_models_retrieve_needs_a_key_and_respects_the_allowance(gateway):
    assert httpx.get(f"{gateway.url}/v1/models/chat").status_code == 401
    globex = gateway.client(GLOBEX_KEY)
    assert globex.models.retrieve("chat").id == "chat"
    with pytest.raises(openai.NotFoundError):  # not in its list either
        globex.models.retrieve("slow")
    assert {m.id for m in globex.models.list()} == {"chat"}


def test_completions_stream_usage_arrives_on_a_chunk_without_choices(client):
    # The "chat" alias is served by a llama.cpp-style backend, which puts /v1/completions' usage on
    # its last choice chunk; the client must get it on a chunk of its own, as OpenAI sends it.
    chunks = list(client.completions.create(model="chat", prompt="Once upon a time", max_tokens=4, stream=True,
                                            stream_options={"include_usage": True}))
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    assert with_usage[0].choices == []
    assert with_usage[0].usage.completion_tokens >= 1
    assert any(c.choices and c.choices[0].finish_reason for c in chunks[:-1])


def test_completions_stream_without_include_usage_shows_no_usage(client):
    chunks = list(client.completions.create(model="chat", prompt="Once upon a time", max_tokens=4, stream=True))
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_chat_stream_usage_chunk_has_no_choices(client):
    chunks = list(client.chat.completions.create(model="tgi", messages=MSG, max_tokens=3, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].choices == []


def test_max_tokens_minus_one_reaches_a_backend_that_accepts_it(client):
    # llama.cpp takes -1 as "no limit"; the gateway must not reject what the backend accepts.
    r = client.chat.completions.create(model="chat", messages=MSG, max_tokens=-1)
    assert r.choices[0].message.content
    chunks = list(client.completions.create(model="chat", prompt="x", max_tokens=-1, stream=True))
    assert chunks[-1].choices[0].finish_reason


def test_max_tokens_out_of_range_is_judged_by_the_backend(gateway):
    # The vLLM-like backend rejects max_tokens < 1 itself: its own 400 comes back, not the gateway's.
    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH,
                   json={"model": "slow", "messages": MSG, "max_tokens": -1})
    assert r.status_code == 400
    assert "positive integer" in orjson.loads(r.content)["error"]["message"]
