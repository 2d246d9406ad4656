"""The word rules for the earlier turns of a conversation (app/cache/history.py), without a model."""

from __future__ import annotations

import pytest

from app.cache.history import Need, check, same_facts, same_statement


@pytest.mark.parametrize("cached, asked", [
    ("I'm flying to Tokyo next week.", "Next week I'm flying to Tokyo."),
    ("I'm hiking in the desert in summer.", "I'll be hiking in the desert this summer."),  # light words move
    ("I have a 3 year old daughter.", "My daughter is three years old."),
    ("I use the Android app.", "I'm on the Android app."),
    ("I have oily skin.", "My skin is oily."),
    ("I keep two hives in my backyard.", "I've got two hives in the backyard."),
])
def test_a_statement_in_other_words_keeps_its_facts(cached, asked):
    assert check("user", cached, asked) is Need.SIMILARITY  # then the embedding decides


@pytest.mark.parametrize("cached, asked", [
    ("I use the Android app.", "I use the iPhone app."),  # a name
    ("I have a 3 year old daughter.", "I have a 5 year old daughter."),  # a number
    ("I have a 3 year old daughter.", "I have a 3 year old son."),  # a sibling
    ("I have oily skin.", "I have dry skin."),
    ("I have oily skin.", "I don't have oily skin."),  # a negation
    ("I have oily skin.", "She has oily skin."),  # another person
    ("I'm flying to Tokyo next week.", "I'm flying from Tokyo next week."),  # a direction
    ("I fish for trout in small mountain streams.", "I fly fish for trout in small mountain streams."),  # a qualifier
    ("My episodes are about 90 minutes long.", "My episodes are about 90 seconds long."),  # a unit
    ("My dog bit my cat.", "My cat bit my dog."),  # who did what to whom: the same words and facts
    ("My brother lent my sister 50 dollars.", "My sister lent my brother 50 dollars."),
])
def test_a_statement_with_another_fact_never_matches(cached, asked):
    assert check("user", cached, asked) is Need.NO


@pytest.mark.parametrize("cached, asked", [
    ("Great, Tokyo in spring is lovely.", "Great, Osaka in spring is lovely."),
    ("Yes, you can.", "No, you can't."),
    ("Got it, oily skin.", "Got it, dry skin."),
    ("Sure, happy to help.", "No."),
])
def test_a_reply_that_says_something_else_never_matches(cached, asked):
    assert check("assistant", cached, asked) is Need.NO


def test_a_reply_that_judges_otherwise_needs_its_words_paired_in_context():
    # The same facts, another verdict: never served on similarity alone.
    assert check("assistant", "A 5-pound catfish is a nice catch.",
                 "A 5-pound catfish is too small to keep.") in (Need.NO, Need.CONTEXT)


def test_a_reply_in_other_words_may_match():
    assert check("assistant", "A 10-inch blade is the most common size.",
                 "Ten-inch blades are the most common size.") is Need.SIMILARITY


def test_an_earlier_question_is_compared_as_a_question():
    # Words the guard cannot pair go to the contextual check, as for the last turn; in a statement they are a miss.
    assert check("user", "What happens if I cancel my policy early?",
                 "What are the consequences of canceling my policy early?") is Need.CONTEXT


def test_without_the_guard_only_similarity_decides():
    assert check("user", "I have oily skin.", "I have dry skin.", use_guard=False) is Need.SIMILARITY


def test_facts_are_numbers_negations_names_and_rare_words():
    assert same_facts("I caught a 5 pound catfish.", "I caught a five-pound catfish.")
    assert not same_facts("I caught a 5 pound catfish.", "I caught a 5 pound carp.")
    assert not same_facts("I record with a USB microphone.", "I record with an XLR microphone.")


def test_a_one_turn_statement_is_served_for_the_same_facts_only():
    assert same_statement("I use the Android app.", "I'm on the Android app.")
    assert not same_statement("I use the Android app.", "I use the iPhone app.")
    assert not same_statement("I have oily skin.", "I have dry skin.")
    # Questions keep the question rules, with or without a question mark.
    assert not same_statement("My router, how do I reset it", "My router, how can I reset it")
    assert not same_statement("How do I reset my password?", "How do I reset your password?")


@pytest.mark.parametrize("cached, asked", [
    ("Nightly retinol at 45 is a common routine.", "Using retinol every night at 45 is a common routine."),
    ("Small mountain streams are great for trout.", "Trout fishing in small mountain streams is great."),
])
def test_a_reply_reworded_with_its_facts_kept_goes_to_the_contextual_check(cached, asked):
    assert check("assistant", cached, asked) is Need.CONTEXT
    assert check("user", cached, asked) is Need.NO  # a user's statement: only its facts and its words


@pytest.mark.parametrize("cached, asked", [
    ("Stoneware is a forgiving clay.", "Stoneware is an unforgiving clay."),  # a rare word differs
    ("Oak is a great choice.", "Oak is not a great choice."),  # a negation
    ("A 10-inch blade cuts 3 inches deep.", "A 10-inch blade cuts 4 inches deep."),  # a number
    ("That sounds like a northern cardinal.", "That sounds like a summer tanager."),
])
def test_a_reply_with_other_facts_still_never_matches(cached, asked):
    assert check("assistant", cached, asked) is Need.NO
