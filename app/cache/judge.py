"""An LLM judge verifier: asks a model alias of this same gateway whether two questions share an answer.

One yes/no question at temperature 0 with max_tokens 1, bounded by the request's deadline (and the
judge's own timeout). The answer is read as the greedy word, or, with `min_yes_probability`, as the
first token's P(yes) / (P(yes) + P(no)) against that threshold: a small model's greedy word says "yes" to
look-alike traps whose ratio still ranks them below true rewordings. Fails closed: an error, a timeout
or a reply that is neither a yes nor a no (no log-probabilities, when they were asked for) is a miss, but
only a "no" counts as a refusal; a judge that fails is counted and logged apart, so a broken judge cannot pass
for a strict one. Verdicts are cached in process, so a popular cached question is judged once per
distinct asking. How the judge reaches a model is one narrow callable (`AskFn`), passed in by the
composition root: the cache never imports dispatch.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
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
# The verdict is the first word, whole: "Yes." and "no," are verdicts; "Not", "None" and "Yesterday" are
# not (a prefix test read them as a no and a yes), as yes_probability counts only the words themselves.
_VERDICT_WORD = re.compile(r"\s*[\"'(*]*(yes|no)\b", re.IGNORECASE)

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


# The first token's candidates asked for when the judge is read as a probability: OpenAI's most; the
# yes and no tokens of an instruction-tuned model are nearly always among a handful of them.
TOP_LOGPROBS = 20


def judge_body(config: JudgeConfig, cached: str, query: str) -> dict:
    body = {"model": config.alias, "messages": judge_messages(cached, query), "temperature": 0, "max_tokens": 1,
            "stream": False}
    if config.min_yes_probability is not None:
        body |= {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
    return body


def yes_probability(body: dict | None) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first token's top candidates, each word in any case or spacing
    ("Yes", " yes"), or None when the reply carries no top candidates (a backend that ignored `logprobs`
    or `top_logprobs`: the greedy token alone is no ratio) or neither word among them. Only finite
    log-probabilities of at most 0 count, and the ratio is taken in log space, so no reply can make it
    overflow, underflow to nothing or come out NaN."""
    if body is None:
        return None
    try:
        candidates = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(candidates, list):
        return None
    yes: list[float] = []
    no: list[float] = []
    for c in candidates:
        token, logprob = (c.get("token"), c.get("logprob")) if isinstance(c, dict) else (None, None)
        if not isinstance(token, str) or not isinstance(logprob, int | float) or not -math.inf < logprob <= 0:
            continue
        word = token.strip().lower()
        if word == "yes":
            yes.append(logprob)
        elif word == "no":
            no.append(logprob)
    if not yes or not no:
        return (1.0 if yes else 0.0) if yes or no else None
    gap = _log_sum(no) - _log_sum(yes)
    return 1.0 / (1.0 + math.exp(gap)) if gap < 700 else 0.0


def _log_sum(logprobs: list[float]) -> float:
    top = max(logprobs)
    return top + math.log(sum(math.exp(x - top) for x in logprobs))


def read_verdict(body: dict | None, min_yes_probability: float | None) -> bool | None:
    """The judge's answer as configured: its greedy word, or its yes-probability against the threshold."""
    if min_yes_probability is None:
        return parse_verdict(body)
    p = yes_probability(body)
    return None if p is None else p >= min_yes_probability


def parse_verdict(body: dict | None) -> bool | None:
    """True for yes, False for no, None for anything else (which the judge treats as no)."""
    if body is None:
        return None
    try:
        text = body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return None
    word = _VERDICT_WORD.match(text)
    return None if word is None else word.group(1).lower() == "yes"


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
        body = judge_body(self.config, cached, query)
        self.calls += 1
        try:
            async with asyncio.timeout(timeout_s):
                reply = await self._ask(self.config.alias, body, timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return Verdict(False, "timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure is a missing verdict, counted and logged below
            self.errors += 1
            self._warn("cache judge %r failed (%d so far): the hit is refused, not judged", self.config.alias,
                       self.errors, exc_info=exc)
            return Verdict(False, "error")
        verdict = read_verdict(reply, self.config.min_yes_probability)
        if verdict is None:
            self.unclear += 1
            if self.config.min_yes_probability is not None and reply is not None:
                # The usual cause is a backend that ignores `logprobs` (or an API translated without them).
                self._warn("cache judge %r gave no log-probabilities for yes or no (%d so far): "
                           "min_yes_probability needs a backend that returns them", self.config.alias, self.unclear)
            return Verdict(False, "unclear")  # not cached: a transient failure may answer next time
        self._remember(key, verdict, now)
        return Verdict(verdict, None if verdict else "no")

    def _warn(self, message: str, *args: object, exc_info: BaseException | None = None) -> None:
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.warning(message, *args, exc_info=exc_info)

    def _remember(self, key: str, verdict: bool, now: float) -> None:
        self._verdicts[key] = (now + self.config.verdict_ttl_s, verdict)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.config.max_verdicts:
            self._verdicts.popitem(last=False)
