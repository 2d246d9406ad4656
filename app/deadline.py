"""A request's deadline: the time budget every attempt, retry and fallback shares."""

from __future__ import annotations

import time

from app.errors import InvalidRequest

DEADLINE_HEADER = "x-slipstream-timeout-ms"


class Deadline:
    """An absolute end time on the monotonic clock, or none at all."""

    __slots__ = ("at",)

    def __init__(self, at: float | None) -> None:
        self.at = at

    @classmethod
    def from_header(cls, value: str | None) -> Deadline:
        """Parse `x-slipstream-timeout-ms`; a bad value is the client's error, not ignored."""
        if value is None:
            return NO_DEADLINE
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not ms > 0 or ms != ms or ms == float("inf"):
            raise InvalidRequest(f"{DEADLINE_HEADER} must be a positive number of milliseconds", param=DEADLINE_HEADER)
        return cls(time.monotonic() + ms / 1000)

    def remaining(self) -> float:
        """Seconds left (inf without a deadline; never negative)."""
        if self.at is None:
            return float("inf")
        return max(0.0, self.at - time.monotonic())

    def cap(self, seconds: float) -> float:
        return min(seconds, self.remaining())

    @property
    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


NO_DEADLINE = Deadline(None)
