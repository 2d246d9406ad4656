"""The Responses protocol's own decisions: what its events mean, its cache turns, its replay, its size estimate."""

from __future__ import annotations

import orjson
import pydantic
from openai.types.responses import ResponseStreamEvent

from app.protocols import EventKind
from app.protocols.responses.from_chat import from_chat, shell
from app.protocols.responses.protocol import RESPONSES, event_type, replay_events

STREAM_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def test_events_classify_by_their_type_first_or_not():
    assert RESPONSES.classify(b'{"type":"response.output_text.delta","delta":"x"}') == EventKind.CONTENT
    assert RESPONSES.classify(b'{"item_id":"m","type":"response.output_text.delta"}') == EventKind.CONTENT
    assert RESPONSES.classify(b'{"type":"response.function_call_arguments.delta"}') == EventKind.CONTENT
    final = RESPONSES.classify(b'{"type":"response.completed","response":{"status":"completed"}}')
    assert final == EventKind.USAGE | EventKind.FINISH | EventKind.END
    assert RESPONSES.classify(b'{"type":"error","message":"x"}') == EventKind.ERROR
    assert RESPONSES.classify(b'{"type":"response.failed","response":{}}') == EventKind.ERROR
    assert RESPONSES.classify(b'{"type":"response.created","response":{}}') == EventKind.NONE
    assert event_type(b'{"type":"response.in_progress"}') == b"response.in_progress"


def test_usage_and_stop_reason_come_from_the_final_response():
    data = orjson.dumps({"type": "response.incomplete", "response": {
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 9, "output_tokens": 4}}})
    usage = RESPONSES.stream_usage(data, None)
    assert (usage.prompt_tokens, usage.completion_tokens) == (9, 4)
    assert RESPONSES.stop_reason(data) == "length"
    calls = {"status": "completed", "output": [{"type": "function_call"}]}
    assert RESPONSES.finish_reasons(calls) == ["tool_calls"]


def test_the_last_user_turn_is_the_semantic_cache_text_and_earlier_turns_its_scope():
    body = {"model": "m", "instructions": "be brief", "input": [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "capital of France?"}]}]}
    text, earlier = RESPONSES.cache_turns(body)
    assert text == "capital of France?"
    assert earlier == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "hello"}]
    assert RESPONSES.cache_turns({"model": "m", "input": "just this"}) == ("just this", [])


def test_no_semantic_cache_for_images_tool_outputs_or_untranslatable_turns():
    image = {"role": "user", "content": [{"type": "input_image", "image_url": "data:x"}]}
    assert RESPONSES.cache_turns({"model": "m", "input": [image]}) is None
    output = {"type": "function_call_output", "call_id": "c", "output": "sunny"}
    assert RESPONSES.cache_turns({"model": "m", "input": [output]}) is None
    ref = {"type": "item_reference", "id": "msg_1"}
    assert RESPONSES.cache_turns({"model": "m", "input": [ref, {"role": "user", "content": "x"}]}) is None


def test_a_stored_answer_replays_as_valid_events_ending_with_completed():
    chat = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    answer = from_chat(chat, shell("resp_r", "alias", {"model": "alias", "input": "x"}))
    events = [orjson.loads(e.split(b"\ndata: ", 1)[1]) for e in replay_events(answer)]
    for e in events:
        STREAM_EVENT.validate_python(e)
    assert events[-1]["type"] == "response.completed" and events[-1]["response"] == answer
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Hello"


def test_served_again_gets_a_fresh_id_and_honest_usage():
    body = {"id": "resp_old", "usage": {"input_tokens": 10, "output_tokens": 3, "input_tokens_details": {}}}
    RESPONSES.served_again(body, "abc", semantic=False)
    assert body["id"] != "resp_old" and body["usage"]["input_tokens_details"]["cached_tokens"] == 10
    RESPONSES.served_again(body, "abc", semantic=True)
    assert body["usage"]["input_tokens"] == 0 and body["usage"]["output_tokens"] == 3


def test_served_again_echoes_the_askers_fields_that_the_cache_key_leaves_out():
    body = {"id": "resp_old", "metadata": {"who": "alice"}, "user": "alice-1", "store": False,
            "previous_response_id": "resp_alices", "temperature": 0}
    RESPONSES.served_again(body, "abc", semantic=False, asked={"model": "m", "input": "x", "temperature": 0})
    assert body["metadata"] == {} and body["user"] is None and body["store"] is True
    assert body["previous_response_id"] is None and body["temperature"] == 0
    RESPONSES.served_again(body, "abc", semantic=True, asked={"metadata": {"who": "bob"}, "user": "bob-2",
                                                              "previous_response_id": "resp_bobs"})
    assert body["metadata"] == {"who": "bob"} and body["user"] == "bob-2"
    assert body["previous_response_id"] == "resp_bobs"


def test_the_size_estimate_counts_instructions_and_every_turns_text():
    req = RESPONSES.parse(orjson.dumps({"model": "m", "instructions": "x" * 40, "max_output_tokens": 7, "input": [
        {"role": "user", "content": "y" * 40}, {"type": "function_call_output", "call_id": "c", "output": "z" * 40}]}))
    assert req.size.prompt_tokens == 30 and req.size.output_cap == 7


def test_the_prefix_text_of_a_chain_extends_the_previous_turns():
    turn1 = {"model": "m", "instructions": "i", "input": [{"role": "user", "content": "one"}]}
    turn2 = {**turn1, "input": [*turn1["input"], {"type": "message", "role": "assistant", "content": []},
                                {"role": "user", "content": "two"}]}
    a, b = RESPONSES.prefix_text(turn1), RESPONSES.prefix_text(turn2)
    assert b.startswith(a[:-1])
