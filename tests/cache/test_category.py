"""The question classifier: volatile when the answer depends on when it is asked, code, else general."""

from __future__ import annotations

import pytest

from app.cache import category
from app.cache.category import EARLIER_MAX_CHARS, EARLIER_MAX_TURNS, MAX_CHARS, Category, classify, classify_turns

VOLATILE, CODE, GENERAL = Category.VOLATILE, Category.CODE, Category.GENERAL


@pytest.mark.parametrize("question", [
    "What is the price of bitcoin right now?",
    "What's the weather in Paris today?",
    "Will it rain in Seattle tomorrow?",
    "Who won the game last night?",
    "What's the score of the Lakers game?",
    "Is the pharmacy on Main Street open?",
    "What time does the post office close?",
    "What are today's top headlines?",
    "Who is the current president of France?",
    "What is the current exchange rate from USD to EUR?",
    "What is the latest version of Python?",
    "What's the newest iPhone?",
    "What is trending on social media this week?",
    "Is it currently snowing in Denver?",
])
def test_time_bound_questions_are_volatile(question):
    assert classify(question) is VOLATILE


@pytest.mark.parametrize("question", [
    "Write a Python function that reverses a string",
    "Fix this function: def add(a, b): return a - b",
    "```js\nconsole.log(x)\n```\nwhy does this print undefined?",
    'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\nKeyError: \'id\'',
    "How do I sort a dictionary by value in Python?",
    "How do I squash the last 3 commits in git?",
    "Explain this regex: ^a+$",
])
def test_code_requests_and_pasted_code_are_code(question):
    assert classify(question) is CODE


@pytest.mark.parametrize("question", [
    "How does electric current flow through a wire?",  # "current" as a noun of physics
    "What is alternating current?",
    'Who said "today is a gift, that is why it is called the present"?',  # "today" inside a quotation
    "What did the headline 'Dewey defeats Truman' get wrong?",
    "How do I open port 8080 on my router?",  # "open" with no subject that opens and closes
    "Is Python open source?",
    "What is a closed set in topology?",
    "Where do pandas live?",  # "live" the verb
    "Submit it by Friday at the latest: how should I plan the week?",
    "What is the weather like in Lisbon in May?",  # the climate, asked of no particular day
    "Who won the 1966 World Cup?",
    "Explain the class system of medieval England",  # "class" without a programming verb
    "How do I boil an egg?",
])
def test_tricky_negatives_stay_general(question):
    assert classify(question) is GENERAL


def test_the_latest_version_is_volatile_even_in_a_code_question():
    assert classify("What is the latest version of numpy for Python 3.12?") is VOLATILE


def test_code_that_mentions_today_is_code_not_volatile():
    # Its answer, the code, does not age with the date it is asked on.
    assert classify("Write a JavaScript function that returns today's date") is CODE


def test_a_general_follow_up_takes_the_conversation_s_category():
    assert classify_turns("And in London?", ("What's the weather in Paris today?",)) is VOLATILE
    assert classify_turns("And for a list?", ("Write a Python function to reverse a string",)) is CODE
    assert classify_turns("And in London?", ("How do I get a library card?",)) is GENERAL


def test_a_volatile_last_turn_wins_over_code_history():
    assert classify_turns("What's the weather today?", ("Write a Python function",)) is VOLATILE


def test_only_the_start_of_a_huge_prompt_is_read():
    # A signal past MAX_CHARS is not seen: the cost per question stays bounded (bench/category_cost.py).
    assert classify("a " * MAX_CHARS + "today") is GENERAL
    assert classify("today " + "a " * MAX_CHARS) is VOLATILE


def test_a_long_conversation_costs_a_bounded_read_of_its_recent_turns(monkeypatch):
    # Every earlier user turn was classified on every request: 64 pasted turns cost 64 passes of 2,048
    # characters. Only the recent ones are read, newest first (the real classifier, counted).
    read: list[str] = []
    real = category.classify
    monkeypatch.setattr(category, "classify", lambda text: read.append(text) or real(text))
    pasted = "Here is the next part of my essay about the history of the town. " * 40
    assert classify_turns("And then?", (pasted,) * 64) is GENERAL
    earlier = read[1:]  # read[0] is the last turn
    assert len(earlier) <= EARLIER_MAX_TURNS
    assert sum(len(t) for t in earlier) <= EARLIER_MAX_CHARS


def test_a_follow_up_reads_the_newest_earlier_turns_first():
    many = ("How do I get a library card?",) * (EARLIER_MAX_TURNS - 1)
    assert classify_turns("And in London?", ("Write a Python function to parse dates",) + many
                          + ("What's the weather in Paris today?",)) is VOLATILE
    # A time word further back than the turns read is one of the classifier's documented misses.
    assert classify_turns("And in London?", ("What's the weather in Paris today?",)
                          + ("How do I get a library card?",) * EARLIER_MAX_TURNS) is GENERAL


def test_the_bounded_patterns_still_read_what_they_read():
    # The quote, SELECT and call patterns stop their scan at the next opener (bench/category_cost.py's
    # adversarial prompts): quotes, nested queries and calls are still found.
    assert classify("Who said “today is a gift”? And «tonight» too?") is GENERAL
    assert classify("Who said “today is a gift” and “what now”?") is GENERAL
    assert classify("Why is SELECT a, (SELECT max(x) FROM t) FROM u slow?") is CODE
    assert classify("Why does SELECT Sum(x) FROM t return null?") is CODE
    assert classify("my list:\nitems.append(1);") is CODE
    assert classify("“What's the weather today?") is VOLATILE  # an unclosed quote hides nothing
