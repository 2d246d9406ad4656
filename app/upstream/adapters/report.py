"""What a backend says about one request (its own timing and prompt-cache use) and about its load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BackendReport:
    """Per-request figures as the backend reported them (seconds, tokens); None where it said nothing."""

    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None  # the whole prompt
    output_tokens: int | None = None
    # Of the prompt: tokens the server actually processed, and tokens it reused from its KV cache.
    prompt_processed: int | None = None
    prompt_cached: int | None = None
    # The server's own total for the request (TGI x-total-time, OpenAI openai-processing-ms): what the
    # gateway measured beyond it is network.
    server_s: float | None = None
    source: str = ""  # which format it came from: llamacpp | tgi | ollama | openai

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.queue_s, self.prefill_s, self.decode_s, self.server_s))

    def processed_share(self) -> float | None:
        """The share of the prompt the server processed (1.0: nothing came from its cache), when known."""
        total = self.prompt_tokens
        if total and self.prompt_processed is not None:
            return min(1.0, max(0.0, self.prompt_processed / total))
        if total and self.prompt_cached is not None:
            return min(1.0, max(0.0, (total - self.prompt_cached) / total))
        return None

    def merged(self, other: BackendReport) -> BackendReport:
        """This report with the gaps filled from `other` (a body report and a header report of one call)."""
        if not other:
            return self if self or self.prompt_processed is not None else other
        values = {f: getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
                  for f in ("queue_s", "prefill_s", "decode_s", "prompt_tokens", "output_tokens",
                            "prompt_processed", "prompt_cached", "server_s")}
        return BackendReport(**values, source=self.source or other.source)


NO_REPORT = BackendReport()


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """A server's own view of its load, where it publishes one. None: not published."""

    slots: int | None = None  # requests it runs at once
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    source: str = ""  # where it came from, e.g. "llamacpp /props + /metrics"
    rtt_s: float | None = None  # a measured round trip to the server that never waits for a slot
    # Prompt tokens looked up in, and found in, the server's prefix cache since it started (counters).
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    # The prompt tokens a second the server has processed since it started, over all it has processed
    # (llama.cpp's prompt_tokens_total / prompt_seconds_total): its own measure of its prefill rate.
    prefill_tokens_per_s: float | None = None


def ms(v: Any) -> float | None:
    try:
        return float(v) / 1000 if v is not None else None
    except (TypeError, ValueError):
        return None


def ns(v: Any) -> float | None:
    try:
        return float(v) / 1e9 if v is not None else None
    except (TypeError, ValueError):
        return None


def integer(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
