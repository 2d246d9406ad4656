"""An LLM judge verifier: asks a model alias of this same gateway whether two questions share an answer.

One yes/no question at temperature 0 with max_tokens 1, bounded by the request's deadline (and the
judge's own timeout). Fails closed: an error, a timeout or any reply but "yes" is a miss. Verdicts
are cached in process, so a popular cached question is judged once per distinct asking.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import orjson

from app.cache.verify import Verdict
from app.config import JudgeConfig

# ask(alias, body, timeout_s) -> the chat.completion body, or None when no answer came.
AskFn = Callable[[str, dict, float], Awaitable[dict | None]]

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
        self.errors = 0

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
        except Exception:  # noqa: BLE001 - counted as an error, apart from refusals
            self.errors += 1
            return Verdict(False, "error")
        verdict = parse_verdict(reply)
        if verdict is None:
            self.errors += 1
            return Verdict(False, "unclear")  # not cached: a transient failure may answer next time
        self._remember(key, verdict, now)
        return Verdict(verdict, None if verdict else "no")

    def _remember(self, key: str, verdict: bool, now: float) -> None:
        self._verdicts[key] = (now + self.config.verdict_ttl_s, verdict)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.config.max_verdicts:
            self._verdicts.popitem(last=False)


def gateway_ask(gw) -> AskFn:
    """Ask an alias of `gw` in process: the same routing, retries and fallbacks as a client's call."""

    async def ask(alias: str, body: dict, timeout_s: float) -> dict | None:
        from app.deadline import Deadline
        from app.dispatch.loop import dispatch
        from app.record import RequestRecord
        from app.request import Endpoint, parse_request
        from app.upstream.attempt import JsonReply

        req = parse_request(Endpoint.CHAT, orjson.dumps(body))
        record = RequestRecord(uuid.uuid4().hex, Endpoint.CHAT.value, time.perf_counter(), tenant="slipstream-judge",
                               alias=alias)
        dispatched = await dispatch(gw, req, Deadline(time.monotonic() + timeout_s), record)
        try:
            reply = dispatched.result
            if not isinstance(reply, JsonReply) or reply.status != 200:
                return None
            return orjson.loads(reply.body)
        finally:
            dispatched.owner.end()

    return ask
