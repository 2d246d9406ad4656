"""Conversations through the gateway, as a chat client holds them (openai SDK, loopback, both stores):
a follow-up is served from another conversation only when the whole context means the same."""

from __future__ import annotations

import uuid

import pytest

from tests.cache.test_cache import settle

SHIPPED = {"x-slipstream-cache-threshold": "0.75"}  # the shipped threshold (these gateways default to 0.9)


class Chat:
    """One client's conversation: each reply is appended as the SDK returned it."""

    def __init__(self, gw, system: str, key: str | None = None) -> None:
        self.client = gw.client(key) if key else gw.client()
        self.messages: list = [{"role": "system", "content": system}]

    def say(self, content, reply=None) -> str:
        """Send a user turn; the x-slipstream-cache status. `reply`: the assistant turn to append
        instead of the answer's message object (a client that keeps its own copy of the text)."""
        self.messages.append({"role": "user", "content": content})
        raw = self.client.chat.completions.with_raw_response.create(
            model="cached", messages=self.messages, temperature=0, extra_headers=SHIPPED)
        message = raw.parse().choices[0].message
        self.messages.append(message if reply is None else {"role": "assistant", "content": reply})
        return raw.headers["x-slipstream-cache"]


def cached_conversation(gw, assistant: str, statement: str, reply: str, question: str) -> str:
    """A first conversation, cached under a system prompt of its own (returned, "You are <assistant> <tag>."):
    a statement, its reply, a question answered by the backend."""
    system = f"You are {assistant} {uuid.uuid4().hex[:6]}."
    first = Chat(gw, system)
    first.say(statement, reply=reply)
    assert first.say(question) == "miss"
    settle(gw)
    return system


@pytest.fixture
def travel(cached_gateway):
    return cached_conversation(cached_gateway, "a travel assistant for agency", "I'm flying to Tokyo next week.",
                               "Great, Tokyo is lovely in spring.", "What should I pack?")


def test_the_same_history_and_a_reworded_question_hits(cached_gateway, travel):
    chat = Chat(cached_gateway, travel)
    chat.say("I'm flying to Tokyo next week.", reply="Great, Tokyo is lovely in spring.")
    assert chat.say("What should I pack?") == "hit"
    chat = Chat(cached_gateway, travel)
    chat.say("I'm flying to Tokyo next week.", reply="Great, Tokyo is lovely in spring.")
    assert chat.say("Please tell me: what should I pack?") == "semantic-hit"


@pytest.mark.parametrize("statement, question", [
    ("My daughter is three years old.", "What should she eat for breakfast?"),  # the statement reworded
    ("I have a 3 year old daughter.", "Please tell me: what should she eat for breakfast?"),  # the question
    ("My daughter is 3 years old.", "Can you tell me: what should she eat for breakfast?"),  # both
])
def test_a_reworded_history_hits(cached_gateway, statement, question):
    system = cached_conversation(cached_gateway, "a parenting assistant for clinic", "I have a 3 year old daughter.",
                                 "Got it, a three-year-old.", "What should she eat for breakfast?")
    chat = Chat(cached_gateway, system)
    chat.say(statement, reply="Got it, a three-year-old.")
    assert chat.say(question) == "semantic-hit"


def test_a_reply_sent_back_as_the_sdk_returned_it_hits(cached_gateway):
    """The usual client appends the answer's message object (empty fields and all); when the first
    turn was itself served from the cache, that reply is the cached one, and the follow-up hits."""
    tag = uuid.uuid4().hex[:6]
    system = f"You are a cooking assistant for shop {tag}."
    first = Chat(cached_gateway, system)
    assert first.say("I want to bake sourdough bread.") == "miss"
    settle(cached_gateway)
    assert first.say("How long should the dough rise?") == "miss"
    settle(cached_gateway)
    again = Chat(cached_gateway, system)
    assert again.say("I want to bake sourdough bread.") == "hit"
    again.messages[-1] = {**again.messages[-1].model_dump(), "refusal": None, "tool_calls": [], "annotations": []}
    assert again.say("How long should my dough rise?") == "semantic-hit"


def test_text_parts_are_the_same_text(cached_gateway, travel):
    chat = Chat(cached_gateway, travel)
    chat.messages[0]["content"] = [{"type": "text", "text": travel}]
    chat.messages.append({"role": "user", "content": [{"type": "text", "text": "I'm flying to Tokyo next week."}]})
    chat.messages.append({"role": "assistant", "content": [{"type": "text", "text": "Great, Tokyo is lovely in spring."}]})
    assert chat.say("Please tell me: what should I pack?") == "semantic-hit"


@pytest.mark.parametrize("statement, reply", [
    ("I'm flying to Oslo next week.", "Great, Tokyo is lovely in spring."),  # another place
    ("I'm not flying to Tokyo next week.", "Great, Tokyo is lovely in spring."),  # a negation
    ("I'm flying to Tokyo next year.", "Great, Tokyo is lovely in spring."),  # another time
    ("I'm flying to Tokyo next week.", "Great, Tokyo is lovely in autumn."),  # the reply said something else
])
def test_the_same_question_after_another_history_misses(cached_gateway, travel, statement, reply):
    chat = Chat(cached_gateway, travel)
    chat.say(statement, reply=reply)
    assert chat.say("What should I pack?") == "miss"


def test_the_same_words_in_another_order_are_another_history(cached_gateway):
    # Who bit whom: every word and fact is kept, and the turns read at cosine ~0.97.
    system = cached_conversation(cached_gateway, "a vet's assistant for clinic", "My dog bit my cat.",
                                 "I'm sorry to hear that.", "What should I do?")
    same = Chat(cached_gateway, system)
    same.say("My dog bit my cat.", reply="I'm sorry to hear that.")
    assert same.say("What should I do?") == "hit"
    swapped = Chat(cached_gateway, system)
    swapped.say("My cat bit my dog.", reply="I'm sorry to hear that.")
    assert swapped.say("What should I do?") == "miss"


def test_another_system_prompt_misses(cached_gateway, travel):
    chat = Chat(cached_gateway, travel + " Answer as a pirate.")
    chat.say("I'm flying to Tokyo next week.", reply="Great, Tokyo is lovely in spring.")
    assert chat.say("What should I pack?") == "miss"


def test_another_tenant_never_hits(cached_gateway, travel):
    chat = Chat(cached_gateway, travel, key="sk-tenant-5")
    chat.say("I'm flying to Tokyo next week.", reply="Great, Tokyo is lovely in spring.")
    assert chat.say("What should I pack?") == "miss"


def test_a_conversation_that_opens_with_a_reworded_statement_continues_from_the_cache(cached_gateway):
    """The replies are the model's: the reworded statement is served the cached reply (a first-person
    statement with the same facts), so the rest of the conversation can match too."""
    system = f"You are a parenting assistant for clinic {uuid.uuid4().hex[:6]}."
    first = Chat(cached_gateway, system)
    assert first.say("I have a 3 year old daughter.") == "miss"
    settle(cached_gateway)
    assert first.say("What should she eat for breakfast?") == "miss"
    settle(cached_gateway)
    again = Chat(cached_gateway, system)
    assert again.say("My daughter is three years old.") == "semantic-hit"
    assert again.say("What should she eat for breakfast?") == "semantic-hit"
    other = Chat(cached_gateway, system)
    assert other.say("My daughter is five years old.") == "miss"
    assert other.say("What should she eat for breakfast?") == "miss"
