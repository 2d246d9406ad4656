"""A request's deadline: the time budget every attempt, retry and fallback shares."""

from __future__ import annotations

import time

from app.errors import InvalidRequest

DEADLINE_HEADER = "x-slipstream-timeout-ms"


def positive_ms(value: str | None, name: str) -> float | None:
    """A header of positive, finite milliseconds, in seconds (None when absent); anything else is the
    client's error, named by `name`, never ignored."""
    if value is None:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = -1.0
    if not ms > 0 or ms == float("inf"):  # `not ms > 0` also refuses NaN
        raise InvalidRequest(f"{name} must be a positive number of milliseconds", param=name)
    return ms / 1000


class Deadline:
    """An absolute end time on the monotonic clock, or none at all."""

    __slots__ = ("at",)

    def __init__(self, at: float | None) -> None:
        self.at = at

    @classmethod
    def from_header(cls, value: str | None) -> Deadline:
        """Parse `x-slipstream-timeout-ms`; a bad value is the client's error, not ignored."""
        seconds = positive_ms(value, DEADLINE_HEADER)
        return NO_DEADLINE if seconds is None else cls(time.monotonic() + seconds)

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
