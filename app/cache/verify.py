"""The verification stage: an embedding only finds a candidate; verifiers confirm it before it is served.

Each verifier answers one question, "does the cached answer to `cached` answer `query`?", and every
configured verifier must say yes (cheapest first). No verdict in time means no: a miss, never a
wrong answer. The name of each verifier that confirmed a hit goes back to the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.cache import guard


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None  # why not, for metrics and debugging


class Verifier(Protocol):
    name: str

    async def verify(self, query: str, cached: str, timeout_s: float) -> Verdict:
        """Whether the answer cached for `cached` may be served for `query`, decided within timeout_s."""
        ...


class GuardVerifier:
    """The lexical and structural guard (app/cache/guard.py): microseconds, no I/O."""

    name = "guard"

    async def verify(self, query: str, cached: str, timeout_s: float) -> Verdict:
        why = guard.mismatch(cached, query)
        return Verdict(why is None, why)


async def verify_all(verifiers: list[Verifier], query: str, cached: str, timeout_s) -> tuple[bool, str | None]:
    """(True, "guard+judge") when every verifier confirms; (False, "judge:timeout") at the first that does not.

    `timeout_s` is called before each verifier for the time left, so a slow first one shortens the next.
    """
    for v in verifiers:
        verdict = await v.verify(query, cached, timeout_s())
        if not verdict.ok:
            return False, f"{v.name}:{verdict.reason or 'no'}"
    return True, "+".join(v.name for v in verifiers) or "similarity"
