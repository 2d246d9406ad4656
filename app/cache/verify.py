"""The verification stage: an embedding only finds a candidate; verifiers confirm it before it is served.

Each verifier answers one question, "does the cached answer to `cached` answer `query`?". No verdict
in time means no: a miss, never a wrong answer. The name of the verifier that confirmed a hit goes
back to the client (`x-slipstream-cache-verifier`).

Who decides (`confirm`):
- the guard (microseconds) first: what it aligns is served at once, so a hit it confirms never waits
  on a model; what it rejects for a number, a negation or a direction is a miss, whatever else says;
  what it aligns only through WordNet synonyms ("meaning") goes to the contextual check;
- contextual alignment (`cache.semantic.context`, off by default), where the guard is unsure and only
  common words differ: one more pass of the embedding model over each question (app/cache/context.py);
- an LLM judge, if configured, only where the guard is unsure (words it could not align, or their
  order) and the similarity is at least `judge_from` (`judge.min_similarity`): that band is where free rewordings
  are, and the judge can serve them. With the guard off, the judge decides every candidate.
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


async def confirm(query: str, cached: str, similarity: float, use_guard: bool, judge: Verifier | None,
                  judge_from: float, timeout_s, context: Verifier | None = None) -> tuple[bool, str]:
    """(True, "guard" | "context" | "judge" | "similarity") when the candidate may be served; (False,
    "guard:number", "judge:no", ...) when not. `timeout_s` is called for the time left before a model
    verifier is asked. `context` (app/cache/context.py) is asked only with the guard on."""
    if use_guard:
        why = guard.mismatch(cached, query)
        if why is None:
            return True, "guard"
        if why in guard.HARD_REASONS:
            return False, f"guard:{why}"
        if context is not None and (await context.verify(query, cached, timeout_s())).ok:
            return True, context.name
        if judge is None or similarity < judge_from:
            return False, f"guard:{why}"
    elif judge is None:
        return True, "similarity"
    verdict = await judge.verify(query, cached, timeout_s())
    return (True, judge.name) if verdict.ok else (False, f"{judge.name}:{verdict.reason or 'no'}")
