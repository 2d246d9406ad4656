"""The guard tells a paraphrase from a near-miss that an embedding scores as nearly identical."""

from __future__ import annotations

import pytest

from app.cache.guard import mismatch


@pytest.mark.parametrize("a, b, why", [
    ("Turn on the kitchen lights", "Turn the kitchen lights off", "polar"),
    ("How many eggs for 3 people?", "How many eggs for 4 people?", "numbers"),
    ("How many eggs for three people?", "How many eggs for four people?", "numbers"),
    ("What is the capital of France?", "What is the capital of Germany?", "entities"),
    ("Why does my code not compile?", "Why does my code compile?", "negations"),
    ("I don't want sugar", "I do want sugar", "negations"),
    ("How do I use os.path.join?", "How do I use os.path.split?", "code"),
    ("Convert 5 km to miles", "Convert 5 miles to km", "units"),
    ("Flights from Paris to London", "Flights from London to Paris", "roles"),
    ("What time is it in Tokyo?", "Quelle heure est-il à Tokyo ?", "language"),
])
def test_near_misses_are_caught(a, b, why):
    assert mismatch(a, b) == why


@pytest.mark.parametrize("a, b", [
    ("What is the capital of France?", "Which city is the capital of France?"),
    ("Explain recursion simply", "Explain recursion in simple terms"),
    ("What is the best way to cook rice?", "How do I cook rice?"),
    ("Turn the lights on", "Switch the lights on"),
    ("How do I convert 5 km to miles?", "Convert 5 km to miles please"),
])
def test_paraphrases_pass(a, b):
    assert mismatch(a, b) is None
