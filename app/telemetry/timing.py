"""What backends report about their own timing, parsed from the shapes the real servers use.

- llama.cpp server: a `timings` object (prompt_ms = prefill, predicted_ms = decode) in the body, and
  in the final chunk of a stream; no queue time.
- TGI: x-queue-time, x-inference-time (prefill + decode), x-time-per-token (all ms) on non-streamed
  responses only.
- Ollama native API: prompt_eval_duration, eval_duration, load_duration in nanoseconds.
- vLLM: nothing per request; /metrics gauges (running, waiting, KV-cache use), scraped elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendReport:
    """Per-request times in seconds as the backend reported them; None where it said nothing."""

    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    source: str = ""  # which format it came from: llamacpp | tgi | ollama

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.queue_s, self.prefill_s, self.decode_s))


NO_REPORT = BackendReport()


def from_llamacpp(obj: Mapping) -> BackendReport:
    """llama.cpp's `timings` object, from a response body or a stream's final chunk."""
    t = obj.get("timings")
    if not isinstance(t, Mapping):
        return NO_REPORT
    return BackendReport(
        prefill_s=_ms(t.get("prompt_ms")),
        decode_s=_ms(t.get("predicted_ms")),
        prompt_tokens=_int(t.get("prompt_n")),
        output_tokens=_int(t.get("predicted_n")),
        source="llamacpp",
    )


def from_tgi_headers(headers: Mapping[str, str]) -> BackendReport:
    """TGI's timing headers; prefill is inference time less the per-token decode time."""
    queue = _ms(headers.get("x-queue-time"))
    inference = _ms(headers.get("x-inference-time"))
    per_token = _ms(headers.get("x-time-per-token"))
    generated = _int(headers.get("x-generated-tokens"))
    if queue is None and inference is None:
        return NO_REPORT
    decode = prefill = None
    if inference is not None and per_token is not None and generated:
        decode = min(inference, per_token * max(0, generated - 1))
        prefill = inference - decode
    return BackendReport(queue, prefill, decode, _int(headers.get("x-prompt-tokens")), generated, "tgi")


def from_ollama(obj: Mapping) -> BackendReport:
    """Ollama's native durations (nanoseconds); load time counts as queueing."""
    if "eval_duration" not in obj and "prompt_eval_duration" not in obj:
        return NO_REPORT
    return BackendReport(
        queue_s=_ns(obj.get("load_duration")),
        prefill_s=_ns(obj.get("prompt_eval_duration")),
        decode_s=_ns(obj.get("eval_duration")),
        prompt_tokens=_int(obj.get("prompt_eval_count")),
        output_tokens=_int(obj.get("eval_count")),
        source="ollama",
    )


def from_body(obj: Mapping) -> BackendReport:
    """Whichever body format is present (llama.cpp or Ollama)."""
    return from_llamacpp(obj) or from_ollama(obj)


_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-+\d.eEinfNa]+)")


@dataclass(frozen=True, slots=True)
class VllmLoad:
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None


def parse_vllm_metrics(text: str) -> VllmLoad:
    """vLLM's /metrics: requests running and waiting, and KV-cache use (both metric names vLLM used)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m:
            name = m.group(1)
            values[name] = values.get(name, 0.0) + float(m.group(3))  # summed over label sets (models)
    kv = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc"))
    return VllmLoad(values.get("vllm:num_requests_running"), values.get("vllm:num_requests_waiting"), kv)


def _ms(v: object) -> float | None:
    try:
        return float(v) / 1000 if v is not None else None
    except (TypeError, ValueError):
        return None


def _ns(v: object) -> float | None:
    try:
        return float(v) / 1e9 if v is not None else None
    except (TypeError, ValueError):
        return None


def _int(v: object) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
