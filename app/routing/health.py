"""Per-backend health: a circuit breaker for failures and a cooldown for rate limits.

Kept apart from the choice of backend (router, strategies), as Envoy keeps outlier detection apart
from load balancing.
"""

from __future__ import annotations

import time
from collections import deque
from enum import Enum

from app.config import BreakerConfig


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
