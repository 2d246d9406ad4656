"""What a backend that speaks Messages natively is sent: the client's body, less the thinking blocks this gateway made.

A conversation begun on a chat backend carries thinking blocks the gateway wrote from the backend's reasoning, with
an empty signature (only Anthropic signs; app/protocols/messages_chat.py). Placed later on a native backend (an
alias mixing both kinds), Anthropic refuses them: it checks every thinking block's signature ("Invalid `signature`
in `thinking` block"). It does let a client omit earlier turns' thinking blocks, so those the gateway made are
dropped (their text is the model's private reasoning, not something said, so it does not become text either), and
a turn of nothing else is dropped whole. Consecutive turns of one role (the client's, or left so by a dropped turn)
are joined into one: Anthropic combines them itself, and other servers that speak Messages (llama.cpp) pass them to
chat templates that refuse two in a row.

One case needs more: with thinking on, Anthropic requires the final assistant turn of a tool-use loop (the one
whose tool_use the last user turn answers) to begin with its thinking block ("a final `assistant` message must
start with a thinking block"), and a chat backend's block cannot be given the signature it needs. Where the loop
holds a turn the gateway made, thinking is turned off for that request, Anthropic's own advice for the case ("To
avoid this requirement, disable `thinking`"); the answer names `thinking` in x-slipstream-ignored-fields. Once
the loop ends (a user turn that is not a tool result), thinking is on again.
"""

from __future__ import annotations

from app.protocols.chat_turns import as_parts
from app.protocols.messages_chat import thinks


def unsigned(block: object) -> bool:
    """A thinking block without a signature: one this gateway made (Anthropic's always carry one)."""
    if not isinstance(block, dict) or block.get("type") != "thinking":
        return False
    signature = block.get("signature")
    return not (isinstance(signature, str) and signature)


def native_body(body: dict) -> tuple[dict, list[str]] | None:
    """The body without the gateway's thinking blocks and with consecutive turns of one role joined, and the fields
    that then cannot be honoured (["thinking"] where a tool-use loop needs a signed block it no longer has); None
    when there is nothing to change."""
    messages = body["messages"]
    kept: list[dict] = []
    changed: list[int] = []  # indexes (in `kept`) of the assistant turns that lost a block, or where one was dropped
    joined = False
    for m in messages:
        content = m.get("content")
        if m.get("role") == "assistant" and isinstance(content, list) and any(unsigned(b) for b in content):
            blocks = [b for b in content if not unsigned(b)]
            changed.append(len(kept))
            if not blocks:
                continue
            m = {**m, "content": blocks}
        if kept and kept[-1].get("role") == m.get("role"):
            # Anthropic combines consecutive turns of one role itself; other servers that speak Messages (llama.cpp)
            # hand them to the chat template as they are, and templates that require the roles to alternate
            # (Gemma's, Mistral's) refuse them. Joined, they are the same turn to Anthropic.
            kept[-1] = {**kept[-1], "content": as_parts(kept[-1].get("content")) + as_parts(m.get("content"))}
            joined = True
            if changed and changed[-1] == len(kept):
                changed[-1] = len(kept) - 1
            continue
        kept.append(m)
    if not changed and not joined:
        return None
    out = {**body, "messages": kept}
    if thinks(body) and _loop_needs_signed_thinking(kept, changed):
        del out["thinking"]
        return out, ["thinking"]
    return out, []


def _loop_needs_signed_thinking(messages: list[dict], changed: list[int]) -> bool:
    """Whether the request ends inside a tool-use loop whose final assistant turn does not begin with a thinking
    block, and the loop holds a turn the gateway made (so the missing block is the gateway's, not the client's)."""
    start = len(messages)  # the loop's first turn: walk back over tool-result / tool-use pairs
    while start >= 2 and _tool_results(messages[start - 1]) and _tool_uses(messages[start - 2]):
        start -= 2
    if start == len(messages):
        return False  # the last turn answers no tool call: Anthropic asks for no thinking block
    final = messages[-2]["content"]
    if isinstance(final, list) and final and final[0].get("type") in ("thinking", "redacted_thinking"):
        return False
    return any(i >= start for i in changed)


def _tool_results(m: dict) -> bool:
    content = m.get("content")
    return m.get("role") == "user" and isinstance(content, list) and any(
        b.get("type") == "tool_result" for b in content)


def _tool_uses(m: dict) -> bool:
    content = m.get("content")
    return m.get("role") == "assistant" and isinstance(content, list) and any(
        b.get("type") == "tool_use" for b in content)
