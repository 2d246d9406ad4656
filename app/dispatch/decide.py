"""Retry policy decisions (pure) and the retry budget that keeps an outage from multiplying load.

`decide` is the one place that says what happens after a failed attempt; app.dispatch.loop only acts on it.
Tenacity is not used: its stop/wait/retry callbacks split this one decision into three objects that
each re-derived the error, and the loop that acts on a Decision is a few lines.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass
from enum import Enum

from app.config import RetryBudget, RetryPolicy
from app.errors import (
    GatewayError,
    NoBackendAvailable,
    Overloaded,
    UpstreamMisconfigured,
    UpstreamProtocolError,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
    retry_after_s,
)
from app.upstream.adapters.base import is_context_overflow

# Timeouts that say "this backend did not start answering": another attempt may well succeed.
_RETRYABLE_TIMEOUTS = frozenset({"connect_timeout", "first_token_timeout"})


class Action(Enum):
    RETRY_SAME = "retry_same"  # another attempt; the failed backend is the only one left
    RETRY_OTHER = "retry_other"  # another attempt on another backend of the alias
    FALL_BACK = "fall_back"  # the next model alias (or the context fallback)
    GIVE_UP = "give_up"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    wait_s: float = 0.0
    reason: str = ""  # why a fallback happens (the x-slipstream-fallback token)
    target: str | None = None  # the alias to fall back to, when not simply the chain's next


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything `decide` reads besides the error, as plain data (tests feed it tables)."""

    attempts: int  # attempts made on this alias so far
    policy: RetryPolicy
    remaining_s: float  # of the request's deadline (inf without one)
    budget_left: bool  # whether the retry budget allows one more retry
    other_backend: bool  # whether a backend of the alias not yet failed could take a retry
    all_limited: bool  # whether every backend of the alias is cooling down after a 429
    next_alias: str | None  # the fallback chain's next alias the key may use
    context_fallback: str | None  # the alias's context_fallback, when the key may use it and it is unused
    jitter: float = 1.0  # a uniform draw in [0, 1) for full-jitter backoff


def decide(err: GatewayError, s: Situation) -> Decision:
    """What to do after `err`: retry here or elsewhere (after a wait), fall back, or give up."""
    if is_context_length(err):
        if s.context_fallback is not None:
            return Decision(Action.FALL_BACK, reason="context_length", target=s.context_fallback)
        return Decision(Action.GIVE_UP)
    if s.remaining_s <= 0:
        return Decision(Action.GIVE_UP)
    p = s.policy
    if s.attempts < p.max_attempts and s.budget_left and is_retryable(err, p):
        wait = s.jitter * min(p.backoff_max_s, p.backoff_base_s * 2 ** (s.attempts - 1))
        forced = retry_after_s(err) if s.all_limited else None
        # A Retry-After binds only when no other backend can take the retry; one past the deadline
        # means no retry at all (the SDK's own retry or the fallback chain may do better).
        if forced is None or forced < s.remaining_s:
            wait = min(max(wait, forced or 0.0), s.remaining_s)
            return Decision(Action.RETRY_OTHER if s.other_backend else Action.RETRY_SAME, wait)
    if s.next_alias is not None and warrants_fallback(err):
        return Decision(Action.FALL_BACK, reason=fallback_reason(err), target=s.next_alias)
    return Decision(Action.GIVE_UP)


def is_poison(failures: list[tuple[str, GatewayError]]) -> bool:
    """Whether a request's backend 5xx were its own fault: a backend adapter said so, or every backend
    it reached (two at least) answered it with the same status (llama.cpp: 500 for an image sent to a
    text-only model, 501 for an endpoint it lacks). Such failures must not eject backends for everyone."""
    if not failures:
        return False
    if all(err.request_caused for _, err in failures):
        return True
    if any(err.request_caused is False for _, err in failures):
        return False
    if all(err.status == 501 for _, err in failures):
        return True
    statuses = {err.status for _, err in failures}
    # 502-504 say "unavailable" whoever asks: only a 500 can be the request's own fault.
    return statuses == {500} and len({backend for backend, _ in failures}) >= 2


class PoisonBook:
    """Signatures (status + message) of 5xx that requests were found to cause, so the same error on a
    later request counts as the request's too, even when no second backend was tried (no retry budget
    left, one backend). Bounded; a signature is forgotten after `ttl_s`."""

    def __init__(self, max_entries: int = 256, ttl_s: float = 600.0) -> None:
        self._seen: dict[tuple[int, str], float] = {}
        self._max, self._ttl = max_entries, ttl_s

    @staticmethod
    def _key(err: GatewayError) -> tuple[int, str]:
        return err.status, _DIGITS.sub("#", err.message[:200])

    def learn(self, err: GatewayError, now: float | None = None) -> None:
        if len(self._seen) >= self._max:
            self._seen.pop(next(iter(self._seen)))
        self._seen[self._key(err)] = (time.monotonic() if now is None else now) + self._ttl

    def known(self, err: GatewayError, now: float | None = None) -> bool:
        until = self._seen.get(self._key(err))
        return until is not None and until > (time.monotonic() if now is None else now)


_DIGITS = re.compile(r"\d+")


def is_retryable(err: GatewayError, policy: RetryPolicy) -> bool:
    """Whether another attempt on the same alias may succeed where this one failed."""
    if isinstance(err, UpstreamStatus):
        return err.status in policy.retry_on_status and not err.request_caused
    if isinstance(err, UpstreamTimeout):
        return err.code in _RETRYABLE_TIMEOUTS
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError, UpstreamMisconfigured))


def is_context_length(err: GatewayError) -> bool:
    """A prompt too long for the model (the adapters name it `context_length_exceeded`)."""
    return isinstance(err, UpstreamStatus) and (
        err.code == "context_length_exceeded" or is_context_overflow(err.status, err.message))


def warrants_fallback(err: GatewayError) -> bool:
    """Failures of the backends, not of the request: another model may answer."""
    if isinstance(err, UpstreamStatus):
        return err.status == 429 or err.status >= 500
    if isinstance(err, UpstreamTimeout):
        return err.code != "deadline_exceeded"
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError, UpstreamMisconfigured, Overloaded,
                            NoBackendAvailable))


def fallback_reason(err: GatewayError) -> str:
    """A short token for the x-slipstream-fallback header."""
    if isinstance(err, UpstreamStatus):
        return f"status_{err.status}"
    return err.code or err.type


class RetryBudgetTracker:
    """Allows retries up to `ratio` of recent requests plus `min_per_s`, over a sliding window."""

    def __init__(self, config: RetryBudget) -> None:
        self.config = config
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()
        self.denied = 0

    def on_request(self, now: float | None = None) -> None:
        self._requests.append(time.monotonic() if now is None else now)

    def can_spend(self, now: float | None = None) -> bool:
        """Whether a retry would be allowed now (spends nothing)."""
        now = time.monotonic() if now is None else now
        self._trim(now)
        return len(self._retries) + 1 <= self.config.ratio * len(self._requests) + self.config.min_per_s * self.config.window_s

    def _trim(self, now: float) -> None:
        horizon = now - self.config.window_s
        for q in (self._requests, self._retries):
            while q and q[0] < horizon:
                q.popleft()

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

