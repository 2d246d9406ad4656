"""Another replica's copy of a prompt prefix, held in this replica's index as its own lease would hold it.

Two routers stand for two gateway replicas over the same llama.cpp backends. Each has a placement feed;
what one queues is carried to the other as the Redis listener carries it (the feed's own message, decoded
by the other feed: tests/routing/test_placement_feed.py runs that path through a real Redis)."""

from __future__ import annotations

import asyncio
import time

from app.config import BackendConfig, ModelAlias
from app.routing.context import RouteContext
from app.routing.placement_feed import PlacementFeed, fingerprint
from app.routing.prefix_index import prompt_blocks
from app.routing.remote_copies import RemoteCopies
from app.routing.router import Router
from tests.routing.test_router import LlamaBackend

NAMES = ("a", "b")
CONFIGS = {n: BackendConfig(base_url=f"http://127.0.0.1:{9000 + i}/v1", model="m", flavor="llamacpp")
           for i, n in enumerate(NAMES)}
PROMPT = prompt_blocks("system: You are the billing assistant; cite the policy. " * 30 + "user: hi")


class Replica:
    def __init__(self) -> None:
        # No Redis client: the test carries the messages itself (Replica.tell).
        self.feed = PlacementFeed(None, None, "t", {n: fingerprint(c.base_url, c.model) for n, c in CONFIGS.items()}, 1.0)
        self.router = Router({n: LlamaBackend(n, c) for n, c in CONFIGS.items()},
                             {"m": ModelAlias(backends=NAMES, strategy="latency_aware")}, 1.0, placements=self.feed)
        self.remote = RemoteCopies(self.router.states)

    def tell(self, other: Replica) -> None:
        """What this replica queued reaches `other`, as its listener would hand it on."""
        drained = self.feed.drain()
        if drained is not None:
            for event in other.feed.decode(drained[0]):
                other.remote(event)

    def ctx(self) -> RouteContext:
        return RouteContext(stream=True, prompt_tokens=round(PROMPT.tokens), max_tokens=20, prefix=PROMPT, cached={})

    def held(self, backend: str) -> tuple[int, bool]:
        """(blocks of the prompt the index holds on `backend`, whether a copy of it is still being computed)."""
        blocks, _, leader, _ = self.router.states[backend].prefixes.match(PROMPT.keys, time.monotonic())
        return blocks, leader is not None and not leader.is_set()


def test_a_sibling_on_another_replica_waits_for_the_copy_being_computed_rather_than_computing_it_again():
    async def main():
        one, two = Replica(), Replica()
        first = await one.router.acquire("m", ctx=one.ctx())
        one.tell(two)
        assert two.held(first.state.name) == (len(PROMPT.keys), True)
        sibling = await two.router.acquire("m", ctx=two.ctx())
        return first, sibling, two

    first, sibling, two = asyncio.run(main())
    assert sibling.state.name == first.state.name
    assert sibling.burst_wait_s > 0  # held for the copy, as a sibling on the same replica would be
    assert two.remote.expired == 0 and len(two.remote) == 1


def test_without_the_feed_the_other_replica_knows_nothing_of_the_copy():
    async def main():
        one, two = Replica(), Replica()
        await one.router.acquire("m", ctx=one.ctx())
        one.feed.drain()  # never told
        return await two.router.acquire("m", ctx=two.ctx())

    sibling = asyncio.run(main())
    assert sibling.prefix.blocks == 0 and sibling.burst_wait_s == 0


def test_on_a_slots_cache_the_copy_is_busy_until_its_request_ends_then_free():
    async def main():
        one, two = Replica(), Replica()
        first = await one.router.acquire("m", ctx=one.ctx())
        name = first.state.name
        one.tell(two)
        first.prefilled()  # its first token
        one.tell(two)
        at_first_token = two.held(name), two.router.states[name].prefixes.copies(PROMPT.keys)
        first.release()
        one.tell(two)
        return at_first_token, two.held(name), two.router.states[name].prefixes.copies(PROMPT.keys), len(two.remote)

    at_first_token, after, copies_after, remembered = asyncio.run(main())
    # Computed, but its slot runs its answer: one copy, in use (a sibling there would wait or go cold).
    assert at_first_token == ((len(PROMPT.keys), True), (1, 1))
    assert after == (len(PROMPT.keys), False) and copies_after == (1, 0)
    assert remembered == 0


def test_a_copy_whose_request_ended_before_computing_it_is_forgotten_there_too():
    async def main():
        one, two = Replica(), Replica()
        first = await one.router.acquire("m", ctx=one.ctx())
        one.tell(two)
        first.release(backend_failed=True, failed=True)  # a refused connection, before any token
        one.tell(two)
        return two.held(first.state.name)

    assert asyncio.run(main()) == (0, False)


def test_a_copy_whose_end_is_never_heard_is_taken_as_free_after_its_grace():
    async def main():
        one, two = Replica(), Replica()
        first = await one.router.acquire("m", ctx=one.ctx())
        one.tell(two)  # placed; its end is never told (the replica died, Redis lost the message)
        name = first.state.name
        kept = two.remote.expire(time.monotonic() + 1.0)
        gone = two.remote.expire(time.monotonic() + first.estimate.e2e_s + 60.0)
        return kept, gone, two.held(name), two.remote.expired

    kept, gone, held, expired = asyncio.run(main())
    assert (kept, gone, expired) == (0, 1, 1)
    assert held == (len(PROMPT.keys), False)  # computed, as far as anyone knows, and free
