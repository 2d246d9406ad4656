"""The shared limiter: one Lua script call per admission (and one per settlement) on Redis's clock.

Every replica admits against the same counters, so a limit holds however many replicas run. Redis
errors surface as LimiterDown; what to do then (fail open or closed) is the admission service's call.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from app.admission.limits import BUDGET, CONCURRENT, REQUESTS, Check, CheckState, Decision
from app.admission.resp import RespClient, RespConnectionError, RespError, bulk
from app.cache.redis_store import connect

_SCRIPT = (Path(__file__).parent / "limiter.lua").read_text()
_SHA = hashlib.sha1(_SCRIPT.encode()).hexdigest()
_CODE = {REQUESTS: "r", "tokens": "t", CONCURRENT: "c", BUDGET: "b"}
# After this many failures in a row, Redis is not asked for a short while: a blackholed server
# would otherwise cost every request the whole timeout.
_TRIPS_AFTER = 3
_SKIP_S = 0.5
# Opening a connection happens once per connection; a loaded box may take longer than one call does.
_CONNECT_TIMEOUT_S = 1.0


class LimiterDown(Exception):
    """The shared store could not be reached or did not answer in time."""


class RedisLimiter:
    def __init__(self, url: str, prefix: str, timeout_s: float, window_s: float, lease_ttl_s: float) -> None:
        # Plain redis:// and rediss:// go through the lean pipelined client; cluster and sentinel
        # URLs through redis-py, as the cache reads them.
        if url.startswith(("redis://", "rediss://")):
            self._resp: RespClient | None = RespClient(url, timeout_s, max(timeout_s, _CONNECT_TIMEOUT_S))
            self._r = None
        else:
            self._resp = None
            self._r = connect(url, timeout_s)
            self._script = self._r.register_script(_SCRIPT)
        self._prefix = prefix
        self.window_s = window_s
        self.lease_ttl_s = lease_ttl_s
        self._failures = 0
        self._skip_until = 0.0
        # Per set of checks, the parts of the command that never change, encoded once.
        self._encoded: dict[tuple[Check, ...], tuple[bytes, bytes]] = {}

    async def admit(self, checks: tuple[Check, ...], request_id: str, tokens: int) -> Decision:
        reply = await self._call("admit", checks, request_id, tokens)
        if int(reply[0]) == 0:
            wait = float(reply[2])
            return Decision(False, _states(checks, reply, 4), checks[int(reply[1]) - 1],
                            retry_after_s=None if wait < 0 else wait, never=bool(int(reply[3])))
        decision = Decision(True, _states(checks, reply, 1))
        decision.periods = {c.key: _text(reply[3 + 3 * i]) for i, c in enumerate(checks) if c.kind == BUDGET}
        return decision

    async def settle(self, checks: tuple[Check, ...], request_id: str, reserved: int, used: int,
                     periods: dict[str, str]) -> None:
        await self._call("settle", checks, request_id, used - reserved, periods)

    async def peek(self, checks: tuple[Check, ...]) -> list[CheckState]:
        return _states(checks, await self._call("peek", checks, "", 0), 1)

    async def _call(self, mode: str, checks: tuple[Check, ...], request_id: str, tokens: int,
                    periods: dict[str, str] | None = None) -> list:
        now = time.monotonic()
        if now < self._skip_until:
            raise LimiterDown("redis skipped after repeated failures")
        try:
            if self._resp is not None:
                reply = await self._eval(self._command(mode, checks, request_id, tokens, periods))
            else:
                args: list = [mode, request_id, self.window_s, self.lease_ttl_s, tokens]
                for c in checks:
                    args += (_CODE[c.kind], c.limit, (periods or {}).get(c.key, "") if mode == "settle" else c.period)
                reply = await self._script([self._prefix + c.key for c in checks], args)
        except (RedisError, RespError, RespConnectionError, OSError, TimeoutError) as exc:
            self._failures += 1
            if self._failures >= _TRIPS_AFTER:
                self._skip_until = now + _SKIP_S
            raise LimiterDown(f"{type(exc).__name__}: {exc}") from None
        self._failures = 0
        return reply

    def _command(self, mode: str, checks: tuple[Check, ...], request_id: str, tokens: int,
                 periods: dict[str, str] | None) -> bytes:
        """EVALSHA for the lean client, with the keys and the checks' own arguments encoded once."""
        static = self._encoded.get(checks)
        if static is None:
            keys = b"".join(bulk(self._prefix + c.key) for c in checks)
            triples = b"".join(bulk(_CODE[c.kind]) + bulk(c.limit) + bulk(c.period) for c in checks)
            static = self._encoded[checks] = (bulk("EVALSHA") + bulk(_SHA) + bulk(len(checks)) + keys, triples)
        head, triples = static
        if mode == "settle":
            triples = b"".join(bulk(_CODE[c.kind]) + bulk(c.limit) + bulk((periods or {}).get(c.key, "")) for c in checks)
        dynamic = bulk(mode) + bulk(request_id) + bulk(self.window_s) + bulk(self.lease_ttl_s) + bulk(tokens)
        return b"*%d\r\n" % (3 + 5 + 4 * len(checks)) + head + dynamic + triples

    async def _eval(self, command: bytes) -> Any:
        assert self._resp is not None  # the lean client: set whenever the script path runs
        try:
            return await self._resp.call_encoded(command)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self._resp.call("SCRIPT", "LOAD", _SCRIPT)  # once per Redis (and after a restart)
        return await self._resp.call_encoded(command)

    async def aclose(self) -> None:
        if self._resp is not None:
            await self._resp.aclose()
        elif self._r is not None:
            await self._r.aclose()


def _states(checks: tuple[Check, ...], reply: list, at: int) -> list[CheckState]:
    return [CheckState(c, float(reply[at + 3 * i]), float(reply[at + 1 + 3 * i])) for i, c in enumerate(checks)]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
