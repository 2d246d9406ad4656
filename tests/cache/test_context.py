"""Contextual alignment (cache.semantic.context, on by default): where the guard is unsure and the
questions differ the way a rewording does (in structure, not in one slot), the differing words are
compared as the model reads them in their sentences. Real encoder (int8) throughout; the one stand-in is
the recording verifier that checks who `confirm` asks, and when."""

# ruff: noqa: F811 - `run` is test_semantic_rules' fixture (one loaded model), taken as a parameter here

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest

from app.cache import context, guard
from app.cache.embedder import Embedder, OnnxEncoder
from app.cache.verify import Verdict, confirm
from app.config import CachePolicy, EmbeddingConfig
from app.protocols import CHAT
from tests.cache.test_semantic_rules import Harness, chat, run  # noqa: F401 - `run` is a fixture

CONTEXT = CachePolicy.model_validate({"semantic": {"enabled": True}})  # the shipped default
OFF = CachePolicy.model_validate({"semantic": {"enabled": True, "context": False}})
REWORDED = ("What happens if I cancel my policy early?", "What are the consequences of canceling my policy early?")
ANTONYM = ("How much exercise does a large dog need daily?", "How much exercise does a small dog need daily?")


@pytest.fixture(scope="module")
def encoder():
    return OnnxEncoder("int8")


def in_context(encoder, cached: str, asked: str) -> bool:
    u = guard.unaligned(cached, asked)
    assert u is not None, "the guard hands this pair over"
    return context.aligned(u, encoder.word_states(cached), encoder.word_states(asked))


def test_the_guard_hands_over_a_rewording_that_changes_the_structure():
    u = guard.unaligned(*REWORDED)
    assert u is not None and (u.cached, u.asked, u.added) == (("happens", "if"), ("consequences",), frozenset())
    u = guard.unaligned("Does car insurance cover theft?", "Is theft covered by car insurance?")
    assert u is not None and u.added == frozenset({"by"})  # only added: a looser cosine (context.ADDED_COSINE)


@pytest.mark.parametrize("cached, asked", [
    ("How do I reset my password?", "How do I reset my PIN?"),  # a rarer word must match exactly
    ("How many eggs for 3 people?", "How many eggs for 4 people?"),  # a number
    ("Why does my code not compile?", "Why does my code compile?"),  # a negation
    ("Who is the president of France?", "Who was the president of France?"),  # tense
    ("Is brown rice healthier than quinoa?", "Is quinoa healthier than brown rice?"),  # a role's object changes
    ("Does drip coffee have more caffeine than espresso?", "Is there more caffeine in espresso than in drip coffee?"),
    ("Does the dog bite the man?", "Does the man bite the dog?"),  # nothing differs but the order
    ("How do I make pancakes?", "What is the fastest and cheapest way to make good pancakes for many people?"),  # too many
    ("Does the clinic accept all insurance plans?", "Does the clinic accept some insurance plans?"),  # a quantifier
    ("What grade passes an undergraduate course?", "What is the passing grade for graduate courses?"),  # a prefix
    ("Why is the Paris metro so crowded?", "What makes the London metro so crowded?"),  # a name
])
def test_what_is_never_handed_over(cached, asked):
    assert guard.mismatch(cached, asked) is not None
    assert guard.unaligned(cached, asked) is None


@pytest.mark.parametrize("cached, asked", [
    ANTONYM,  # an antonym reads like a synonym in context (~0.8): the structure, not the cosine, keeps it out
    ("How often should adults get a tetanus shot?", "How often should adults get a flu shot?"),  # a sibling
    ("Is it safe to drive in freezing rain?", "Is it dangerous to drive in freezing rain?"),
    # The price: a rewording that only puts a synonym in a word's place looks the same, and misses.
    # ("another" / "a different" is now one determiner, a frame in app/cache/lexicon.py.)
    ("Should I add an index?", "Should I create an index?"),
])
def test_one_word_in_another_words_place_is_never_handed_over(cached, asked):
    assert guard.unaligned(cached, asked) is None


def test_a_word_added_between_shared_words_or_after_them_is_never_handed_over():
    assert guard.unaligned("How do I amend a tax return filed last year?", "How do I amend a tax return filed this year?") is None
    assert guard.unaligned("Is it safe to swim in the lake?", "Is it safe to swim in the lake today?") is None  # a scope


@pytest.mark.parametrize("cached, asked", [
    ("Can I leave my dog in the car?", "Can I leave my dog alone in the car?"),  # only a word slipped in
    ("Is it safe to walk at night?", "Is it safe to walk alone at night?"),
    ("Should I use oil on a kitchen table?", "Is oil better for an outdoor kitchen table?"),  # in front of a noun
    ("Can I wash wool sweaters in the washing machine?", "Can I wash wool sweaters in hot water in the washing machine?"),
])
def test_a_qualifier_stays_a_qualifier_in_a_rewording(cached, asked):
    assert guard.unaligned(cached, asked) is None


@pytest.mark.parametrize("cached, asked", [
    # A predicate moved between shared words reads like its opposite in context: never handed over.
    ("Should I use oil on a cutting board?", "Is oil bad for a cutting board?"),
    ("Should I water my lawn at night?", "Is watering bad for my lawn at night?"),
    # An adjective's "to" states the question's polarity: it is never dropped.
    ("Is it safe to run in the heat?", "Is running dangerous in the heat?"),
    ("Why is it safe to run in the heat?", "What makes running dangerous in the heat?"),
    ("Is it legal to fly a drone in a park?", "Is flying a drone illegal in a park?"),
])
def test_a_polarity_reworded_around_is_never_handed_over(cached, asked):
    assert guard.unaligned(cached, asked) is None


@pytest.mark.parametrize("cached, asked", [
    # One question has a "to" more and no other role word differs: an infinitive's "to", not a direction.
    ("How do I clear my browser cache in Chrome?", "I need to clear my Chrome browser cache, how do I do it?"),
    ("How do I speed up a slow SQL query?", "What can I do about a slow SQL query?"),
    # Between a noun and a verb, a "to" says what the thing is for (tune, conversation-dev).
    ("Which wine goes best with it?", "What's the best wine to go with it?"),
    ("How much does it cost to run a fridge per month?", "What is the monthly running cost of a fridge?"),
])
def test_an_infinitives_to_is_no_direction(encoder, cached, asked):
    assert in_context(encoder, cached, asked)


@pytest.mark.parametrize("text, role", [
    ("How do I get to work?", ("to", "work")),  # after a verb: where to
    ("How do I send money to my family?", ("to", "my")),
    ("Can I fly to Rome from Paris?", ("to", "rom")),  # canonical words: stems
    ("Is it safe to run in the heat?", ("to", "run")),  # after an adjective: kept with its polarity
    ("Which route is best to the airport?", ("to", "airport")),  # before a noun
])
def test_a_to_after_a_verb_or_an_adjective_or_before_a_noun_keeps_its_role(text, role):
    assert role in guard.roles(guard.tokens(text))


@pytest.mark.parametrize("text", [
    "What's the best wine to go with it?",  # a noun, then a verb: what the wine is for
    "How much does it cost to run a fridge?",
    "How do I recall an email?",  # "how to"
])
def test_an_infinitives_to_has_no_role(text):
    assert not any(word == "to" for word, _ in guard.roles(guard.tokens(text)))


@pytest.mark.parametrize("cached, asked", [
    ("How do I send money to my family?", "How do I get money from my family?"),  # "to" gave way to "from"
    ("How do I move files to my laptop?", "How do I move files off my laptop?"),
    ("Can I fly to Rome from Paris?", "Can I fly from Rome?"),
])
def test_a_direction_dropped_for_another_is_never_handed_over(cached, asked):
    assert guard.mismatch(cached, asked) is not None
    assert guard.unaligned(cached, asked) is None


@pytest.mark.parametrize("cached, asked", [
    # "how to" asks for a way, "can I" whether: the "to" of "how to" is never dropped against "can I".
    ("How do I take ibuprofen with alcohol?", "Can I take ibuprofen with alcohol?"),
    ("How should I store fresh basil?", "Can I store fresh basil?"),
])
def test_how_is_not_whether(cached, asked):
    assert guard.unaligned(cached, asked) is None


def test_in_a_statement_a_to_more_is_part_of_what_is_stated():
    # Earlier turns are statements (app/cache/history.py): "too small to keep" is another fact.
    assert guard.unaligned("A 5-pound catfish is a nice catch.", "A 5-pound catfish is too small to keep.") is None
    assert guard.unaligned("How do I clear my browser cache in Chrome?",
                           "I need to clear my Chrome browser cache, how do I do it?") is not None


def test_a_word_that_means_the_same_in_its_sentence_aligns(encoder):
    assert in_context(encoder, *REWORDED)
    assert in_context(encoder, "Is dental care covered by my health plan?", "Does my health plan include dental care?")


def test_words_that_read_differently_in_context_do_not_align(encoder):
    # Two words for one: the structure hands the pair over, and the cosine says no.
    assert not in_context(encoder, "What does the check engine light mean?", "What does the battery light mean?")
    assert not in_context(encoder, "How many keys does a full-size piano have?", "How many keys does a compact piano have?")


def test_a_word_missing_from_the_other_side_never_aligns():
    u = guard.Unaligned(("another",), (), ("transfer", "another"), ("transfer",))
    v = np.eye(384, dtype=np.float32)[0]
    assert context.aligned(u, [("transfer", v), ("another", v)], [("transfer", v)])  # identical vectors: aligned
    assert not context.aligned(u, [("transfer", v)], [("transfer", v)])  # the differing word has no vector


def test_served_from_the_cache_at_the_defaults_and_not_with_the_option_off(run):
    async def scenario(h: Harness):
        first = await h.ask(chat(("user", REWORDED[0])), "about policies")
        again = await h.ask(chat(("user", REWORDED[1])), "answered anew")
        other = await h.ask(chat(("user", ANTONYM[0])), "large dogs")
        trap = await h.ask(chat(("user", ANTONYM[1])), "small dogs")
        return first, again, other, trap, h.cache.stats

    first, again, other, trap, stats = run(scenario, CONTEXT)
    assert (first, again, other, trap) == ("about policies", "about policies", "large dogs", "small dogs")
    assert stats.semantic_hits == 1
    assert run(scenario, OFF)[:4] == ("about policies", "answered anew", "large dogs", "small dogs")


def test_a_hit_says_the_contextual_check_confirmed_it(run):
    async def scenario(h: Harness):
        await h.ask(chat(("user", REWORDED[0])), "about policies")
        plan = h.cache.plan("tenant", CHAT.parse(orjson.dumps(chat(("user", REWORDED[1])))), h.policy, {})
        return await h.cache.lookup(plan)

    hit = run(scenario, CONTEXT)
    assert hit is not None and hit.verifier == "context"


def test_an_earlier_turn_reworded_in_common_words_matches_by_the_same_rule(run):
    follow_up = ("assistant", "You may pay a fee."), ("user", "How large is it?")

    async def scenario(h: Harness):
        first = await h.ask(chat(("user", REWORDED[0]), *follow_up), "up to 60")
        again = await h.ask(chat(("user", REWORDED[1]), *follow_up), "answered anew")
        trap = await h.ask(chat(("user", ANTONYM[0]), *follow_up), "not about policies")
        return first, again, trap

    assert run(scenario, CONTEXT) == ("up to 60", "up to 60", "not about policies")
    assert run(scenario, OFF)[1] == "answered anew"  # off: the reworded history is a miss


def test_no_time_left_is_a_no_not_a_wait():
    async def go():
        embedder = Embedder(EmbeddingConfig(timeout_ms=5000))
        await embedder.start()
        try:
            aligner = context.ContextAligner(embedder)
            late = await aligner.verify(REWORDED[1], REWORDED[0], 0.0)
            in_time = await aligner.verify(REWORDED[1], REWORDED[0], 5.0)
            return late, in_time
        finally:
            await embedder.aclose()

    late, in_time = asyncio.run(go())
    assert late == Verdict(False, "timeout") and in_time == Verdict(True)


class Recording:
    """A stand-in verifier that says `ok` and records what it was asked."""

    def __init__(self, name: str, ok: bool) -> None:
        self.name, self.ok, self.asked = name, ok, []

    async def verify(self, query, cached, timeout_s):
        self.asked.append((query, cached))
        return Verdict(self.ok)


def test_confirm_asks_the_contextual_check_before_the_judge_and_never_for_a_hard_reason():
    ctx, judge = Recording("context", True), Recording("judge", True)
    got = asyncio.run(confirm(REWORDED[1], REWORDED[0], 0.9, True, judge, 0.8, lambda: 1.0, ctx))
    assert got == (True, "context") and judge.asked == []
    got = asyncio.run(confirm("How many eggs for 4 people?", "How many eggs for 3 people?", 0.95, True, judge, 0.8,
                              lambda: 1.0, ctx))
    assert got == (False, "guard:number") and len(ctx.asked) == 1
    no = Recording("context", False)
    got = asyncio.run(confirm(REWORDED[1], REWORDED[0], 0.9, True, judge, 0.8, lambda: 1.0, no))
    assert got == (True, "judge") and len(no.asked) == 1  # a "no" in context leaves the judge its say
    got = asyncio.run(confirm(REWORDED[1], REWORDED[0], 0.9, False, None, 0.8, lambda: 1.0, no))
    assert got == (True, "similarity") and len(no.asked) == 1  # without the guard it is never asked


def test_a_wordnet_synonym_is_served_by_the_contextual_check_never_by_the_guard_alone(run):
    # WordNet pairs "hard"/"difficult" and "provinces"/"states" alike (a shared first sense). In context the
    # first pair reads alike (0.8) and the second does not (0.54): the guard hands both to the contextual
    # check, and with the check off neither is served.
    async def scenario(h: Harness):
        got = [await h.ask(chat(("user", "Is calculus hard to learn?")), "calculus"),
               await h.ask(chat(("user", "Is calculus difficult to learn?")), "answered anew"),
               await h.ask(chat(("user", "How many provinces does Canada have?")), "ten"),
               await h.ask(chat(("user", "How many states does Canada have?")), "none")]
        plan = h.cache.plan("tenant", CHAT.parse(orjson.dumps(chat(("user", "Is calculus difficult to learn?")))),
                            h.policy, {})
        hit = await h.cache.lookup(plan)
        return got, hit.verifier if hit is not None else None

    assert run(scenario, CONTEXT) == (["calculus", "calculus", "ten", "none"], "context")
    assert run(scenario, OFF) == (["calculus", "answered anew", "ten", "none"], None)


def soft(encoder, cached: str, asked: str) -> bool:
    return context.soft_aligned(cached, asked, encoder.word_states(cached), encoder.word_states(asked))


@pytest.mark.parametrize("cached, asked", [
    # Every word restated closely: the guard hands over nothing (a word moved into a compound, an added
    # verb), yet each word has a counterpart at 0.9 in context.
    ("What was the highest temperature recorded in Europe?", "What is Europe's highest recorded temperature?"),
    ("How do hurricanes form over the ocean?", "What makes hurricanes form over the ocean?"),
    ("When do I use ser in Spanish?", "When should ser be used in Spanish?"),
    ("Does the clinic accept all insurance plans?", "Are all insurance plans accepted at the clinic?"),
    # "how to recall" / "can I recall": the infinitive's "to" is no role (dev-tune).
    ("How do I recall an email I sent by mistake in Outlook?",
     "Is it possible to recall an Outlook email that I sent by mistake?"),
    # A comparison asked as a choice between the two things (dev-tune): a choice names no direction.
    ("Does green tea have more caffeine than coffee?", "Which has more caffeine, green tea or coffee?"),
    ("Does green tea have more caffeine than coffee?", "Green tea vs coffee: which has more caffeine?"),
    ("Is there more caffeine in green tea than in coffee?", "Which has more caffeine, green tea or coffee?"),
])
def test_a_rewording_whose_every_word_reads_alike_in_context_is_served(encoder, cached, asked):
    assert guard.mismatch(cached, asked) not in guard.HARD_REASONS
    assert soft(encoder, cached, asked)
    assert context.served(cached, asked, guard.unaligned(cached, asked), encoder.word_states(cached),
                          encoder.word_states(asked))


@pytest.mark.parametrize("cached, asked", [
    # Siblings and opposites in one slot read alike in context, but not at 0.9.
    ("Is the library open on weekends?", "Is the library open on weekdays?"),  # 0.836, the closest on tune
    # A word the frames put in for others ("disable" for "turn off") was never read: it has no counterpart
    # to show, and is not left out (then this read as "mute microphone teams" both ways).
    ("How do I mute my microphone in Teams?", "How do I turn off microphone mute in Teams?"),
    # A choice for a comparison keeps the things compared and what they are compared in.
    ("Does green tea have more caffeine than coffee?", "Which has more caffeine, black tea or coffee?"),
    ("Does green tea have more caffeine than coffee?", "Which has more antioxidants, green tea or coffee?"),
    ("Do I pay tax on money received from family abroad?", "Do I pay tax on money sent from family abroad?"),
    ("How many pushups should a beginner do?", "How many pullups should a beginner do?"),
    ("How often should adults get a flu shot?", "How often should adults get a tetanus shot?"),
    ("Is the concert on friday at 8 pm?", "Is the concert on saturday at 8 pm?"),
    ("How much exercise does a large dog need daily?", "How much exercise does a small dog need daily?"),
    ("How do I encrypt a file on my laptop?", "How do I decrypt a file on my laptop?"),
    ("Should I use oil on a kitchen table?", "Should I use wax on a kitchen table?"),
])
def test_a_word_only_near_another_never_passes_the_soft_bar(encoder, cached, asked):
    assert not soft(encoder, cached, asked)


@pytest.mark.parametrize("cached, asked", [
    # The shapes a trap passes the bar with: refused before any model pass.
    ("How do hurricanes form over the ocean?", "How do hurricanes form under the ocean?"),  # roles
    ("Is it better to stretch before a workout?", "Is it better to stretch after a workout?"),
    ("Can I play games from my phone on my laptop?", "Can I play games from my laptop on my phone?"),  # order
    ("Does green tea have more caffeine than coffee?", "Does green tea have less caffeine than coffee?"),  # opposites
    ("Is it safe to use public wifi for banking?", "Is it unsafe to use public wifi for banking?"),  # a prefix
    ("Does the clinic accept all insurance plans?", "Does the clinic accept some insurance plans?"),  # quantifier
    ("Is the store open on Sundays?", "Is the store not open on Sundays?"),  # a negation
    ("How long does it take to learn Spanish?", "How many years does it take to learn Spanish?"),  # a unit
    ("How do I recall an email in Outlook?", "How do I recall an email in Gmail?"),  # a name
    # Two comparisons the other way round, or a choice against another comparative: roles, an opposite.
    ("Does green tea have more caffeine than coffee?", "Does coffee have more caffeine than green tea?"),
    ("Which has more caffeine, green tea or coffee?", "Does green tea have less caffeine than coffee?"),
    # Nothing but the tense: "was" is a function word the cosines never read, and the rest is word for word.
    ("Who is the CEO of Apple?", "Who was the CEO of Apple?"),
    ("Who is the president of France?", "Who was the president of France?"),
])
def test_what_the_soft_reading_refuses_whatever_the_cosines(cached, asked):
    assert context.soft_refused(cached, asked)


def test_how_much_for_how_many_is_refused_but_an_amount_asked_once_is_not():
    assert context.soft_refused("How much protein is in an egg?", "How many eggs have protein?")
    assert not context.soft_refused("What is 12 times 3?", "How much is twelve times three?")


def test_through_the_cache_a_rewording_every_word_of_which_reads_alike_is_served_and_a_sibling_not(run):
    async def scenario(h: Harness):
        first = await h.ask(chat(("user", "How do hurricanes form over the ocean?")), "warm water")
        again = await h.ask(chat(("user", "What makes hurricanes form over the ocean?")), "answered anew")
        other = await h.ask(chat(("user", "Is the library open on weekends?")), "weekends: yes")
        trap = await h.ask(chat(("user", "Is the library open on weekdays?")), "weekdays: yes")
        return first, again, other, trap

    assert run(scenario, CONTEXT) == ("warm water", "warm water", "weekends: yes", "weekdays: yes")
    assert run(scenario, OFF) == ("warm water", "answered anew", "weekends: yes", "weekdays: yes")
