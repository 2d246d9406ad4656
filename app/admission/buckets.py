"""The limiting arithmetic, shared by the in-process limiter and mirrored line for line in limiter.lua.

Rates are token buckets: a bucket holds at most `limit` and refills `limit` per window, continuously,
so there is no window edge to burst across. Reserving takes the estimate out at once; reconciling
puts back what was not used, or takes the overrun (the bucket may go negative: a debt the next
requests wait out). A bucket is stored as what was taken from it (`used`, draining at the refill
rate) rather than what is left, so a reload that changes the limit keeps what was used.
"""

from __future__ import annotations

import calendar
import math
from datetime import UTC, datetime

DAY_S = 86400


def level(used: float, at: float, now: float, limit: float, window_s: float) -> float:
    """What a bucket holds now, from what had been taken from it at `at`."""
    return limit - max(0.0, used - max(0.0, now - at) * limit / window_s)


def wait_for(level: float, cost: float, limit: float, window_s: float) -> float:
    """Seconds until a bucket at `level` holds `cost`."""
    return max(0.0, (cost - level) * window_s / limit)


def reset_s(level: float, limit: float, window_s: float) -> float:
    """Seconds until a bucket at `level` is full again (OpenAI's x-ratelimit-reset-*)."""
    return max(0.0, (limit - level) * window_s / limit)


def period_of(now: float, period: str) -> tuple[str, float]:
    """The budget period (UTC day or month) `now` (Unix seconds) falls in: its id and its end."""
    if period == "day":
        day = math.floor(now / DAY_S)
        return f"d{day}", (day + 1) * DAY_S
    t = datetime.fromtimestamp(now, UTC)
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return f"m{t.year * 100 + t.month}", float(calendar.timegm((year, month, 1, 0, 0, 0)))
