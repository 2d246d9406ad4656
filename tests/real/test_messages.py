"""Anthropic's Messages API through the gateway to real llama.cpp servers, with the official anthropic SDK.

Alias `a` passes /v1/messages through to llama-server, which speaks it natively; alias `a-chat` is the same
server declared chat-only (`apis: [chat, completions]`), so its calls are translated to chat completions and
back. The same client code must work on both.
"""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.real.conftest import KEY


def sdk(real) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=real.url, api_key=KEY, max_retries=0)


@pytest.mark.parametrize("alias", ["a", "a-chat"])
def test_a_message_with_a_system_prompt(real, alias):
    raw = sdk(real).messages.with_raw_response.create(
        model=alias, max_tokens=8, system=[{"type": "text", "text": "You are terse."}], extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Say hello."}])
    message = raw.parse()
    assert message.type == "message" and message.model == alias and message.id
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 5
    assert 0 < message.usage.output_tokens <= 8
    assert raw.headers["x-slipstream-backend"] == alias


@pytest.mark.parametrize("alias", ["a", "a-chat"])
def test_a_streamed_message_is_the_full_event_sequence(real, alias):
    with sdk(real).messages.stream(model=alias, max_tokens=6, extra_body={"temperature": 0},
                                   messages=[{"role": "user", "content": "Count: one, two,"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_delta" in kinds and "message_delta" in kinds
    assert final.model == alias and final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6


def test_passthrough_and_translation_agree_on_the_answer(real):
    body = dict(max_tokens=8, extra_body={"temperature": 0},
                messages=[{"role": "user", "content": "The capital of France is"}])
    native = sdk(real).messages.create(model="a", **body)
    translated = sdk(real).messages.create(model="a-chat", **body)
    assert native.content[0].text == translated.content[0].text
    assert native.usage.output_tokens == translated.usage.output_tokens


@pytest.mark.parametrize("alias", ["a", "a-chat"])
def test_count_tokens_is_the_servers_own_count(real, alias):
    short = sdk(real).messages.count_tokens(model=alias, messages=[{"role": "user", "content": "Hi"}])
    longer = sdk(real).messages.count_tokens(model=alias, messages=[{"role": "user", "content": "Hi " * 30}])
    assert 0 < short.input_tokens < longer.input_tokens


def test_x_api_key_with_anthropic_headers_passes(real):
    r = httpx.post(f"{real.url}/v1/messages", timeout=60,
                   headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"},
                   json={"model": "a", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["type"] == "message"


def test_a_prompt_too_long_for_a_falls_back_to_b(real):
    raw = sdk(real).messages.with_raw_response.create(
        model="a", max_tokens=4, messages=[{"role": "user", "content": "word " * 400}])
    assert raw.headers["x-slipstream-backend"] == "b"
    assert raw.headers["x-slipstream-fallback"] == "b; reason=context_length"
    usage = raw.parse().usage  # the whole prompt reached b (the 135M model may answer with nothing at all)
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) > 400


def test_a_key_that_does_not_exist_is_an_authentication_error(real):
    client = anthropic.Anthropic(base_url=real.url, api_key="sk-nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="a", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
