"""The gateway as a drop-in OpenAI endpoint: the official SDK against real processes."""

from __future__ import annotations

import httpx

from app.tools.simulator.textgen import generate_tokens, request_rng
from tests.conftest import SEED


def expected_text(messages: list[dict], n: int, seed: int | None = None) -> str:
    body = {"messages": messages, "seed": seed}
    return "".join(generate_tokens(request_rng(SEED, body), n))


def test_chat_completion_round_trip(client):
    messages = [{"role": "user", "content": "Say something"}]
    r = client.chat.completions.create(model="chat", messages=messages, max_tokens=5, extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == expected_text(messages, 5)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    assert r.usage.prompt_tokens > 0


def test_alias_is_mapped_to_backend_model_and_named_in_headers(client):
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raw.headers["x-slipstream-model"] == "m-fast"
    assert raw.headers["x-slipstream-backend"] == "fast"
    # The body names the alias the client asked for (as a cache hit does); the header, the backend's model.
    assert raw.parse().model == "chat"


def test_unknown_fields_pass_through(client):
    # ignore_eos is a vLLM extension the gateway does not know; the simulator honours it.
    r = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "x"}], max_tokens=40, extra_body={"ignore_eos": True}
    )
    assert r.usage.completion_tokens == 40


def test_text_completion(client):
    r = client.completions.create(model="chat", prompt="Once upon a time", max_tokens=3, extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert len(r.choices[0].text.split()) == 3


def test_embeddings(client):
    r = client.embeddings.create(model="embed", input=["a", "b"])
    assert [d.index for d in r.data] == [0, 1]
    assert len(r.data[0].embedding) == 8
    assert r.data[0].embedding != r.data[1].embedding


def test_embeddings_in_base64_decode_to_the_float_ones(client):
    # The Node SDK asks for base64 by default; a backend that ignored it would decode as zeros.
    floats = client.embeddings.create(model="embed", input="a", encoding_format="float").data[0].embedding
    b64 = client.embeddings.create(model="embed", input="a", encoding_format="base64").data[0].embedding
    assert isinstance(b64, str)
    import base64

    import numpy as np

    assert np.allclose(np.frombuffer(base64.b64decode(b64), dtype="<f4"), floats, atol=1e-6)
    assert any(floats)


def test_models_list_shows_aliases(client):
    ids = {m.id for m in client.models.list()}
    assert ids == {"chat", "slow", "flaky", "hang", "tgi", "embed", "dead"}


def test_backend_keys_and_hop_headers_do_not_leak(gateway):
    r = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": "Bearer sk-test-acme-0123456789"},
        json={"model": "tgi", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert r.status_code == 200
    assert "server" not in r.headers or r.headers["server"] == "uvicorn"
    assert not any(k.startswith("x-queue-time") for k in r.headers)  # backend timing headers stay inside


def test_healthz_and_readyz(gateway):
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    r = httpx.get(f"{gateway.url}/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready"
    assert body["backends"]["fast"] is True and body["backends"]["dead"] is False


def test_the_answer_names_the_alias_even_where_a_sorted_body_has_a_model_key_before_its_own():
    # llama.cpp writes JSON with sorted keys: a Responses answer's metadata comes before its model, and a
    # caller's metadata may well have a key "model". The answer's own model is renamed, the metadata kept.
    import orjson

    from app.protocols import RESPONSES
    from app.upstream.scripted import Reply, ScriptedTransport
    from tests.scripted import call, config, run

    answer = {"created_at": 1, "id": "resp_1", "metadata": {"model": "my-tag"}, "model": "/models/x.gguf",
              "object": "response", "output": [{"content": [{"annotations": [], "text": "Hi", "type": "output_text"}],
                                                "id": "msg_1", "role": "assistant", "status": "completed",
                                                "type": "message"}], "status": "completed"}
    transport = ScriptedTransport([Reply(orjson.dumps(answer, option=orjson.OPT_SORT_KEYS))])

    async def scenario(gw):
        return await call(gw, {"model": "chat", "input": "hi", "metadata": {"model": "my-tag"}}, endpoint=RESPONSES)

    body = run(config(), transport, scenario).json()
    assert body["model"] == "chat" and body["metadata"] == {"model": "my-tag"}
