"""A cached answer served again names ids of its own in every API, for every kind of hit (exact, semantic, stale):
one rule (app/protocols/fresh_ids.py). The SDK-level tests are in test_tools_over_chat.py (chat, Messages) and
responses/test_over_chat.py (Responses); semantic hits never hold tool calls there (tools are exact-only), so the
rule is pinned here on the bodies themselves."""

from __future__ import annotations

import copy

import pytest

from app.cache.entry import CachedAnswer, Hit
from app.cache.replay import hit_body
from app.protocols import CHAT, MESSAGES, RESPONSES

CHAT_BODY = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [
    {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "chatcmpl-tool-9", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}}]}
MESSAGE_BODY = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
                "content": [{"type": "server_tool_use", "id": "srvtoolu_a", "name": "web_search", "input": {}},
                            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_a", "content": []},
                            {"type": "tool_use", "id": "toolu_b", "name": "f", "input": {}}],
                "usage": {"input_tokens": 5, "output_tokens": 2}}
RESPONSE_BODY = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "output": [
    {"type": "reasoning", "id": "rs_a", "summary": []},
    {"type": "function_call", "id": "fc_b", "call_id": "call_b", "name": "f", "arguments": "{}", "status": "completed"}]}

KINDS = ["hit", "semantic-hit", "stale"]


def _served(body: dict, protocol, kind: str) -> dict:
    stored = copy.deepcopy(body)
    served = hit_body(Hit(CachedAnswer(stored, 0, 10**10), kind), protocol)
    assert stored == body  # the entry itself is never changed: the next hit gets ids of its own again
    return served


@pytest.mark.parametrize("kind", KINDS)
def test_a_chat_answers_tool_calls_get_new_ids_in_their_own_shape(kind):
    calls = _served(CHAT_BODY, CHAT, kind)["choices"][0]["message"]["tool_calls"]
    new = [c["id"] for c in calls]
    assert new[0].startswith("call_") and new[0] != "call_a"
    assert new[1].startswith("call_")  # vLLM's id has no prefix of OpenAI's shape: a call_ one
    assert [c["function"]["name"] for c in calls] == ["f", "g"]
    assert new != [c["id"] for c in _served(CHAT_BODY, CHAT, kind)["choices"][0]["message"]["tool_calls"]]


@pytest.mark.parametrize("kind", KINDS)
def test_a_messages_answers_tool_uses_get_new_ids_and_a_server_tools_result_follows_its_call(kind):
    use, result, tool = _served(MESSAGE_BODY, MESSAGES, kind)["content"]
    assert use["id"].startswith("srvtoolu_") and use["id"] != "srvtoolu_a"
    assert result["tool_use_id"] == use["id"]
    assert tool["id"].startswith("toolu_") and tool["id"] != "toolu_b"


@pytest.mark.parametrize("kind", KINDS)
def test_a_responses_answers_items_and_call_ids_are_new(kind):
    reasoning, call = _served(RESPONSE_BODY, RESPONSES, kind)["output"]
    assert reasoning["id"].startswith("rs_") and reasoning["id"] != "rs_a"
    assert call["id"].startswith("fc_") and call["id"] != "fc_b"
    assert call["call_id"].startswith("call_") and call["call_id"] != "call_b"
