"""The tokens a call reserves at admission: its prompt, estimated from its length, plus its output cap."""

from __future__ import annotations

from app.request import Endpoint, ParsedRequest

# About four characters a token for English text; the reservation is corrected by the reported
# usage when the answer ends, so the estimate only has to be in the right range.
_CHARS_PER_TOKEN = 4


def reservation(req: ParsedRequest, expected_output: int) -> int:
    """Prompt tokens (estimated) plus max_tokens, or the alias's expected output, per choice."""
    body = req.body
    prompt = max(1, _chars(body) // _CHARS_PER_TOKEN)
    if req.endpoint is Endpoint.EMBEDDINGS:
        return prompt
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    output = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else expected_output
    n = body.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 128 else 1
    return prompt + output * choices


def _chars(body: dict) -> int:
    chars = 0
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text") or "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    for field in ("prompt", "input"):
        value = body.get(field)
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, list):
            # Strings, or token ids (one token each: counted as four characters).
            chars += sum(len(v) if isinstance(v, str) else len(v) * 4 if isinstance(v, list) else 4 for v in value)
    return chars
