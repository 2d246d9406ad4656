"""A translation's chat messages as strict chat templates take them: consecutive turns of one speaker are one.

Anthropic combines consecutive user (or assistant) turns into one; OpenAI's Responses input may open with its
instructions and then developer or system items, and hold several user messages in a row (the instructions a
coding agent sends, then its environment). Sent one message each, chat templates that require the roles to
alternate refuse them: llama.cpp with Gemma's template answers 400 for two user messages in a row ("Conversation
roles must alternate") and for a second system message, and 200 for the same words as one message (checked on
the real server: /work/notes/t39m/llama_alternate.sh, /work/notes/lead/sysdev/). Joined as parts, each turn's
words stay as they were; two system texts are joined as one text, a paragraph apart.
"""

from __future__ import annotations

_JOINED = ("user", "assistant", "system")


def add_turn(messages: list[dict], message: dict) -> None:
    """`message` appended, or joined to the last one where both are the same speaker's."""
    last = messages[-1] if messages else None
    role = message["role"]
    if last is None or last["role"] != role or role not in _JOINED:
        messages.append(message)
        return
    before, now = last.get("content"), message.get("content")
    if role == "system" and isinstance(before, str) and isinstance(now, str):
        messages[-1] = {"role": role, "content": "\n\n".join(t for t in (before, now) if t)}
        return
    parts = as_parts(before) + as_parts(now)
    joined: dict = {"role": role, "content": parts or None}
    calls = (last.get("tool_calls") or []) + (message.get("tool_calls") or [])
    if calls:
        joined["tool_calls"] = calls
    messages[-1] = joined


def as_parts(content: object) -> list[dict]:
    """A turn's content as a list of parts: a string is one text part, `{"type": "text", "text": ...}`, the shape
    OpenAI's chat parts and Anthropic's content blocks share."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []
