"""The LLM judge: a yes/no question to a gateway alias, its verdicts cached, bounded in time, failing closed."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from app.cache.judge import LlmJudge, parse_verdict
from app.config import JudgeConfig
from app.upstream.scripted import Reply, ScriptedTransport, completion
from tests.cache.conftest import CACHE_POLICY, cache_config
from tests.cache.test_cache import ask, settle
from tests.conftest import start_gateway
from tests.scripted import call, config, run


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
    # Threshold 0.85, not the module's 0.9: the rewording below reads 0.89-0.93 with the topic's random
    # letters (300 drawn), and one topic in 25 fell under 0.9, so the judge was never asked (a flake).
    judged = {**CACHE_POLICY, "semantic": {**CACHE_POLICY["semantic"], "threshold": 0.85,
                                           "judge": {"alias": "chat", "timeout_ms": 2000}}}
    config["models"]["judged"] = {"backends": ["fast"], "cache": judged}
    gw = start_gateway(tmp_path, fleet, config)
    try:
        topic = uuid.uuid4().hex[:6]
        ask(gw, f"How do I reset my router model {topic}?", model="judged")
        settle(gw)
        # A rewording the guard cannot align (similarity 0.89-0.93): put to the judge, which says no.
        h, _ = ask(gw, f"Whats the procedure for factory resetting the router model {topic}?", model="judged")
        assert h["x-slipstream-cache"] == "miss"
        metrics = httpx.get(f"{gw.url}/metrics").text
        # Not a yes/no answer: no verdict, which is a failure of the judge, not a refusal.
        assert "slipstream_cache_judge_failures_total 1.0" in metrics
        assert "slipstream_cache_judge_rejections_total 0.0" in metrics
        # What the guard aligns is served without asking the judge.
        h, _ = ask(gw, f"how do i reset my router model {topic}?", model="judged")
        assert (h["x-slipstream-cache"], h["x-slipstream-cache-verifier"]) == ("semantic-hit", "guard")
    finally:
        gw.process.stop()


def test_judge_alias_must_be_another_model_alias(tmp_path):
    from tests.test_config import GOOD, error_for

    judged = GOOD.replace("chat: {backends: [a]}", "chat: {backends: [a], cache: {semantic: {enabled: true, judge: {alias: nope}}}}")
    assert "models.chat.cache.semantic.judge.alias: 'nope' is not another model alias" in error_for(tmp_path, judged)


# The judge in the gateway, over the scripted transport (app.upstream.scripted): the judge alias is a
# scripted backend whose answer the test chooses, so a crash, a "no" and a "yes" can be told apart. The
# guard is off here, so the judge alone decides each candidate.
JUDGED = {"exact": {"enabled": True}, "semantic": {"enabled": True, "threshold": 0.8, "guard": False,
                                                   "judge": {"alias": "judge", "timeout_ms": 5000}}}
FIRST = "How do I reset my home wifi router?"
REWORDED = "What is the way to reset my home wifi router?"


def _judged_gateway(judge_says: str | None):
    """`chat` answers every question; `judge` answers `judge_says` (None: its backend fails every call)."""
    def script(backend: str, n: int):
        if backend == "j":
            return Reply(completion(judge_says)) if judge_says is not None else Reply({"error": {}}, status=500)
        return Reply(completion("Hold the reset button for ten seconds."))

    cfg = config({"chat": {"backends": ["a"], "cache": JUDGED}, "judge": {"backends": ["j"], "retry": {"max_attempts": 1}}},
                 backends=("a", "j"), cache={"embedding": {"timeout_ms": 5000}})
    return cfg, ScriptedTransport(script)


def _ask_twice(judge_says: str | None):
    cfg, transport = _judged_gateway(judge_says)

    async def scenario(gw):
        await gw.cache.start()
        first = await call(gw, {"model": "chat", "messages": [{"role": "user", "content": FIRST}], "temperature": 0})
        await gw.cache.flush()  # the answer is stored before the second question is looked up
        second = await call(gw, {"model": "chat", "messages": [{"role": "user", "content": REWORDED}], "temperature": 0})
        return first, second, gw.cache.stats

    return run(cfg, transport, scenario)


def test_a_judge_that_says_yes_serves_the_semantic_hit_marked_judge():
    first, second, stats = _ask_twice("yes")
    assert first.headers["x-slipstream-cache"] == "miss"
    assert second.status == 200
    assert (second.headers["x-slipstream-cache"], second.headers["x-slipstream-cache-verifier"]) == ("semantic-hit", "judge")
    assert second.json()["choices"][0]["message"]["content"] == "Hold the reset button for ten seconds."
    assert (stats.semantic_hits, stats.judge_rejections, stats.judge_failures) == (1, 0, 0)


def test_a_judge_that_says_no_refuses_the_hit():
    _, second, stats = _ask_twice("no")
    assert second.headers["x-slipstream-cache"] == "miss"
    assert (stats.semantic_hits, stats.judge_rejections, stats.judge_failures) == (0, 1, 0)


def test_a_judge_that_fails_is_a_miss_counted_as_a_failure_not_a_refusal():
    _, second, stats = _ask_twice(None)
    assert second.status == 200 and second.headers["x-slipstream-cache"] == "miss"
    assert (stats.semantic_hits, stats.judge_rejections, stats.judge_failures) == (0, 0, 1)
