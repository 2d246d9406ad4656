"""A stream assembled and replayed is the same answer, in both directions."""

from __future__ import annotations

import orjson

from app.cache.entry import CachedAnswer, Hit
from app.cache.replay import hit_body
from app.protocols import CHAT
from app.upstream.assemble import StreamAssembler
from app.upstream.sse import EventSplitter, event_data

BODY = {
    "id": "x", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there"}, "logprobs": None, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


def reassemble(events: list[bytes]) -> dict:
    asm = StreamAssembler(chat=True)
    for ev in EventSplitter().feed(b"".join(events)):
        data = event_data(ev)
        if data != b"[DONE]":
            asm.feed(data)
    return asm.result()


def test_replay_then_assemble_round_trips():
    out = reassemble(CHAT.replay(BODY, include_usage=True))
    assert out["choices"] == BODY["choices"]
    assert out["usage"] == BODY["usage"]


def test_a_stored_answers_log_probabilities_are_replayed_to_a_streaming_client():
    tokens = [{"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []} for t in ("Hello", " there")]
    body = {**BODY, "choices": [{**BODY["choices"][0], "logprobs": {"content": tokens, "refusal": None}}]}
    out = reassemble(CHAT.replay(body, include_usage=False))
    assert out["choices"] == body["choices"]


def test_replay_without_usage_has_no_usage_chunk():
    events = CHAT.replay(BODY, include_usage=False)
    assert not any(b'"usage"' in e for e in events)
    assert events[-1] == b"data: [DONE]\n\n"


def test_tool_calls_are_assembled_from_fragments():
    asm = StreamAssembler(chat=True)
    for delta in ({"role": "assistant"}, {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "get_", "arguments": '{"ci'}}]},
                  {"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": 'ty": "Oslo"}'}}]}):
        asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    msg = asm.result()["choices"][0]["message"]
    assert msg["tool_calls"] == [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    assert msg["content"] is None


def test_semantic_hit_usage_counts_only_the_answer():
    body = hit_body(Hit(CachedAnswer(BODY, 0, 10**10), "semantic-hit", 0.95), CHAT)
    assert body["usage"]["prompt_tokens"] == 0 and body["usage"]["completion_tokens"] == 2
    exact = hit_body(Hit(CachedAnswer(BODY, 0, 10**10), "hit"), CHAT)
    assert exact["usage"]["prompt_tokens_details"]["cached_tokens"] == 5
    assert BODY["usage"].get("prompt_tokens_details") is None  # the stored answer is not modified
