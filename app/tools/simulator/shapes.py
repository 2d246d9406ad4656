"""OpenAI response bodies and stream chunks as the simulator emits them, plus backend timing reports."""

from __future__ import annotations

from app.tools.simulator.engine import Timings


def completion_body(kind: str, rid: str, created: int, model: str, texts: list[str], finish: str, usage: dict) -> dict:
    """A whole chat.completion or text_completion body with one choice per text."""
    if kind == "chat":
        choices = [
            {"index": i, "message": {"role": "assistant", "content": t}, "logprobs": None, "finish_reason": finish}
            for i, t in enumerate(texts)
        ]
        obj = "chat.completion"
    else:
        choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": finish} for i, t in enumerate(texts)]
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": choices, "usage": usage}


def chunk(kind: str, rid: str, created: int, model: str, index: int, text: str | None, finish: str | None, first: bool = False) -> dict:
    """One streamed chunk for one choice: text, a role opener (chat) or the finish marker."""
    if kind == "chat":
        delta: dict = {}
        if first:
            delta = {"role": "assistant", "content": ""}
        elif text is not None:
            delta = {"content": text}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}


def usage_chunk(kind: str, rid: str, created: int, model: str, usage: dict) -> dict:
    """The include_usage chunk: `choices` is empty, as the OpenAI spec requires."""
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage}


def usage(prompt: int, completion: int, cached: int | None = None) -> dict:
    """OpenAI's usage object; with `cached`, the prompt tokens served from the prefix cache, as
    OpenAI and vLLM (--enable-prompt-tokens-details) report them."""
    out: dict[str, int | dict[str, int]] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def llamacpp_timings(t: Timings, prompt_n: int, predicted_n: int) -> dict:
    """The `timings` object llama.cpp's server adds to a final response or chunk: `prompt_n` counts
    only the prompt tokens processed, `cache_n` those reused from the cache."""
    prompt_ms, predicted_ms = t.prefill_s * 1000, t.decode_s * 1000
    return {
        "cache_n": t.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / (prompt_ms / 1000) if prompt_ms else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": predicted_n / (predicted_ms / 1000) if predicted_ms else 0.0,
    }


def tgi_headers(t: Timings, prompt_n: int, generated_n: int) -> dict[str, str]:
    """The timing headers TGI puts on non-streaming responses (milliseconds, whole numbers)."""
    inference_ms = (t.finished - t.admitted) * 1000
    total_ms = (t.finished - t.arrived) * 1000
    return {
        "x-compute-type": "gpu+optimized",
        "x-compute-time": f"{inference_ms / 1000:.6f}",
        "x-total-time": str(round(total_ms)),
        "x-validation-time": "0",
        "x-queue-time": str(round(t.queue_s * 1000)),
        "x-inference-time": str(round(inference_ms)),
        "x-time-per-token": str(round(inference_ms / generated_n)) if generated_n else "0",
        "x-prompt-tokens": str(prompt_n),
        "x-generated-tokens": str(generated_n),
    }
