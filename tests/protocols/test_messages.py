"""The Messages protocol on its own: parsing, what its events mean, its error shapes, its cache replay,
and the translation to and from chat completions (no servers needed)."""

from __future__ import annotations

import orjson
import pytest

from app.errors import (
    AllAttemptsFailed,
    InvalidRequest,
    ModelNotFound,
    NoBackendAvailable,
    Overloaded,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    Unauthorized,
    UpstreamTimeout,
)
from app.protocols import MESSAGES, EventKind
from app.protocols.messages import MessageAssembler, message_events
from app.protocols.messages_chat import StreamTranslator, chat_body, message_body
from app.upstream.sse import EventSplitter, event_data


def parse(**body):
    return MESSAGES.parse(orjson.dumps({"model": "m", "max_tokens": 64, **body}))


def events_of(stream: bytes) -> list[tuple[str, dict]]:
    out = []
    for raw in EventSplitter().feed(stream):
        name = raw.split(b"\n", 1)[0].removeprefix(b"event: ").decode()
        out.append((name, orjson.loads(event_data(raw))))
    return out


def test_size_counts_system_turns_and_tool_results_and_caps_at_max_tokens():
    req = parse(system=[{"type": "text", "text": "s" * 40}], messages=[
        {"role": "user", "content": "u" * 40},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r" * 40}]}])
    assert req.size.prompt_tokens == (40 + 40 + 2 + 40) // 4
    assert req.size.output_cap == 64 and req.size.reservation(999) == req.size.prompt_tokens + 64


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"max_tokens": 5, "messages": "x"}, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "system": [{"type": "image", "source": {}}]},
     "system.0"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "END"}, "stop_sequences"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"description": "d"}]},
     "tools.0.name"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}},
     "tool_choice.type"),
    # Anthropic refuses it too; over a chat backend it would have been dropped (only a string maps to `user`).
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "metadata": {"user_id": 42}},
     "metadata.user_id"),
])
def test_a_bad_param_is_named(body, param):
    with pytest.raises(InvalidRequest) as exc:
        MESSAGES.parse(orjson.dumps({"model": "m", **body}))
    assert exc.value.param == param and param in exc.value.message


@pytest.mark.parametrize(("err", "status", "etype"), [
    (InvalidRequest("x"), 400, "invalid_request_error"),
    (Unauthorized("x"), 401, "authentication_error"),
    (PermissionDenied("x"), 403, "permission_error"),
    (ModelNotFound("x"), 404, "not_found_error"),
    (PayloadTooLarge("x"), 413, "request_too_large"),
    (RateLimited("x"), 429, "rate_limit_error"),
    (Overloaded("x"), 529, "overloaded_error"),
    (NoBackendAvailable("x"), 529, "overloaded_error"),
    (AllAttemptsFailed("x"), 503, "api_error"),
    (UpstreamTimeout("x"), 504, "timeout_error"),
])
def test_gateway_errors_take_anthropics_types_and_statuses(err, status, etype):
    assert MESSAGES.error_status(err) == status
    assert orjson.loads(MESSAGES.error_body(err)) == {"type": "error", "error": {"type": etype, "message": "x"}}
    assert MESSAGES.error_event(err).startswith(b"event: error\ndata: {")


def test_a_429_says_when_to_come_back():
    assert MESSAGES.error_headers(RateLimited("x"))["retry-after"] == "1"


@pytest.mark.parametrize(("data", "kind"), [
    (b'{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}', EventKind.USAGE),
    (b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}', EventKind.NONE),
    (b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}', EventKind.CONTENT),
    (b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}', EventKind.CONTENT),
    (b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}',
     EventKind.FINISH | EventKind.USAGE),
    (b'{"type":"message_stop"}', EventKind.END),
    (b'{"type":"ping"}', EventKind.NONE),
    (b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}', EventKind.ERROR),
])
def test_messages_events_classify(data, kind):
    assert MESSAGES.classify(data) == kind


def test_stream_usage_folds_start_and_delta_with_cache_reads_as_prompt():
    usage = MESSAGES.stream_usage(b'{"type":"message_start","message":{"usage":{"input_tokens":3,'
                                  b'"cache_read_input_tokens":10,"output_tokens":1}}}', None)
    usage = MESSAGES.stream_usage(b'{"type":"message_delta","delta":{},"usage":{"output_tokens":7}}', usage)
    assert (usage.prompt_tokens, usage.completion_tokens) == (13, 7)


MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
           "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 9},
           "content": [{"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
                       {"type": "text", "text": "Checking."},
                       {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]}


def test_a_cached_message_replays_as_its_event_sequence_and_assembles_back():
    events = message_events(MESSAGE)
    names = [name for name, _ in events_of(b"".join(events))]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    asm = MessageAssembler()
    for _, data in events_of(b"".join(events)):
        asm.feed(orjson.dumps(data))
    assert asm.result() == MESSAGE and not asm.broken


def test_an_exact_hit_reports_its_prompt_as_cache_read():
    body = orjson.loads(orjson.dumps(MESSAGE))
    MESSAGES.served_again(body, "abc", semantic=False)
    assert body["id"] == "msg_cache_abc"
    assert body["usage"] == {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 12,
                             "output_tokens": 9}


def test_the_rate_limit_headers_are_anthropics():
    from app.protocols import LimitFigure
    headers = MESSAGES.ratelimit_headers([LimitFigure("requests", 10, 4, 2.0), LimitFigure("tokens", 100, 50, 1.0)])
    assert headers["anthropic-ratelimit-requests-limit"] == "10"
    assert headers["anthropic-ratelimit-tokens-remaining"] == "50"
    assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")


# --- translation ----------------------------------------------------------------------------------------

def test_a_conversation_with_tools_translates_to_chat():
    req = parse(system="Be brief.", stop_sequences=["END"], temperature=0, metadata={"user_id": "u1"},
                tools=[{"name": "weather", "description": "Weather", "input_schema": {"type": "object"}}],
                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                messages=[
                    {"role": "user", "content": [{"type": "text", "text": "Oslo?"}, {"type": "image", "source": {
                        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, {
                        "type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                                                 {"type": "text", "text": "Thanks"}]},
                ])
    chat = orjson.loads(chat_body(req, "backend-model", stream=True))
    assert chat["model"] == "backend-model" and chat["max_tokens"] == 64 and chat["stop"] == ["END"]
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["user"] == "u1" and chat["temperature"] == 0
    assert chat["tools"] == [{"type": "function", "function": {"name": "weather", "description": "Weather",
                                                                "parameters": {"type": "object"}}}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Oslo?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "user", "content": "Thanks"},
    ]


@pytest.mark.parametrize(("extra", "param"), [
    # Anthropic's rule for enabled thinking, kept where the gateway stands in for Anthropic (no backend sees it).
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1023}}, "thinking.budget_tokens"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages.0.content.0.type"),
    # Thinking belongs to assistant turns (there it is dropped on the way to chat; tests/protocols/test_tools_over_chat.py).
    ({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}]},
     "messages.0.content.0.type"),
    # A chat `tool` message carries text only, and a document has no chat part: what a tool returned would be
    # lost (its images travel in a user message instead: tests/protocols/test_tools_over_chat.py).
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}]},
     "messages.0.content.0.content.0.type"),
])
def test_what_a_chat_backend_cannot_honour_is_refused_naming_the_param(extra, param):
    req = parse(**{"messages": [{"role": "user", "content": "x"}], **extra})
    with pytest.raises(InvalidRequest) as exc:
        chat_body(req, "m", stream=False)
    assert exc.value.param == param and exc.value.status == 400


def test_a_chat_answer_translates_back_to_a_message():
    chat = {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 8}}}
    assert message_body(chat, "alias") == {
        "id": "msg_chatcmpl-1", "type": "message", "role": "assistant", "model": "alias", "stop_reason": "tool_use",
        "stop_sequence": None, "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}}],
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 8,
                  "output_tokens": 5}}


def test_a_chat_stream_translates_to_the_messages_event_sequence():
    chunks = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Let me check."}, "finish_reason": None}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                         "function": {"name": "weather",
                                                                                      "arguments": '{"ci'}}]},
                                  "finish_reason": None}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {
            "arguments": 'ty":"Oslo"}'}}]}, "finish_reason": None}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 6}},
    ]
    t = StreamTranslator("alias")
    out = b"".join(b"".join(t.feed(orjson.dumps(c))) for c in chunks) + b"".join(t.feed(b"[DONE]"))
    events = events_of(out)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    asm = MessageAssembler()
    for _, data in events:
        asm.feed(orjson.dumps(data))
    message = asm.result()
    assert message["content"] == [{"type": "text", "text": "Let me check."},
                                  {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}}]
    assert message["stop_reason"] == "tool_use" and message["model"] == "alias"
    assert message["usage"]["input_tokens"] == 11 and message["usage"]["output_tokens"] == 6


def test_a_chat_stream_that_ends_without_a_finish_reason_is_not_complete():
    t = StreamTranslator("alias")
    t.feed(orjson.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}))
    with pytest.raises(Exception, match="without a finish reason"):
        t.finish()


# --- the cache and telemetry read the protocol --------------------------------------------------------------

def test_the_semantic_cache_compares_the_last_user_turn_and_keeps_the_system_prompt_exact():
    from app.cache.keys import exact_key, semantic_query

    def req(system: str, question: str, **extra):
        return parse(system=system, temperature=0, messages=[
            {"role": "user", "content": "Earlier question"}, {"role": "assistant", "content": "Earlier answer"},
            {"role": "user", "content": [{"type": "text", "text": question}]}], **extra)

    a, b = semantic_query("t", req("Be brief.", "How do I reset my router?")), \
        semantic_query("t", req("Be brief.", "How can I reset my router?"))
    assert a.text == "How do I reset my router?" and a.history == ("Earlier question", "Earlier answer")
    assert a.scope == b.scope
    assert semantic_query("t", req("Be verbose.", "How do I reset my router?")).scope != a.scope
    assert semantic_query("u", req("Be brief.", "How do I reset my router?")).scope != a.scope
    # Tools, thinking, images: exact matching only.
    assert semantic_query("t", req("Be brief.", "x", tools=[{"name": "f", "input_schema": {}}])) is None
    assert semantic_query("t", req("Be brief.", "x", thinking={"type": "enabled", "budget_tokens": 1024})) is None
    assert exact_key("t", req("Be brief.", "x")) != exact_key("t", req("Be brief.", "y"))


def test_messages_is_a_chat_operation_in_genai_telemetry():
    from app.protocols import OPERATIONS
    assert OPERATIONS["messages"] == "chat" and OPERATIONS["chat/completions"] == "chat"
