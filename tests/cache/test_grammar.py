"""Rewordings that English grammar makes equal (app/cache/lexicon.py frames, app/cache/guard.py), decided as
the cache decides at its defaults: the guard, then the contextual check where the guard is unsure and
gives no hard reason (app/cache/verify.py). Each rule: rewordings served, and traps refused (another
period, modal, number, negation, entity, polarity)."""

from __future__ import annotations

import pytest

from app.cache import context, guard
from app.cache.embedder import OnnxEncoder
from app.cache.normalise import normalise


@pytest.fixture(scope="module")
def encoder():
    return OnnxEncoder("int8")


def served(encoder, cached: str, asked: str) -> bool:
    """The verifiers' verdict at the defaults (`bench/semantic_cache.py`'s "guard + context")."""
    cached, asked = normalise(cached), normalise(asked)
    why = guard.mismatch(cached, asked)
    if why is None:
        return True
    if why in guard.HARD_REASONS:
        return False
    u = guard.unaligned(cached, asked)
    refused = context.refused_before_reading(cached, asked, u)
    if refused:
        return False
    return context.served(cached, asked, u, encoder.word_states(cached), encoder.word_states(asked), refused=refused)


def canon(text: str) -> list[str]:
    return [t.canon for t in guard.tokens(text)]


# A quantifier that sets a scope is never filler a rewording drops (app/cache/guard.py, `_filler`).
@pytest.mark.parametrize("a, b", [
    ("Do I need to water every plant?", "Do I need to water the plant?"),
    ("Should I check each tire?", "Should I check the tire?"),
    ("What should I eat every day?", "What should I eat that day?"),
    ("Can all students apply?", "Can students apply?"),
    ("Is the museum open only on weekends?", "Is the museum open on weekends?"),
])
def test_a_scope_dropped_is_another_question(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_a_degree_word_is_still_a_rewording():
    assert guard.mismatch("Is German harder to learn than French?", "Is German more difficult to learn than French?") != "number"
    assert guard.mismatch("Do I need a visa for Japan?", "Do I need a visa for my trip to Japan?") is not None
