"""Per-backend health: what an attempt's end says of its backend (`verdict`), a circuit breaker for
failures and a cooldown for rate limits.

Kept apart from the choice of backend (router, strategies), as Envoy keeps outlier detection apart
from load balancing.
"""

from __future__ import annotations

import time
from collections import deque
from enum import Enum

from app.config import BreakerConfig
from app.errors import FirstTokenTimeout, GatewayError, UpstreamStatus, counts_against_backend

# A first-token timeout on a request whose first token was predicted, from its send, at least this share of
# the limit away is the wait routing priced, not the backend failing (Verdict.PRICED_WAIT). Below it the
# backend was far slower than predicted (a factor over 1 / PRICED_SHARE at the least): a hung server reads
# so from its first request, since every prediction there is a prefill of seconds against a limit of a
# minute (by default), and is ejected as before. The factor leaves room for the model's error on a backend
# jammed by a burst: a queue of long prefills, each priced at a rate learned on a quieter server.
PRICED_SHARE = 0.5


class Verdict(Enum):
    """What one attempt's end says of its backend's health (Router.report acts on it)."""

    # Answered, or ended by no fault of the backend's (the request's own error, the client's deadline).
    SOUND = "sound"
    # A 429: the backend is busy. It counts in the failure share (a backend answering fast 429s must not
    # look fast) and sets a cooldown, and never ejects.
    BUSY = "busy"
    # The backend failed: the failure share and the breaker count it.
    FAILED = "failed"
    # No first token within the limit, where routing had predicted a wait about that long (PRICED_SHARE):
    # censored evidence of the slowness the latency model prices, which counted as a failure too charged
    # it twice (see `verdict`). It moves neither the failure share nor the breaker.
    PRICED_WAIT = "priced_wait"


def verdict(err: GatewayError | None, predicted_wait_s: float | None) -> Verdict:
    """What an attempt that ended with `err` (None: answered) says of its backend, given the wait for its
    first token routing predicted from its send (None: no prediction).

    A first-token timeout says only that the wait was longer than the limit. Where routing predicted a wait
    that long, the slowness is in every prediction there already (the queue is in the in-flight book), and
    counted as a failure too it was charged twice. On two real llama.cpp servers (issue 24, mixed prompt
    lengths, seed 83), the bench's warm-up burst queued two requests on the throttled server behind 38 s
    prefills; both reached the 60 s first-token timeout, and as failures they set its failure share to
    0.31 and 0.12 before the next runs, scaling every score there x2.2 and x1.5: the short prompts all
    went to the quick server (medians 1.19x / 1.15x least_inflight's; 0.45x / 0.62x in a rerun where no
    timeout came). The timeout is not learned as a latency either: the model learns a prefill from an
    answer's own report, and a wait cut off at the limit has no split between queue and prefill to learn.
    A timeout far beyond its prediction stays a failure: that is how a hung backend looks."""
    if err is None:
        return Verdict.SOUND
    if isinstance(err, UpstreamStatus) and err.status == 429:
        return Verdict.BUSY
    if not counts_against_backend(err):
        return Verdict.SOUND
    if (isinstance(err, FirstTokenTimeout) and predicted_wait_s is not None
            and predicted_wait_s >= PRICED_SHARE * err.limit_s):
        return Verdict.PRICED_WAIT
    return Verdict.FAILED


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """Ejects a backend after consecutive failures or a high error rate; readmits it through one probe."""

    __slots__ = ("_consecutive", "_probing", "_window", "config", "on_change", "open_until", "state", "trips")

    def __init__(self, config: BreakerConfig, on_change=None) -> None:
        self.config = config
        self.state = BreakerState.CLOSED
        self.open_until = 0.0
        self.trips = 0
        self._consecutive = 0
        self._window: deque[tuple[float, bool]] = deque()
        self._probing = False
        self.on_change = on_change  # called with (old, new) state: metrics and events hook in

    def available(self, now: float) -> bool:
        """Whether a call may go to this backend now (an elapsed cooldown admits one probe)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now >= self.open_until
        return not self._probing

    def on_chosen(self, now: float) -> None:
        if self.state is BreakerState.OPEN and now >= self.open_until:
            self._set(BreakerState.HALF_OPEN)
        if self.state is BreakerState.HALF_OPEN:
            self._probing = True

    def inconclusive(self) -> None:
        """An attempt ended saying nothing of the backend's health (Verdict.PRICED_WAIT): nothing is counted,
        and a half-open probe it was lets the next call probe (held, the backend would never be tried again)."""
        self._probing = False

    def record(self, ok: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.state is BreakerState.HALF_OPEN:
            self._probing = False
            if ok:
                self.trips = 0
                self._reset_counts()
                self._set(BreakerState.CLOSED)
            else:
                self._trip(now)
            return
        if self.state is BreakerState.OPEN:
            return  # a late result from before the ejection
        self._consecutive = 0 if ok else self._consecutive + 1
        window = self._window
        window.append((now, ok))
        horizon = now - self.config.window_s
        while window and window[0][0] < horizon:
            window.popleft()
        if not ok and (self._consecutive >= self.config.consecutive_failures or self._rate_tripped()):
            self._trip(now)

    def _rate_tripped(self) -> bool:
        n = len(self._window)
        if n < self.config.min_requests:
            return False
        failures = sum(1 for _, ok in self._window if not ok)
        return failures / n >= self.config.error_rate

    def _trip(self, now: float) -> None:
        self.trips += 1
        cooldown = min(self.config.max_cooldown_s, self.config.cooldown_s * 2 ** (self.trips - 1))
        self.open_until = now + cooldown
        self._reset_counts()
        self._set(BreakerState.OPEN)

    def _reset_counts(self) -> None:
        self._consecutive = 0
        self._window.clear()

    def _set(self, state: BreakerState) -> None:
        old, self.state = self.state, state
        if old is not state and self.on_change is not None:
            self.on_change(old, state)

    def seconds_until_available(self, now: float) -> float:
        return max(0.0, self.open_until - now) if self.state is BreakerState.OPEN else 0.0
