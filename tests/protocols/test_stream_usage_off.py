"""A chat backend that refuses `stream_options` (`backends.<name>.stream_usage: false`, for servers that do) behind the
gateway's translations: Messages and Responses streams reach it without them, and the client is told no usage
rather than a made-up one. Driven with the official SDKs against a real gateway process; the backend is a loopback
chat server that refuses the field as OpenAI refuses an unknown parameter (tests/protocols/chat_backend.py)."""

from __future__ import annotations

import httpx
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.protocols.chat_gateway import ChatGateway, serve
from tests.support import wait_until

ASK = [{"role": "user", "content": "Weather in Paris?"}]
SUNNY = Chunks([{"role": "assistant", "content": ""}, {"content": "Sunny"}, {"content": "."}])
FLAVOURS = ["tgi", "vllm"]  # vLLM's translated streams otherwise ask for continuous usage as well


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend(rejects_stream_options=True).start()
    url = f"http://127.0.0.1:{backend.port}/v1"
    config = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}],
                 "admin_keys": [hash_key(ADMIN_KEY)]},
        "limits": {"tenants": {"acme": {"limits": {"token_budget": {"tokens": 10**6, "period": "day"}}}}},
        # Both speak chat completions only here: Messages and Responses are translated for them.
        "backends": {name: {"base_url": url, "model": "m-scripted", "flavor": name, "apis": ["chat"],
                            "stream_usage": False} for name in FLAVOURS},
        "reliability": NO_BREAKER,
        "models": {name: {"backends": [name], "retry": {"max_attempts": 1}} for name in FLAVOURS},
    }
    yield from serve(tmp_path_factory.mktemp("stream-usage-off-gw"), backend, config)


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


def _used(gateway: ChatGateway) -> int:
    """The tokens the tenant's budget has counted so far (/admin/tenants)."""
    r = httpx.get(f"{gateway.url}/admin/tenants", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5)
    return next(t for t in r.json()["tenants"] if t["tenant"] == "acme")["usage"]["tenant acme"]["token_budget"]["used"]


@pytest.mark.parametrize("alias", FLAVOURS)
def test_a_messages_stream_reaches_a_backend_that_refuses_stream_options_without_them(gateway, alias):
    # It was refused (the backend's 400, as an invalid_request_error) on every translated stream.
    gateway.backend.queue(SUNNY)
    before = _used(gateway)
    with gateway.anthropic().messages.stream(model=alias, max_tokens=16, messages=ASK) as stream:
        final = stream.get_final_message()
    assert "stream_options" not in gateway.backend.bodies[0] and gateway.backend.bodies[0]["stream"] is True
    assert final.content[0].text == "Sunny." and final.stop_reason == "end_turn"
    # The backend reported no usage: 0 tokens (Anthropic's usage needs a number; nothing was counted), never an
    # estimate shown as the backend's count.
    assert (final.usage.input_tokens, final.usage.output_tokens) == (0, 0)
    # Those zeros are not a count: the tenant's budget keeps the admission estimate (the prompt's estimate and
    # max_tokens), as for any answer without usage, not 0 tokens for a whole answer.
    assert wait_until(lambda: _used(gateway) - before >= 16, 5), _used(gateway) - before


@pytest.mark.parametrize("alias", FLAVOURS)
def test_a_responses_stream_reaches_a_backend_that_refuses_stream_options_without_them(gateway, alias):
    gateway.backend.queue(SUNNY)
    before = _used(gateway)
    events = list(gateway.openai().responses.create(model=alias, input="Weather in Paris?", stream=True,
                                                    max_output_tokens=16))
    assert "stream_options" not in gateway.backend.bodies[0] and gateway.backend.bodies[0]["stream"] is True
    final = events[-1]
    assert final.type == "response.completed" and final.response.output_text == "Sunny."
    assert final.response.usage is None  # none reported: none given (Response.usage is optional)
    assert wait_until(lambda: _used(gateway) - before >= 16, 5), _used(gateway) - before  # the estimate stands


@pytest.mark.parametrize("alias", FLAVOURS)
def test_a_messages_answer_without_usage_is_charged_the_estimate_not_zero(gateway, alias):
    # The JSON twin of the stream case above: the translation's zeros were recorded as the answer's usage, so the
    # tenant's budget counted 0 tokens for it.
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}, usage=None))
    before = _used(gateway)
    message = gateway.anthropic().messages.create(model=alias, max_tokens=16, messages=ASK)
    assert message.content[0].text == "Sunny." and message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (0, 0)  # nothing reported: no count made up
    assert wait_until(lambda: _used(gateway) - before >= 16, 5), _used(gateway) - before


def test_a_messages_answer_with_usage_is_charged_its_count(gateway):
    # A guard for the above: where the backend counted, its count is what the budget takes (12 + 5).
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}))
    before = _used(gateway)
    message = gateway.anthropic().messages.create(model="tgi", max_tokens=16, messages=ASK)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 5)
    assert wait_until(lambda: _used(gateway) - before == 17, 5), _used(gateway) - before


def test_a_chat_stream_passes_through_as_the_client_sent_it(gateway):
    # The chat path already honoured the setting: the gateway adds no stream_options of its own.
    gateway.backend.queue(SUNNY)
    chunks = list(gateway.openai().chat.completions.create(model="tgi", messages=ASK, stream=True))
    assert "stream_options" not in gateway.backend.bodies[0]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sunny."
