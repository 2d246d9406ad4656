"""The LLM judge: a yes/no question to a gateway alias, its verdicts cached, bounded in time, failing closed."""

from __future__ import annotations

import asyncio
import logging
import math
import uuid

import httpx

from app.cache.judge import LlmJudge, parse_verdict, read_verdict, yes_probability
from app.config import JudgeConfig
from app.upstream.scripted import Reply, ScriptedTransport, completion
from tests.cache.conftest import CACHE_POLICY, cache_config
from tests.cache.test_cache import ask, settle
from tests.conftest import start_gateway
from tests.scripted import call, config, run


def _reply(text: str, candidates: dict[str, float] | None = None) -> dict:
    """A one-token chat answer; `candidates` (token -> probability) become the first token's top_logprobs."""
    choice: dict = {"message": {"role": "assistant", "content": text}, "finish_reason": "length"}
    if candidates is not None:
        top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in candidates.items()]
        choice["logprobs"] = {"content": [{**top[0], "top_logprobs": top}] if top else []}
    return {"choices": [choice]}


class ScriptedModel:
    """Stands in for a model alias (the judge's one seam, `ask`): replies from a script, records calls."""

    def __init__(self, reply: str = "Yes", delay_s: float = 0.0, candidates: dict[str, float] | None = None) -> None:
        self.reply, self.delay_s, self.candidates, self.bodies = reply, delay_s, candidates, []

    async def __call__(self, alias: str, body: dict, timeout_s: float) -> dict:
        self.bodies.append(body)
        await asyncio.sleep(self.delay_s)
        # Log-probabilities only when asked for, as a real backend returns them.
        return _reply(self.reply, self.candidates if body.get("logprobs") else None)


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
    assert parse_verdict(_reply("No, they differ")) is False
    assert parse_verdict(_reply('"YES"')) is True
    # A word that only begins like a verdict is none: the answer is unclear, not a refusal or a yes.
    for text in ("Not the same", "Nothing", "None", "Yesterday", "Noted", "Maybe yes"):
        assert parse_verdict(_reply(text)) is None, text
    assert parse_verdict({"error": {}}) is None


# Read as a probability (`min_yes_probability`): the first token's P(yes) / (P(yes) + P(no)) decides, not
# the greedy word. Qwen2.5-Coder-1.5B says "Yes" to "legal" / "illegal to drive with headphones" while
# its ratio (0.70-0.73) stays under most true rewordings' (README, "Semantic cache quality").

def test_yes_probability_sums_each_word_in_any_case_or_spacing_and_ignores_other_tokens():
    reply = _reply("Yes", {"Yes": 0.40, " yes": 0.10, "No": 0.20, "no": 0.05, "Maybe": 0.20, "The": 0.05})
    assert math.isclose(yes_probability(reply), 0.50 / 0.75)
    assert yes_probability(_reply("no", {"no": 0.9, "Sure": 0.1})) == 0.0


def test_yes_probability_is_none_without_log_probabilities_or_without_either_word():
    assert yes_probability(_reply("Yes")) is None  # the backend ignored `logprobs`
    assert yes_probability(_reply("Maybe", {"Maybe": 0.6, "Perhaps": 0.4})) is None
    assert yes_probability(_reply("", {})) is None
    assert yes_probability(None) is None
    assert yes_probability({"choices": [{"logprobs": {"content": [{"token": "Yes"}]}}]}) is None  # no logprob


def test_a_reply_without_top_candidates_has_no_ratio():
    # The backend honoured `logprobs` but not `top_logprobs`: the greedy token alone would read 1.0 or 0.0
    # whatever its probability, which is the greedy word again, not a ratio.
    lone = {"choices": [{"message": {"content": "yes"}, "logprobs": {"content": [{"token": "yes", "logprob": -2.3}]}}]}
    assert yes_probability(lone) is None
    lone["choices"][0]["logprobs"]["content"][0]["top_logprobs"] = []
    assert yes_probability(lone) is None
    assert read_verdict(lone, 0.9) is None  # a miss, counted as the judge's failure


def test_yes_probability_holds_for_any_numbers_a_backend_sends():
    def reply(yes: object, no: object) -> dict:
        return {"choices": [{"logprobs": {"content": [{"token": "Yes", "logprob": -1.0, "top_logprobs": [
            {"token": "Yes", "logprob": yes}, {"token": "No", "logprob": no}]}]}}]}

    # Far out in the tail, the ratio is still the ratio (each would underflow to 0 as a probability).
    assert math.isclose(yes_probability(reply(-800.0, -801.0)), 1 / (1 + math.exp(-1.0)))
    assert yes_probability(reply(-1.0, -1000.0)) == 1.0
    assert yes_probability(reply(-1000.0, -0.0)) == 0.0
    # Not log-probabilities at all (over 0, infinite, NaN, text): that candidate is not counted.
    assert yes_probability(reply(1000.0, -1.0)) == 0.0
    assert yes_probability(reply(float("inf"), -1.0)) == 0.0
    assert yes_probability(reply(float("nan"), "x")) is None
    assert yes_probability(reply(-float("inf"), -1.0)) == 0.0


def test_read_verdict_compares_the_ratio_with_the_threshold_and_ignores_the_greedy_word():
    reply = _reply("Yes", {"Yes": 0.6, "No": 0.4})
    assert read_verdict(reply, None) is True  # the greedy word
    assert read_verdict(reply, 0.6) is True
    assert read_verdict(reply, 0.61) is False
    assert read_verdict(_reply("No", {"No": 0.45, "Yes": 0.55}), 0.5) is True


def test_probability_judge_asks_for_the_first_tokens_top_log_probabilities():
    model = ScriptedModel("Yes", candidates={"Yes": 0.7, "No": 0.3})
    judge = LlmJudge(JudgeConfig(alias="judge", min_yes_probability=0.73), model)
    verdict = verify(judge, "Is it illegal to drive with headphones?", "Is it legal to drive with headphones?")
    assert (verdict.ok, verdict.reason) == (False, "no")  # a greedy "Yes" at a ratio of 0.70
    (body,) = model.bodies
    assert (body["logprobs"], body["top_logprobs"], body["max_tokens"], body["temperature"]) == (True, 20, 1, 0)
    assert (judge.calls, judge.unclear) == (1, 0)
    # The verdict is cached like a word's.
    assert not verify(judge, "Is it illegal to drive with headphones?", "Is it legal to drive with headphones?").ok
    assert (len(model.bodies), judge.cached_verdicts) == (1, 1)
    passing = LlmJudge(JudgeConfig(alias="judge", min_yes_probability=0.73), ScriptedModel("No", candidates={"Yes": 0.8, "No": 0.2}))
    assert verify(passing, "how can i reset my password", "How do I reset my password?").ok


def test_the_greedy_judge_does_not_ask_for_log_probabilities():
    model = ScriptedModel("Yes")
    assert verify(LlmJudge(JudgeConfig(alias="judge"), model), "a", "b").ok
    assert "logprobs" not in model.bodies[0] and "top_logprobs" not in model.bodies[0]


def test_a_probability_judge_whose_backend_returns_no_log_probabilities_fails_closed_and_says_why(caplog):
    class NoLogprobs(ScriptedModel):
        async def __call__(self, alias, body, timeout_s):
            self.bodies.append(body)
            return _reply("Yes")

    judge = LlmJudge(JudgeConfig(alias="judge", min_yes_probability=0.5), NoLogprobs())
    with caplog.at_level(logging.WARNING, logger="slipstream.cache"):
        verdict = verify(judge, "a", "b")
    assert (verdict.ok, verdict.reason, judge.unclear) == (False, "unclear", 1)
    assert "min_yes_probability needs a backend that returns them" in caplog.text
    # Not cached: the next asking tries again.
    verify(judge, "a", "b")
    assert judge.calls == 2


def test_min_yes_probability_must_lie_strictly_between_0_and_1(tmp_path):
    from tests.test_config import GOOD, error_for

    for bad in ("0", "1", "1.5"):
        judged = GOOD.replace("chat: {backends: [a]}", "chat: {backends: [a], cache: {semantic: {enabled: true, "
                              f"judge: {{alias: other, min_yes_probability: {bad}}}}}}}}}\n  other: {{backends: [a]}}")
        assert "models.chat.cache.semantic.judge.min_yes_probability" in error_for(tmp_path, judged)


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
        # Not a yes/no answer: no verdict, which is a failure of the judge, not a refusal. (The simulator's
        # words include "not", which a prefix test once read as a "no": 1 topic in 48 failed here.)
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
