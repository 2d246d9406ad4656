"""When a semantic hit may be served: the model's window, and conversations (real embedder, in-process store)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from app.cache.embedder import Embedder
from app.cache.service import Cache
from app.cache.store import MemoryStore
from app.config import CacheConfig, CachePolicy, EmbeddingConfig
from app.protocols import CHAT

POLICY = CachePolicy.model_validate({"semantic": {"enabled": True}})  # shipped threshold and guard


def chat(*turns: tuple[str, str]) -> dict:
    return {"model": "m", "temperature": 0, "messages": [{"role": r, "content": c} for r, c in turns]}


def answer(text: str) -> dict:
    return {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": text}}]}


class Harness:
    def __init__(self, cache: Cache, policy: CachePolicy = POLICY) -> None:
        self.cache = cache
        self.policy = policy

    async def ask(self, body: dict, reply: str) -> str:
        """The answer served for `body`: from the cache, else `reply` (which is then stored)."""
        req = CHAT.parse(orjson.dumps(body))
        plan = self.cache.plan("tenant", req, self.policy, {})
        hit = await self.cache.lookup(plan)
        if hit is not None:
            return hit.answer.body["choices"][0]["message"]["content"]
        self.cache.save_later(plan, answer(reply))
        await asyncio.gather(*self.cache._pending)
        await self.cache.writer.drain(5.0)
        return reply


@pytest.fixture(scope="module")
def run():
    """run(scenario) runs `await scenario(harness)` against one fresh cache (the model loads once)."""
    loop = asyncio.new_event_loop()
    embedder = Embedder(EmbeddingConfig(timeout_ms=5000))  # generous: a shared 2-core machine
    loop.run_until_complete(embedder.start())

    def go(scenario, policy: CachePolicy = POLICY):
        cache = Cache(CacheConfig(), MemoryStore(1000), embedder)
        try:
            return loop.run_until_complete(scenario(Harness(cache, policy)))
        finally:
            loop.run_until_complete(cache.writer.aclose())

    yield go
    loop.run_until_complete(embedder.aclose())
    loop.close()


def test_long_prompts_sharing_their_first_256_word_pieces_never_share_an_answer(run):
    opening = "Here is my contract. " + "The tenant shall keep the premises clean and in good repair. " * 30

    async def scenario(h: Harness):
        first = await h.ask(chat(("user", opening + "Question: may I keep a cat?")), "about cats")
        second = await h.ask(chat(("user", opening + "Question: may I sublet my room?")), "about subletting")
        again = await h.ask(chat(("user", opening + "Question: may I keep a cat?")), "not from the cache")
        return first, second, again, h.cache.stats

    first, second, again, stats = run(scenario)
    assert (first, second) == ("about cats", "about subletting")
    assert again == "about cats"  # beyond the window the exact cache still serves
    assert stats.semantic_hits == 0 and stats.beyond_window >= 2


def test_a_follow_up_hits_after_a_reworded_history(run):
    async def scenario(h: Harness):
        await h.ask(chat(("system", "You are a travel assistant."), ("user", "I'm flying to Tokyo next week."),
                         ("assistant", "Sure, happy to help."), ("user", "What should I pack?")), "pack for Tokyo")
        return await h.ask(chat(("system", "You are a travel assistant."), ("user", "i'm flying to tokyo next week"),
                                ("assistant", "Sure, happy to help."), ("user", "Please tell me: what should I pack?")),
                           "from the model")

    assert run(scenario) == "pack for Tokyo"


@pytest.mark.parametrize("history_b, system_b", [
    (("I'm flying to Oslo next week.", "Sure, happy to help."), "You are a travel assistant."),  # another place
    (("I'm not flying to Tokyo next week.", "Sure, happy to help."), "You are a travel assistant."),  # negation
    (("I'm flying to Tokyo next week.", "Sure, happy to help."), "You are a pirate."),  # another system prompt
    (("I'm flying to Tokyo next week.", "No."), "You are a travel assistant."),  # another assistant turn
])
def test_the_same_last_turn_after_a_different_history_is_a_miss(run, history_b, system_b):
    async def scenario(h: Harness):
        await h.ask(chat(("system", "You are a travel assistant."), ("user", "I'm flying to Tokyo next week."),
                         ("assistant", "Sure, happy to help."), ("user", "What should I pack?")), "pack for Tokyo")
        return await h.ask(chat(("system", system_b), ("user", history_b[0]), ("assistant", history_b[1]),
                                ("user", "What should I pack?")), "from the model")

    assert run(scenario) == "from the model"


def test_a_shorter_or_longer_history_is_a_miss(run):
    async def scenario(h: Harness):
        await h.ask(chat(("user", "I have a parrot."), ("assistant", "Nice."), ("user", "Can it eat avocado?")), "no")
        return await h.ask(chat(("user", "Can it eat avocado?")), "from the model")

    assert run(scenario) == "from the model"
