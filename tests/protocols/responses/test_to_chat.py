"""Responses -> chat completions: what maps (README table "Responses over a chat-only backend") and what is refused."""

from __future__ import annotations

import pytest

from app.errors import InvalidRequest
from app.protocols.responses.to_chat import to_chat


def chat(body: dict, items: list | None = None) -> dict:
    return to_chat({"model": "m", **body}, items if items is not None else body.get("input", []))


def test_instructions_become_the_first_system_message_then_the_items_in_order():
    out = chat({"instructions": "be brief"}, [{"role": "user", "content": "hi"}])
    assert out["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_input_parts_map_to_chat_parts():
    items = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}]}]
    assert chat({}, items)["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}]


def test_a_tool_round_trip_maps_to_assistant_tool_calls_and_a_tool_message():
    items = [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "noon"},
    ]
    messages = chat({}, items)["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "time", "arguments": "{}"}}]}
    assert messages[2:] == [{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                            {"role": "tool", "tool_call_id": "call_2", "content": "noon"}]


def test_an_earlier_answer_becomes_an_assistant_message():
    items = [{"role": "user", "content": "a"},
             {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "b", "annotations": [], "logprobs": []}]},
             {"role": "user", "content": "c"}]
    assert chat({}, items)["messages"][1] == {"role": "assistant", "content": "b"}


def test_parameters_map_to_their_chat_names():
    out = chat({"max_output_tokens": 50, "temperature": 0.2, "top_p": 0.9, "parallel_tool_calls": False,
                "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                           "strict": True}],
                "tool_choice": {"type": "function", "name": "f"},
                "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": True}},
                "reasoning": {"effort": "low", "summary": "auto"}, "metadata": {"k": "v"}, "store": True,
                "stream": True}, [])
    assert out["max_tokens"] == 50 and out["temperature"] == 0.2 and out["top_p"] == 0.9
    assert out["parallel_tool_calls"] is False
    assert out["tools"] == [{"type": "function", "function": {"name": "f", "description": "d",
                                                              "parameters": {"type": "object"}, "strict": True}}]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert out["response_format"] == {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"},
                                                                              "strict": True}}
    assert out["reasoning_effort"] == "low"
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert "metadata" not in out and "store" not in out and "input" not in out


def test_logprobs_asked_by_include_or_top_logprobs_are_asked_of_the_chat_backend():
    asked = to_chat({"model": "m", "include": ["message.output_text.logprobs"]}, [])
    assert asked["logprobs"] is True and "top_logprobs" not in asked
    top = to_chat({"model": "m", "include": ["message.output_text.logprobs"], "top_logprobs": 3}, [])
    assert top["logprobs"] is True and top["top_logprobs"] == 3
    assert "logprobs" not in to_chat({"model": "m", "include": ["reasoning.encrypted_content"]}, [])


@pytest.mark.parametrize("body, items, param", [
    ({"tools": [{"type": "web_search"}]}, [], "tools[0].type"),
    ({"tool_choice": {"type": "file_search"}}, [], "tool_choice"),
    ({"background": True}, [], "background"),
    ({"prompt": {"id": "pmpt_1"}}, [], "prompt"),
    ({"text": {"format": {"type": "grammar"}}}, [], "text.format.type"),
    ({}, [{"type": "item_reference", "id": "msg_1"}], "input[0].type"),
    ({}, [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], "input[0].content[0].type"),
    ({}, [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}], "input[0].content[0].image_url"),
    ({"frobnicate": 1}, [], "frobnicate"),
])
def test_what_chat_cannot_honour_is_refused_naming_the_param(body, items, param):
    with pytest.raises(InvalidRequest) as err:
        chat(body, items)
    assert err.value.param == param and err.value.status == 400


def test_images_a_tool_returned_come_before_the_next_turns_reasoning_where_reasoning_goes_back():
    pixel = "data:image/png;base64,iVBORw0KGgo="
    items = [{"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": pixel}]},
             {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "I see it."}]},
             {"type": "message", "role": "assistant", "content": "A cat."}]
    roles = [(m["role"], m.get("reasoning_content")) for m in to_chat({"model": "m"}, items, reasoning_back=True)["messages"]]
    assert roles == [("assistant", None), ("tool", None), ("user", None), ("assistant", "I see it.")]
    assert [m["role"] for m in to_chat({"model": "m"}, items)["messages"]] == ["assistant", "tool", "user", "assistant"]
