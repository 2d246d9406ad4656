"""Anthropic's Messages API through the gateway, driven by the official anthropic SDK against the real
gateway process and the simulator fleet. The `tgi` alias's backend speaks only chat completions, so these
calls are translated both ways (app/protocols/messages_chat.py)."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.conftest import ACME_KEY, GLOBEX_KEY


def sdk(gateway, key: str = ACME_KEY, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, **kw)


def test_a_message_is_answered_in_anthropics_shape(gateway):
    message = sdk(gateway).messages.create(model="tgi", max_tokens=16, system="Be brief.",
                                           messages=[{"role": "user", "content": "Hello"}])
    assert message.type == "message" and message.role == "assistant" and message.model == "tgi"
    assert message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 16


def test_a_streamed_message_arrives_as_anthropics_event_sequence(gateway):
    with sdk(gateway).messages.stream(model="tgi", max_tokens=8,
                                      messages=[{"role": "user", "content": "Hello"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[1] == "content_block_start" and "content_block_delta" in kinds
    assert kinds[-3:-1] == ["content_block_stop", "message_delta"]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8
    assert final.usage.input_tokens > 0
    assert final.content[0].text


def test_count_tokens_answers_the_backends_own_count(gateway):
    short = sdk(gateway).messages.count_tokens(model="tgi", messages=[{"role": "user", "content": "Hi"}])
    longer = sdk(gateway).messages.count_tokens(model="tgi", messages=[{"role": "user", "content": "Hi " * 40}])
    assert 0 < short.input_tokens < longer.input_tokens


def test_x_api_key_and_bearer_both_authenticate(gateway):
    body = {"model": "tgi", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    by_key = httpx.post(f"{gateway.url}/v1/messages", json=body,
                        headers={"x-api-key": ACME_KEY, "anthropic-version": "2023-06-01"})
    by_bearer = httpx.post(f"{gateway.url}/v1/messages", json=body, headers={"authorization": f"Bearer {ACME_KEY}"})
    assert by_key.status_code == by_bearer.status_code == 200
    assert by_key.json()["type"] == "message"


@pytest.mark.parametrize(("call", "exc", "etype"), [
    (lambda c: c.messages.create(model="tgi", max_tokens=4, messages=[]), anthropic.BadRequestError,
     "invalid_request_error"),
    (lambda c: c.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "x"}]),
     anthropic.NotFoundError, "not_found_error"),
    (lambda c: c.messages.create(model="tgi", max_tokens=4, messages=[{"role": "user", "content": "x"}],
                                 thinking={"type": "enabled", "budget_tokens": 512}),  # under 1024
     anthropic.BadRequestError, "invalid_request_error"),
])
def test_errors_raise_the_matching_sdk_exception(gateway, call, exc, etype):
    with pytest.raises(exc) as info:
        call(sdk(gateway))
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == etype


def test_a_wrong_key_is_an_authentication_error(gateway):
    with pytest.raises(anthropic.AuthenticationError) as info:
        sdk(gateway, key="sk-wrong").messages.create(model="tgi", max_tokens=4,
                                                     messages=[{"role": "user", "content": "x"}])
    assert info.value.body["error"]["type"] == "authentication_error"


def test_a_model_outside_the_keys_list_is_a_permission_error(gateway):
    with pytest.raises(anthropic.PermissionDeniedError) as info:
        sdk(gateway, key=GLOBEX_KEY).messages.create(model="tgi", max_tokens=4,
                                                     messages=[{"role": "user", "content": "x"}])
    assert info.value.body["error"]["type"] == "permission_error"


def test_a_body_over_the_limit_is_request_too_large(gateway):
    with pytest.raises(anthropic.RequestTooLargeError) as info:
        sdk(gateway).messages.create(model="tgi", max_tokens=4,
                                     messages=[{"role": "user", "content": "x" * 70_000}])
    assert info.value.body["error"]["type"] == "request_too_large"


def test_a_document_a_tool_returned_is_refused_by_a_chat_backend_never_dropped(gateway):
    # A chat `tool` message carries text only and chat has no document part: the model would answer without
    # ever reading it. (An image travels in a user message after the tool messages: test_tools_over_chat.py.)
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk(gateway).messages.create(model="tgi", max_tokens=4, messages=[
            {"role": "user", "content": "Read it."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}])
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert info.value.body["error"]["message"].startswith("messages.2.content.0.content.0.type:")


def test_a_route_under_messages_the_gateway_does_not_serve_answers_in_anthropics_shape(gateway):
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk(gateway).messages.batches.create(requests=[{"custom_id": "a", "params": {
            "model": "tgi", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}}])
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "not_found_error"
    assert "/v1/messages/batches" in info.value.body["error"]["message"]
    wrong_method = httpx.get(f"{gateway.url}/v1/messages", headers={"x-api-key": ACME_KEY})
    assert wrong_method.status_code in (404, 405) and wrong_method.json()["type"] == "error"


def test_an_anthropic_api_the_gateway_does_not_serve_answers_an_anthropic_client_in_its_shape(gateway):
    # Files and skills: Anthropic serves them, the gateway does not. The SDK sends anthropic-version on every call,
    # and reads an error's type and message only in Anthropic's shape; an OpenAI client's call to the same path
    # (OpenAI has /v1/files too) keeps OpenAI's.
    client = sdk(gateway)
    for call, path in [(client.beta.files.list, "GET /v1/files"),
                       (lambda: client.skills.retrieve("skill_01"), "GET /v1/skills/skill_01")]:
        with pytest.raises(anthropic.NotFoundError) as info:
            call()
        assert info.value.body == {"type": "error", "error": {"type": "not_found_error",
                                                              "message": f"no route for {path}"}}
    openai_shaped = httpx.get(f"{gateway.url}/v1/files", headers={"authorization": f"Bearer {ACME_KEY}"})
    assert openai_shaped.status_code == 404 and openai_shaped.json()["error"]["code"] == "not_found"


def test_bad_params_are_named_in_a_400_never_a_500(gateway):
    r = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": ACME_KEY},
                   json={"model": "tgi", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "max_tokens: Field required"}}
    r = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": ACME_KEY},
                   json={"model": "tgi", "max_tokens": 4, "messages": [{"role": "bot", "content": "x"}]})
    assert r.status_code == 400 and "messages.0.role" in r.json()["error"]["message"]


@pytest.mark.parametrize("empty", ["", []])
def test_an_empty_turn_is_refused_in_anthropics_words_but_a_final_assistant_prefill_may_be_empty(gateway, empty):
    # Over a chat backend an empty user turn was answered; Anthropic refuses it, and so does a native backend's client.
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": empty}, {"role": "user", "content": "y"}]
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk(gateway).messages.create(model="tgi", max_tokens=4, messages=messages)
    assert info.value.body["error"]["message"] == ("messages.1: all messages must have non-empty content except for "
                                                   "the optional final assistant message")
    answer = sdk(gateway).messages.create(model="tgi", max_tokens=4, messages=messages[:2])
    assert answer.content and answer.role == "assistant"


def test_the_anthropic_sdk_lists_and_retrieves_the_aliases_in_anthropics_shape(gateway):
    # Its key arrives as x-api-key and its request names an anthropic-version: Anthropic's Models API.
    client = sdk(gateway)
    listed = list(client.models.list())
    assert {m.id for m in listed} >= {"chat", "tgi"}
    assert all(m.type == "model" and m.display_name == m.id and m.lifecycle == "active" for m in listed)
    one = client.models.retrieve("tgi")
    assert (one.id, one.type, one.created_at) == ("tgi", "model", next(m for m in listed if m.id == "tgi").created_at)
    # The same instant as OpenAI's `created` for the alias.
    openai_created = httpx.get(f"{gateway.url}/v1/models/tgi", headers={"authorization": f"Bearer {ACME_KEY}"}).json()
    assert int(one.created_at.timestamp()) == openai_created["created"]


def test_the_anthropic_model_list_pages_by_limit_and_cursor(gateway):
    client = sdk(gateway)
    everything = [m.id for m in client.models.list()]
    first = client.models.list(limit=1)
    assert [m.id for m in first.data] == everything[:1] and first.has_more is (len(everything) > 1)
    assert [m.id for m in client.models.list(limit=1)] == everything  # the SDK follows after_id page by page
    back = client.models.list(before_id=everything[-1], limit=1000)
    assert [m.id for m in back.data] == everything[:-1] and back.has_more is False
    with pytest.raises(anthropic.BadRequestError) as exc:
        client.models.list(limit=0)
    assert exc.value.body["type"] == "error" and exc.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.models.list(after_id="no-such-model")


def test_the_anthropic_model_list_shows_a_key_only_its_aliases_and_refuses_no_key(gateway):
    globex = sdk(gateway, GLOBEX_KEY)
    assert [m.id for m in globex.models.list()] == ["chat"]
    with pytest.raises(anthropic.NotFoundError) as exc:  # not in its list: the same answer as an unknown alias
        globex.models.retrieve("tgi")
    assert exc.value.body["error"]["type"] == "not_found_error"
    answer = httpx.get(f"{gateway.url}/v1/models", headers={"anthropic-version": "2023-06-01"})
    assert answer.status_code == 401 and answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "authentication_error"
