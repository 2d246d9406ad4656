"""Serve a cached answer: as JSON, or replayed as SSE chunks with the client's include_usage choice."""

from __future__ import annotations

import copy
import time
import uuid

import orjson

from app.cache.entry import Hit

# Where a cached body keeps the backend model that answered it (never sent: hit_body takes it out).
SERVED_BY = "_slipstream_served_by"


def served_by(hit: Hit) -> str | None:
    """The backend model that produced a cached answer (x-slipstream-model on a hit, as on the miss)."""
    value = hit.answer.body.get(SERVED_BY)
    return value if isinstance(value, str) else None


def hit_body(hit: Hit) -> dict:
    """The response body for this hit, with honest usage and a fresh id.

    An exact hit keeps the stored token counts (same prompt, same answer) and reports the prompt as
    cached. A semantic hit counts only the answer's tokens: no model read this prompt, and its count
    is not known without a tokenizer, so it is not guessed.
    """
    body = copy.deepcopy(hit.answer.body)
    # The backend's timing report (llama.cpp `timings`) described the call that filled the cache, not this
    # answer; the model that served it is said in a header (SERVED_BY).
    body.pop("timings", None)
    body.pop(SERVED_BY, None)
    body["id"] = f"{'chatcmpl' if body.get('object') == 'chat.completion' else 'cmpl'}-cache-{uuid.uuid4().hex[:24]}"
    body["created"] = int(time.time())
    usage = body.get("usage")
    if isinstance(usage, dict):
        if hit.kind == "semantic-hit":
            completion = int(usage.get("completion_tokens") or 0)
            body["usage"] = {"prompt_tokens": 0, "completion_tokens": completion, "total_tokens": completion,
                             "prompt_tokens_details": {"cached_tokens": 0}}
        else:
            usage["prompt_tokens_details"] = {**(usage.get("prompt_tokens_details") or {}), "cached_tokens": usage.get("prompt_tokens", 0)}
    return body


def replay_events(body: dict, include_usage: bool) -> list[bytes]:
    """The SSE events a stream of this answer would have carried, [DONE] included."""
    chat = body.get("object") == "chat.completion"
    base = {k: body[k] for k in ("id", "created", "model") if k in body}
    base["object"] = "chat.completion.chunk" if chat else "text_completion"
    events = []

    def emit(choices: list, **extra) -> None:
        events.append(b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n")

    for choice in body.get("choices", []):
        i = choice.get("index", 0)
        if chat:
            message = choice.get("message") or {}
            emit([{"index": i, "delta": {"role": message.get("role", "assistant"), "content": ""}, "logprobs": None, "finish_reason": None}])
            if message.get("content"):
                emit([{"index": i, "delta": {"content": message["content"]}, "logprobs": None, "finish_reason": None}])
            if message.get("tool_calls"):
                calls = [{"index": k, **tc} for k, tc in enumerate(message["tool_calls"])]
                emit([{"index": i, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None}])
            emit([{"index": i, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}])
        else:
            emit([{"index": i, "text": choice.get("text", ""), "logprobs": None, "finish_reason": None}])
            emit([{"index": i, "text": "", "logprobs": None, "finish_reason": choice.get("finish_reason")}])
    if include_usage and isinstance(body.get("usage"), dict):
        emit([], usage=body["usage"])
    events.append(b"data: [DONE]\n\n")
    return events
