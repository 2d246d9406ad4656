"""The in-process limiter: the embedded default (one replica, no Redis), and the reference the Redis
script is tested against. Everything happens in one synchronous step, so it is atomic on the loop."""

from __future__ import annotations

import time

from app.admission import buckets
from app.admission.limits import BUDGET, CONCURRENT, REQUESTS, TOKENS, Check, CheckState, Decision


class LocalLimiter:
    def __init__(self, window_s: float, lease_ttl_s: float) -> None:
        self.window_s = window_s
        self.lease_ttl_s = lease_ttl_s
        self._buckets: dict[str, list[float]] = {}  # key -> [used, at (monotonic)]
        self._leases: dict[str, dict[str, float]] = {}  # key -> request id -> expiry (monotonic)
        self._budgets: dict[str, tuple[str, float]] = {}  # key -> (period id, tokens used)

    async def admit(self, checks: tuple[Check, ...], request_id: str, tokens: int) -> Decision:
        return self.admit_now(checks, request_id, tokens, time.monotonic(), time.time())

    def admit_now(self, checks: tuple[Check, ...], request_id: str, tokens: int, now: float, wall: float) -> Decision:
        """Admit against every check, or change nothing and name the first that refuses."""
        levels = [self._level(c, now, wall) for c in checks]
        refused = self._refusal(checks, levels, tokens, wall)
        if refused is not None:
            refused.states = self._states(checks, levels, wall)
            return refused
        decision = Decision(True)
        for c, level in zip(checks, levels):
            cost = self._cost(c, tokens)
            if c.kind == CONCURRENT:
                self._leases.setdefault(c.key, {})[request_id] = now + self.lease_ttl_s
                decision.states.append(CheckState(c, c.limit - level - 1, 0.0))
            elif c.kind == BUDGET:
                period, end = buckets.period_of(wall, c.period)
                self._budgets[c.key] = (period, level + cost)
                decision.periods[c.key] = period
                decision.states.append(CheckState(c, c.limit - level - cost, end - wall))
            else:
                left = level - cost
                self._buckets[c.key] = [c.limit - left, now]
                decision.states.append(CheckState(c, left, buckets.reset_s(left, c.limit, self.window_s)))
        return decision

    def _refusal(self, checks: tuple[Check, ...], levels: list[float], tokens: int, wall: float) -> Decision | None:
        for c, level in zip(checks, levels):
            cost = self._cost(c, tokens)
            if c.kind == CONCURRENT:
                if level + 1 > c.limit:
                    return Decision(False, denied=c)
            elif c.kind == BUDGET:
                if level + cost > c.limit:
                    _, end = buckets.period_of(wall, c.period)
                    return Decision(False, denied=c, retry_after_s=end - wall, never=cost > c.limit)
            elif cost > level:
                if cost > c.limit:
                    return Decision(False, denied=c, never=True)
                return Decision(False, denied=c, retry_after_s=buckets.wait_for(level, cost, c.limit, self.window_s))
        return None

    async def settle(self, checks: tuple[Check, ...], request_id: str, reserved: int, used: int,
                     periods: dict[str, str]) -> None:
        self.settle_now(checks, request_id, reserved, used, periods, time.monotonic())

    def settle_now(self, checks: tuple[Check, ...], request_id: str, reserved: int, used: int,
                   periods: dict[str, str], now: float) -> None:
        """Give back the concurrency slot and correct the token reservation to what was used."""
        delta = used - reserved
        for c in checks:
            if c.kind == CONCURRENT:
                self._leases.get(c.key, {}).pop(request_id, None)
            elif c.kind == TOKENS and delta:
                level = self._level(c, now, 0.0)
                self._buckets[c.key] = [max(0.0, c.limit - level + delta), now]
            elif c.kind == BUDGET and delta:
                period, spent = self._budgets.get(c.key, ("", 0.0))
                if period == periods.get(c.key):  # the period has not turned since admission
                    self._budgets[c.key] = (period, max(0.0, spent + delta))

    async def peek(self, checks: tuple[Check, ...]) -> list[CheckState]:
        """Each check's current state, changing nothing."""
        now, wall = time.monotonic(), time.time()
        return self._states(checks, [self._level(c, now, wall) for c in checks], wall)

    def _states(self, checks: tuple[Check, ...], levels: list[float], wall: float) -> list[CheckState]:
        out = []
        for c, level in zip(checks, levels):
            if c.kind == CONCURRENT:
                out.append(CheckState(c, c.limit - level, 0.0))
            elif c.kind == BUDGET:
                out.append(CheckState(c, c.limit - level, buckets.period_of(wall, c.period)[1] - wall))
            else:
                out.append(CheckState(c, level, buckets.reset_s(level, c.limit, self.window_s)))
        return out

    def _level(self, c: Check, now: float, wall: float) -> float:
        """Buckets: tokens left. Concurrency: slots in use. Budget: tokens spent this period."""
        if c.kind in (REQUESTS, TOKENS):
            state = self._buckets.get(c.key)
            return c.limit if state is None else buckets.level(state[0], state[1], now, c.limit, self.window_s)
        if c.kind == CONCURRENT:
            leases = self._leases.get(c.key)
            if not leases:
                return 0
            for rid in [r for r, exp in leases.items() if exp <= now]:
                del leases[rid]
            return len(leases)
        period, spent = self._budgets.get(c.key, ("", 0.0))
        return spent if period == buckets.period_of(wall, c.period)[0] else 0.0

    @staticmethod
    def _cost(c: Check, tokens: int) -> float:
        return 1 if c.kind in (REQUESTS, CONCURRENT) else tokens

    async def aclose(self) -> None:
        pass
