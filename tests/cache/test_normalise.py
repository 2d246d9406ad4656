"""Near-repeats: what app/cache/normalise.py rewrites, what it must never touch, and the cache serving
a typed-differently question end to end (real embedder, in-process store)."""

from __future__ import annotations

import orjson
import pytest

from app.cache import guard
from app.cache.keys import exact_key, semantic_query
from app.cache.normalise import case_conflict, correct, normalise
from app.protocols import CHAT
from tests.cache.test_semantic_rules import chat, run  # noqa: F401 - the fixture


@pytest.mark.parametrize("typed, meant", [
    ("Is chocoalte toxic for dogs?", "Is chocolate toxic for dogs?"),  # two letters swapped
    ("How do I fix a leaking tilet?", "How do I fix a leaking toilet?"),  # a letter dropped
    ("Whaat shoudl I put in a bird feeder in winter?", "What should I put in a bird feeder in winter?"),
    ("HOW DO I BOIL AN EGGG???", "HOW DO I BOIL AN EGG?"),  # all capitals: every word may be repaired
    ("Hey, quick question: How do I boil an egg? Thanks in advance!", "How do I boil an egg?"),
    ("How do I get a refund for a cancelled train ticket?\n\nThanks,\nMaria", "How do I get a refund for a cancelled train ticket?"),
    ("Hey there! Can a PS4 controller work on a PS5? - Tom", "Can a PS4 controller work on a PS5?"),
    ("how do i boil an egg pls help", "how do i boil an egg"),
    ("Sorry if this is a dumb question, but is the shuttle free?", "Is the shuttle free?"),
    ("  **How do I boil an egg?**  ", "How do I boil an egg?"),
    ("**How do I cast on for a scarf?**\n\nThanks,\nMaria", "How do I cast on for a scarf?"),  # markup, then a sign-off
    ("Is chocolate toxic for dogs? :) 🙏", "Is chocolate toxic for dogs?"),
    ("can u tell me how to fix ur router w/o a reset", "can you tell me how to fix your router without a reset"),
    ("whats the difference between let and var", "what's the difference between let and var"),
    ("Why dont my plants grow", "Why don't my plants grow"),
    ("how many glasses of wine r in a magnum", "how many glasses of wine are in a magnum"),
    ("How do I set up an e-mail rule?", "How do I set up an email rule?"),
    ("How often should I replace my tooth brush?", "How often should I replace my toothbrush?"),
    ("howdo I reset my password?", "how do I reset my password?"),  # a space left out between two function words
    ("What is a good café in Paris?", "What is a good cafe in Paris?"),
    ("is it going to rain 2day?", "is it going to rain today?"),
    ("why wont my car start", "why won't my car start"),
    ("Need help: how do I reset my password? thank u", "How do I reset my password?"),
    ("how do i make pancakes plsss", "how do i make pancakes"),
])
def test_the_ways_people_type_a_question_are_written_one_way(typed, meant):
    assert normalise(typed) == meant
    assert normalise(meant) == meant


@pytest.mark.parametrize("text", [
    "How do I remove a tick from my car?",  # a real word one letter from another ("cat") stays
    "Is ethanol safe to drink?",
    "CAN I USE PEX FOR HOT WATER?",  # in capitals, a short word may be an acronym
    "can i use pex for hot water",  # and in lower case too: three letters are repaired only into very common words
    "What does HLOOKUP do in Excel?",  # acronyms, names, mixed case, numbers and versions: never touched
    "Is Geramn harder to learn than French?",
    "Does the iPhone 15 have a USB-C port?",
    "Is Python 3.12 faster than Python 3.11?",
    "Is 100 mbps fast enough?",  # a word with no vowel is a unit or a code, not a slip
    "How do I say thanks in Japanese?",  # "thanks" is the question here, not a sign-off
    "What is the best?",
    "Help me choose a laptop",
    "how do I plot in r",  # R, the language
    "Is it some time soon?",  # "some time" is not "sometime"
    "how do i use dropbox",  # a brand the dictionary lacks is never split into words
    "how do i disable two-factor authentication on gmail?",  # the first letter is taken as typed ("mail")
    "HOW DO I READ A JSON FILE IN PYTHON?",
    "What is the difference between let and const?",  # computing words the dictionary lacks
    "How do I add a user to the admin group?",
    "Wie viel kostet das Ticket heute?",  # mostly unknown words: another language, left alone
    "がぎ は?",  # accents come off Latin letters only
    "thanks!",  # nothing would be left: the text stays as it was
])
def test_words_that_carry_meaning_are_left_alone(text):
    assert normalise(text) == text


def test_a_slip_is_repaired_only_when_one_word_clearly_fits():
    assert correct("laod") is None  # load, land, laid: no single word stands out
    assert correct("teneager") == "teenager"
    assert correct("ruse") is None  # a word of its own
    assert correct("wht") is None  # no vowel: too much like a code


def test_code_and_long_texts_keep_every_character():
    code = "Why does this fail?\n    x = 1\n  print(x)"
    assert normalise(code) == code
    long_text = "Whaat " * 200
    assert normalise(long_text) == long_text


@pytest.mark.parametrize("a, b, conflict", [
    ("Is 100 Mbps fast enough for 4K streaming?", "Is 100 MBps fast enough for 4K streaming?", True),
    ("How much is 1 GB of data?", "How much is 1 Gb of data?", True),
    ("What does HLOOKUP do in Excel?", "What does VLOOKUP do in Excel?", True),
    ("What does JavaScript do?", "What does Javascript do?", False),  # case as style, in a long word
    ("Is 100 Mbps fast enough?", "is 100 mbps fast enough?", False),  # a text in lower case carries no case
    ("Is 100 Mbps fast enough?", "IS 100 MBPS FAST ENOUGH?", False),
    ("Do smart plugs work with WiFi?", "Do smart plugs work with wifi?", False),  # a lower-case word carries no case
])
def test_letter_case_that_changes_the_question(a, b, conflict):
    assert case_conflict(a, b) is conflict
    assert (guard.mismatch(a, b) == "case") is conflict
    assert "case" in guard.HARD_REASONS  # no second opinion may overrule it


def test_the_exact_key_is_the_request_as_sent_and_the_semantic_text_is_normalised():
    def req(text):
        return CHAT.parse(orjson.dumps(chat(("user", text))))

    clean, noisy = req("Is chocolate toxic for dogs?"), req("Hey! Is chocoalte toxic for dogs? thx")
    assert exact_key("t", clean) != exact_key("t", noisy)  # never merged without the guard
    q_clean, q_noisy = semantic_query("t", clean), semantic_query("t", noisy)
    assert q_clean is not None and q_noisy is not None
    assert q_clean.text == q_noisy.text == "Is chocolate toxic for dogs?"
    assert q_clean.scope == q_noisy.scope
    other = semantic_query("other-tenant", noisy)
    assert other is not None and other.scope != q_noisy.scope  # tenants never mix


def test_a_near_repeat_is_served_and_a_one_letter_trap_is_not(run):  # noqa: F811 - the fixture
    async def scenario(h):
        assert await h.ask(chat(("user", "Is chocolate toxic for dogs?")), "yes") == "yes"
        assert await h.ask(chat(("user", "hey, is chocoalte toxic for dogs?? thx in advance")), "miss") == "yes"
        assert await h.ask(chat(("user", "IS CHOCOLATE TOXIC FOR DOGS")), "miss") == "yes"
        assert await h.ask(chat(("user", "Is 100 Mbps fast enough for 4K streaming?")), "Mbps") == "Mbps"
        assert await h.ask(chat(("user", "Is 100 MBps fast enough for 4K streaming?")), "MBps") == "MBps"
        assert await h.ask(chat(("user", "What does HLOOKUP do in Excel?")), "H") == "H"
        assert await h.ask(chat(("user", "What does VLOOKUP do in Excel?")), "V") == "V"

    run(scenario)
