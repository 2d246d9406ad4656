"""Who confirms a semantic candidate: the guard at once, the judge only where the guard is unsure."""

from __future__ import annotations

import asyncio

from app.cache.judge import LlmJudge
from app.cache.verify import confirm
from app.config import JudgeConfig
from tests.cache.test_judge import ScriptedModel

REWORDED = ("How do I reset my password?", "I forgot my password, how can I change it?")  # the guard can't align these


def run(query: str, cached: str, similarity: float, judge_reply: str | None, use_guard: bool = True):
    model = ScriptedModel(judge_reply or "yes")
    judge = LlmJudge(JudgeConfig(alias="judge"), model) if judge_reply is not None else None
    got = asyncio.run(confirm(query, cached, similarity, use_guard, judge, 0.80, lambda: 1.0))
    return got, len(model.bodies)


def test_what_the_guard_aligns_is_served_without_asking_the_judge():
    assert run("how do i reset my password", "How do I reset my password?", 0.99, "no") == ((True, "guard"), 0)


def test_a_number_negation_or_direction_is_never_put_to_the_judge():
    assert run("How do I reset my 2 passwords?", "How do I reset my password?", 0.95, "yes") == ((False, "guard:number"), 0)
    assert run("Why does my code not compile?", "Why does my code compile?", 0.95, "yes") == ((False, "guard:negation"), 0)
    assert run("Flights from London to Paris", "Flights from Paris to London", 0.99, "yes") == ((False, "guard:role"), 0)


def test_the_judge_decides_a_rewording_in_its_band():
    query, cached = REWORDED[1], REWORDED[0]
    assert run(query, cached, 0.89, "yes") == ((True, "judge"), 1)
    assert run(query, cached, 0.89, "no") == ((False, "judge:no"), 1)


def test_below_the_band_the_judge_is_not_asked():
    query, cached = REWORDED[1], REWORDED[0]
    assert run(query, cached, 0.79, "yes") == ((False, "guard:words"), 0)


def test_without_a_judge_the_guard_alone_decides_and_without_both_similarity_does():
    query, cached = REWORDED[1], REWORDED[0]
    assert run(query, cached, 0.89, None) == ((False, "guard:words"), 0)
    assert run(query, cached, 0.89, None, use_guard=False) == ((True, "similarity"), 0)
    assert run(query, cached, 0.89, "no", use_guard=False) == ((False, "judge:no"), 1)
