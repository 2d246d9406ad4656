"""Images a tool returned, on their way to a chat-completions backend (Responses' function_call_output and
Messages' tool_result, translated).

A chat `tool` message carries text only: OpenAI's chat API types its content as text parts, and vLLM and most
backends refuse an image part there. So the tool message keeps the tool's text and says where its images went,
and the images follow in a `user` message right after the run of tool messages (a user message between two tool
messages of one turn would cut them from their calls), each call's introduced by its call id, so the model can
tell which call returned which image. LiteLLM (BerriAI/litellm#34462) and Kimi Code (MoonshotAI/kimi-code#626)
translate it the same way; openai-agents' converter drops the images instead, which this gateway never does.
"""

from __future__ import annotations


def note(count: int) -> str:
    """The tool message's words for the images it cannot carry."""
    return f"[{count} image{'s' if count > 1 else ''} returned by this call: in the user message after the tool results]"


def parts(images: list[tuple[str, list[dict]]]) -> list[dict]:
    """The user message's content for the images of a run of tool results: (call id, its image parts) in order."""
    out: list[dict] = []
    for call_id, call_images in images:
        out.append({"type": "text", "text": f"The image{'s' if len(call_images) > 1 else ''} returned by tool call "
                                            f"{call_id}:"})
        out.extend(call_images)
    return out
