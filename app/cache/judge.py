"""An LLM judge verifier: asks a model alias of this same gateway whether two questions share an answer.

One yes/no question at temperature 0 with max_tokens 1, bounded by the request's deadline (and the
judge's own timeout). Fails closed: an error, a timeout or any reply but "yes" is a miss, but only a
"no" counts as a refusal; a judge that fails is counted and logged apart, so a broken judge cannot pass
for a strict one. Verdicts are cached in process, so a popular cached question is judged once per
distinct asking. How the judge reaches a model is one narrow callable (`AskFn`), passed in by the
composition root: the cache never imports dispatch.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import orjson

from app.cache.verify import Verdict
from app.config import JudgeConfig

# ask(alias, body, timeout_s) -> the chat.completion body, or None when no answer came.
AskFn = Callable[[str, dict, float], Awaitable[dict | None]]

log = logging.getLogger("slipstream.cache")
_LOG_EVERY_S = 60.0

SYSTEM = (
    "You check a cache. Decide whether one answer serves both user questions: they must ask for exactly "
    "the same information. Differences in wording, word order, spelling, typos, letter case or politeness "
    "do not matter. A different number, date, time, name, place, unit, quantity, negation, direction, "
    "scope, qualifier, or an opposite or sibling word does matter. Reply with one word: yes or no."
)


def judge_messages(cached: str, query: str) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Question 1: {cached}\nQuestion 2: {query}\nSame answer? yes or no"},
    ]


def parse_verdict(body: dict | None) -> bool | None:
    """True for yes, False for no, None for anything else (which the judge treats as no)."""
    if body is None:
        return None
    try:
        text = body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return None
    word = text.strip().strip(".!\"'").lower()
    if word.startswith("yes"):
        return True
    if word.startswith("no"):
        return False
    return None


class LlmJudge:
    name = "judge"

    def __init__(self, config: JudgeConfig, ask: AskFn) -> None:
        self.config = config
        self._ask = ask
        self._verdicts: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self.calls = 0
        self.cached_verdicts = 0
        self.timeouts = 0
        self.errors = 0  # the ask raised: a judge that is broken, not one that said no
        self.unclear = 0  # an answer that was neither yes nor no
        self._logged_at = -_LOG_EVERY_S

    async def verify(self, query: str, cached: str, timeout_s: float) -> Verdict:
        key = hashlib.sha256(orjson.dumps([self.config.alias, cached, query])).hexdigest()
        now = time.monotonic()
        hit = self._verdicts.get(key)
        if hit is not None and hit[0] > now:
            self.cached_verdicts += 1
            self._verdicts.move_to_end(key)
            return Verdict(hit[1], None if hit[1] else "no")
        timeout_s = min(timeout_s, self.config.timeout_ms / 1000)
        if timeout_s <= 0:
            self.timeouts += 1
            return Verdict(False, "timeout")
        body = {"model": self.config.alias, "messages": judge_messages(cached, query), "temperature": 0,
                "max_tokens": 1, "stream": False}
        self.calls += 1
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self._ask(self.config.alias, body, timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return Verdict(False, "timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.errors += 1
            now_log = time.monotonic()
            if now_log - self._logged_at >= _LOG_EVERY_S:
                self._logged_at = now_log
                log.warning("cache judge %r failed (%d so far): the hit is refused, not judged",
                            self.config.alias, self.errors, exc_info=exc)
            return Verdict(False, "error")
        verdict = parse_verdict(reply)
        if verdict is None:
            self.unclear += 1
            return Verdict(False, "unclear")  # not cached: a transient failure may answer next time
        self._remember(key, verdict, now)
        return Verdict(verdict, None if verdict else "no")

    def _remember(self, key: str, verdict: bool, now: float) -> None:
        self._verdicts[key] = (now + self.config.verdict_ttl_s, verdict)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.config.max_verdicts:
            self._verdicts.popitem(last=False)
