"""Ids of its own for a cached answer served again, in every API: what the answer names (output items, tool calls,
tool_use blocks) gets a new id, so two answers a client receives never share one.

Clients dedupe items and pair a tool's result with its call by these ids (a chat `tool` message's tool_call_id, a
`tool_result`'s tool_use_id, a function_call_output's call_id), and OpenAI and Anthropic give every answer new ones
(ResponseOutputMessage.id, ResponseFunctionToolCall.call_id, ChatCompletionMessageFunctionToolCall.id, ToolUseBlock.id).
A replayed answer that kept the first one's ids was the first answer twice, to a client holding both. The cache key
never holds an answer's ids (it is the request's), so nothing else changes.
"""

from __future__ import annotations

import uuid


class FreshIds:
    """Old id -> new id for one answer: the same new id wherever the answer names the old one (a server tool's
    result names its call), each new id in the old one's shape, its prefix kept (call_, toolu_, fc_, msg_ ...)."""

    __slots__ = ("_new",)

    def __init__(self) -> None:
        self._new: dict[str, str] = {}

    def __call__(self, old: object, prefix: str) -> object:
        """The new id for `old` (`prefix` where the old one has none, as vLLM's `chatcmpl-tool-...`); anything
        that is not an id is left as it is."""
        if not isinstance(old, str) or not old:
            return old
        new = self._new.get(old)
        if new is None:
            head, sep, _ = old.partition("_")
            new = self._new[old] = f"{head if sep and head else prefix}_{uuid.uuid4().hex[:24]}"
        return new

    def named(self, old: object) -> object:
        """A reference to an id the answer gave earlier: its new id, or unchanged where it named none of them."""
        return self._new.get(old, old) if isinstance(old, str) else old


def fresh_chat_ids(body: dict) -> None:
    """A chat completion's tool calls (`choices[].message.tool_calls[].id`), in place."""
    ids = FreshIds()
    for choice in body.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        for call in (message.get("tool_calls") if isinstance(message, dict) else None) or ():
            if isinstance(call, dict) and "id" in call:
                call["id"] = ids(call["id"], "call")


def fresh_message_ids(body: dict) -> None:
    """A Messages answer's tool_use blocks (and server / MCP tool uses, whose result blocks name them), in place."""
    ids = FreshIds()
    blocks = [b for b in body.get("content") or () if isinstance(b, dict)]
    for block in blocks:
        if block.get("type") in ("tool_use", "server_tool_use", "mcp_tool_use") and "id" in block:
            block["id"] = ids(block["id"], "toolu")
    for block in blocks:
        if "tool_use_id" in block:
            block["tool_use_id"] = ids.named(block["tool_use_id"])


def fresh_output_ids(output: object) -> None:
    """A Responses answer's output items (msg_, fc_, rs_ ...) and each call's call_id, in place. The stored
    replay and any chain from it take these ids, as the client saw them."""
    ids = FreshIds()
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        if "id" in item:
            item["id"] = ids(item["id"], "item")
        if "call_id" in item:
            item["call_id"] = ids(item["call_id"], "call")
