"""The LLM judge: a yes/no question to a gateway alias, its verdicts cached, bounded in time, failing closed."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from app.cache.judge import LlmJudge, parse_verdict
from app.config import JudgeConfig
from tests.cache.conftest import CACHE_POLICY, cache_config
from tests.cache.test_cache import ask, settle
from tests.conftest import start_gateway


def _reply(text: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "length"}]}


class ScriptedModel:
    """Stands in for a model alias (the judge's one seam, `ask`): replies from a script, records calls."""

    def __init__(self, reply: str = "Yes", delay_s: float = 0.0) -> None:
        self.reply, self.delay_s, self.bodies = reply, delay_s, []

    async def __call__(self, alias: str, body: dict, timeout_s: float) -> dict:
        self.bodies.append(body)
        await asyncio.sleep(self.delay_s)
        return _reply(self.reply)


def verify(judge: LlmJudge, query: str, cached: str, timeout_s: float = 1.0):
    return asyncio.run(judge.verify(query, cached, timeout_s))


def test_asks_one_yes_no_question_at_temperature_0_with_one_token():
    model = ScriptedModel("Yes")
    judge = LlmJudge(JudgeConfig(alias="judge"), model)
    assert verify(judge, "how do i reset my router", "How do I reset my router?").ok
    (body,) = model.bodies
    assert body["model"] == "judge" and body["temperature"] == 0 and body["max_tokens"] == 1
    assert "yes or no" in body["messages"][-1]["content"]


def test_verdicts_are_cached():
    model = ScriptedModel("no")
    judge = LlmJudge(JudgeConfig(alias="judge"), model)
    assert not verify(judge, "a", "b").ok
    assert not verify(judge, "a", "b").ok
    assert len(model.bodies) == 1 and judge.cached_verdicts == 1


def test_fails_closed_on_timeout_unclear_reply_or_error():
    slow = LlmJudge(JudgeConfig(alias="judge"), ScriptedModel("yes", delay_s=0.5))
    assert verify(slow, "a", "b", timeout_s=0.05).reason == "timeout"
    assert verify(LlmJudge(JudgeConfig(alias="judge", timeout_ms=20), ScriptedModel("yes", delay_s=0.5)), "a", "b").reason == "timeout"
    assert verify(LlmJudge(JudgeConfig(alias="judge"), ScriptedModel("Maybe")), "a", "b").reason == "unclear"

    async def broken(alias, body, timeout_s):
        raise ConnectionError("backend down")

    assert verify(LlmJudge(JudgeConfig(alias="judge"), broken), "a", "b").reason == "error"
    # No time left in the request's deadline: no call at all.
    model = ScriptedModel("yes")
    assert verify(LlmJudge(JudgeConfig(alias="judge"), model), "a", "b", timeout_s=0).reason == "timeout"
    assert model.bodies == []


def test_parse_verdict():
    assert parse_verdict(_reply(" Yes.")) is True
    assert parse_verdict(_reply("no")) is False
    assert parse_verdict(_reply("")) is None
    assert parse_verdict({"error": {}}) is None


def test_gateway_asks_its_own_alias_and_a_non_answer_is_a_miss(fleet, tmp_path):
    """End to end: the judge alias is a simulator backend, whose text is never yes/no: fail closed."""
    config = cache_config(fleet, "memory", None)
    judged = {**CACHE_POLICY, "semantic": {**CACHE_POLICY["semantic"], "judge": {"alias": "chat", "timeout_ms": 2000}}}
    config["models"]["judged"] = {"backends": ["fast"], "cache": judged}
    gw = start_gateway(tmp_path, fleet, config)
    try:
        topic = uuid.uuid4().hex[:6]
        ask(gw, f"How do I reset my router model {topic}?", model="judged")
        settle()
        # A rewording the guard cannot align (similarity ~0.95): put to the judge, which says no.
        h, _ = ask(gw, f"What is the procedure for resetting the router model {topic}?", model="judged")
        assert h["x-slipstream-cache"] == "miss"
        metrics = httpx.get(f"{gw.url}/metrics").text
        assert "slipstream_cache_judge_rejections_total 1.0" in metrics
        # What the guard aligns is served without asking the judge.
        h, _ = ask(gw, f"how do i reset my router model {topic}?", model="judged")
        assert (h["x-slipstream-cache"], h["x-slipstream-cache-verifier"]) == ("semantic-hit", "guard")
    finally:
        gw.process.stop()


def test_judge_alias_must_be_another_model_alias(tmp_path):
    from tests.test_config import GOOD, error_for

    judged = GOOD.replace("chat: {backends: [a]}", "chat: {backends: [a], cache: {semantic: {enabled: true, judge: {alias: nope}}}}")
    assert "models.chat.cache.semantic.judge.alias: 'nope' is not another model alias" in error_for(tmp_path, judged)
