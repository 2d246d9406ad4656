"""The client-protocol seam: each API decides its own request facts, event meanings and answer shapes,
and the core reads one prompt-size estimate for admission, routing and prediction."""

from __future__ import annotations

import orjson
import pytest

from app.admission.headers import ratelimit_headers
from app.admission.limits import TOKENS, Check, CheckState
from app.admission.reserve import reservation
from app.dispatch.loop import route_context
from app.errors import InvalidRequest, RateLimited
from app.protocols import CHAT, COMPLETIONS, EMBEDDINGS, MESSAGES, PROTOCOLS, RESPONSES, EventKind


def chat(**extra) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 400}], **extra})


def test_every_served_path_has_the_protocol_of_that_path():
    for path, protocol in PROTOCOLS.items():
        assert path == "/v1/" + protocol.value


@pytest.mark.parametrize("extra", [
    {}, {"max_tokens": 50}, {"max_completion_tokens": 70}, {"max_tokens": 50, "max_completion_tokens": 70},
    {"max_tokens": -1}, {"n": 3, "max_tokens": 10},
])
def test_admission_and_routing_read_one_size_estimate(extra):
    req = CHAT.parse(chat(**extra))
    ctx = route_context(req)
    assert ctx.prompt_tokens == req.size.prompt_tokens == 100
    assert ctx.max_tokens == req.size.output_cap
    choices = extra.get("n", 1)
    assert reservation(req, expected_output=256) == 100 + (req.size.output_cap or 256) * choices


def test_max_completion_tokens_wins_over_max_tokens_everywhere():
    req = CHAT.parse(chat(max_tokens=50, max_completion_tokens=70))
    assert req.size.output_cap == route_context(req).max_tokens == 70
    assert reservation(req, expected_output=999) == 100 + 70


def test_an_embedding_reserves_only_its_input():
    req = EMBEDDINGS.parse(orjson.dumps({"model": "m", "input": "y" * 40}))
    assert reservation(req, expected_output=256) == 10


def test_the_prompt_estimate_counts_completions_token_ids():
    req = COMPLETIONS.parse(orjson.dumps({"model": "m", "prompt": [[1, 2, 3, 4]]}))
    assert req.size.prompt_tokens == 4


@pytest.mark.parametrize("body,param", [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": "5"}, "max_completion_tokens"),
    ({"model": "m", "messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_a_bad_field_is_named(body, param):
    with pytest.raises(InvalidRequest) as exc:
        CHAT.parse(orjson.dumps(body))
    assert exc.value.param == param


@pytest.mark.parametrize("data,kind", [
    (b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}', EventKind.NONE),
    (b'{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}', EventKind.CONTENT),
    (b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c"}]},"finish_reason":null}]}', EventKind.CONTENT),
    (b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}', EventKind.FINISH),
    (b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', EventKind.USAGE),
    (b'{"choices":[{"index":0,"text":"a","finish_reason":"length"}],"usage":{"prompt_tokens":1}}',
     EventKind.CONTENT | EventKind.FINISH | EventKind.USAGE),
    (b'{"choices":[],"usage":null}', EventKind.NONE),
    (b'{"error":{"message":"boom"}}', EventKind.ERROR),
    (b"[DONE]", EventKind.END),
])
def test_openai_stream_events_classify(data, kind):
    assert CHAT.classify(data) == kind


def test_usage_is_read_in_the_gateways_terms():
    usage = CHAT.usage({"usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    assert (usage.prompt_tokens, usage.completion_tokens) == (7, 3)
    assert CHAT.usage({}) is None


def test_openai_errors_keep_openais_shape_and_retry_hints():
    err = RateLimited("slow down")
    assert orjson.loads(CHAT.error_body(err)) == {"error": {"message": "slow down", "type": "requests", "param": None,
                                                            "code": "rate_limit_exceeded"}}
    assert CHAT.error_event(err).startswith(b'data: {"error"')
    assert CHAT.error_headers(err)["x-should-retry"] == "true"


def test_openai_rate_limit_headers_are_x_ratelimit():
    state = CheckState(Check(TOKENS, "t:tokens", 1000, "tenant t"), 250.4, 1.5)
    assert ratelimit_headers([state], CHAT) == {"x-ratelimit-limit-tokens": "1000",
                                                "x-ratelimit-remaining-tokens": "250",
                                                "x-ratelimit-reset-tokens": "1.5s"}


def test_a_cached_chat_answer_replays_as_chat_chunks_ending_in_done():
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]}
    events = CHAT.replay(body, include_usage=False)
    assert events[-1] == b"data: [DONE]\n\n"
    kinds = [CHAT.classify(e[6:-2]) for e in events]
    assert EventKind.CONTENT in kinds and EventKind.FINISH in kinds


def test_an_embedding_is_predicted_as_a_prefill_with_no_decode():
    from app.routing.latency_model import LatencyModel
    from app.routing.predict import estimate
    from tests.routing.test_strategies import State

    ctx = route_context(EMBEDDINGS.parse(orjson.dumps({"model": "m", "input": "y" * 40})))
    est = estimate(State("embed", model=LatencyModel()), ctx)
    # Not the alias's learned chat answer length (hundreds of tokens of decode that never happen).
    assert est.decode_tokens == 0
    assert est.e2e_s == est.ttft_s


def test_each_api_names_its_user_turns_text_for_the_caches_category():
    # Every user turn, media and tool turns included (their text parts), oldest first; nothing else.
    photo = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    assert CHAT.user_texts({"messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "price of gold"},
        {"role": "assistant", "content": "..."}, {"role": "user", "content": [{"type": "text", "text": "now?"}, photo]},
    ]}) == ["price of gold", "now?"]
    assert MESSAGES.user_texts({"system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"},
                                     {"type": "text", "text": "and today?"}]}]}) == ["and today?"]
    assert RESPONSES.user_texts({"input": "weather right now"}) == ["weather right now"]
    assert RESPONSES.user_texts({"instructions": "x", "input": [
        {"type": "function_call_output", "call_id": "c", "output": "sunny"},
        {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]}]}) == ["and tomorrow?"]
    assert COMPLETIONS.user_texts({"prompt": "once upon"}) == ["once upon"]
    assert COMPLETIONS.user_texts({"prompt": ["a", [1, 2], "b"]}) == ["a", "b"]
    # An embedding's input is not a question: it has no category to age by.
    assert EMBEDDINGS.user_texts({"input": "bitcoin price now"}) == []
