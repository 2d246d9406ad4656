"""Retry policy decisions (pure) and the retry budget that keeps an outage from multiplying load."""

from __future__ import annotations

import re
import time
from collections import deque

from app.config import RetryBudget, RetryPolicy
from app.errors import (
    GatewayError,
    NoBackendAvailable,
    Overloaded,
    UpstreamProtocolError,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
)

# Timeouts that say "this backend did not start answering": another attempt may well succeed.
_RETRYABLE_TIMEOUTS = frozenset({"connect_timeout", "first_token_timeout"})
# How vLLM, TGI, llama.cpp and OpenAI word a prompt that does not fit the model's context.
_CONTEXT_LENGTH = re.compile(
    r"context length|context_length|context size|context window|maximum context|exceed_context|"
    r"must be <= \d+|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def is_retryable(err: GatewayError, policy: RetryPolicy) -> bool:
    """Whether another attempt on the same alias may succeed where this one failed."""
    if isinstance(err, UpstreamStatus):
        return err.status in policy.retry_on_status
    if isinstance(err, UpstreamTimeout):
        return err.code in _RETRYABLE_TIMEOUTS
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError))


def is_context_length(err: GatewayError) -> bool:
    return isinstance(err, UpstreamStatus) and err.status in (400, 413, 422) and bool(_CONTEXT_LENGTH.search(err.message))


def warrants_fallback(err: GatewayError) -> bool:
    """Failures of the backends, not of the request: another model may answer."""
    if isinstance(err, UpstreamStatus):
        return err.status == 429 or err.status >= 500
    if isinstance(err, UpstreamTimeout):
        return err.code != "deadline_exceeded"
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError, Overloaded, NoBackendAvailable))


def fallback_reason(err: GatewayError) -> str:
    """A short token for the x-slipstream-fallback header."""
    if isinstance(err, UpstreamStatus):
        return f"status_{err.status}"
    return err.code or err.type


def retry_after_s(err: GatewayError) -> float | None:
    """The backend's Retry-After in seconds, when it gave one in the delta-seconds form."""
    value = err.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def counts_against_backend(err: GatewayError) -> bool:
    """Failures that say the backend is unwell (a 429 only says it is busy; a 4xx is the request's fault)."""
    if isinstance(err, UpstreamStatus):
        return err.status >= 500
    if isinstance(err, UpstreamTimeout):
        return err.code != "deadline_exceeded"  # the client's budget ran out, not the backend's
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError))


class RetryBudgetTracker:
    """Allows retries up to `ratio` of recent requests plus `min_per_s`, over a sliding window."""

    def __init__(self, config: RetryBudget) -> None:
        self.config = config
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()
        self.denied = 0

    def on_request(self, now: float | None = None) -> None:
        self._requests.append(time.monotonic() if now is None else now)

    def try_spend(self, now: float | None = None) -> bool:
        """Take one retry from the budget; False (and counted) when it is spent."""
        now = time.monotonic() if now is None else now
        horizon = now - self.config.window_s
        for q in (self._requests, self._retries):
            while q and q[0] < horizon:
                q.popleft()
        allowed = self.config.ratio * len(self._requests) + self.config.min_per_s * self.config.window_s
        if len(self._retries) + 1 > allowed:
            self.denied += 1
            return False
        self._retries.append(now)
        return True

