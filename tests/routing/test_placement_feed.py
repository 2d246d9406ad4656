"""The placement feed: gateway replicas hear each other's prefix placements through a real Redis."""

from __future__ import annotations

import asyncio

import pytest

from app.cache.redis_store import connect
from app.routing.placement_feed import Computed, Freed, Placed, PlacementFeed, fingerprint
from app.routing.prefix_index import prompt_blocks
from tests.support import free_port

BACKENDS = {"a": fingerprint("http://127.0.0.1:9001/v1", "m"), "b": fingerprint("http://127.0.0.1:9002/v1", "m")}


def feed(url: str, channel: str, backends: dict[str, str] = BACKENDS) -> PlacementFeed:
    return PlacementFeed(connect(url, 1.0), connect(url, 1.0, idle_ok=True), channel, backends, 1.0)


async def heard(url: str, channel: str, send, listener_backends: dict[str, str] = BACKENDS, wait_s: float = 1.0):
    """Start a listening replica and a publishing one, run `send(publisher)`, and return what the listener
    applied and both feeds."""
    listener, publisher = feed(url, channel, listener_backends), feed(url, channel)
    got: list = []
    mine: list = []
    tasks = [asyncio.create_task(listener.listen_forever(got.append)),
             asyncio.create_task(publisher.listen_forever(mine.append)),
             asyncio.create_task(publisher.publish_forever())]
    try:
        await asyncio.sleep(0.3)  # both subscribed
        await send(publisher)
        await asyncio.sleep(wait_s)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listener.aclose()
        await publisher.aclose()
    return got, mine, listener, publisher


def test_a_replica_hears_another_ones_placements_in_order_and_never_its_own(redis_server):
    keys = prompt_blocks("You are the billing team's assistant. " * 40).keys

    async def send(p):
        copy = p.placed("a", keys, 0.5, 2.0, computes=True)
        p.computed(copy)
        p.freed(copy, None)
        p.freed(p.placed("b", keys[:3], 0.1, 0.1, computes=False), "backend")

    got, mine, listener, publisher = asyncio.run(heard(redis_server.url, "t:hear", send))
    origin = got[0].origin
    assert got == [Placed(origin, 1, "a", keys, 0.5, 2.0, True), Computed(origin, 1), Freed(origin, 1, None),
                   Placed(origin, 2, "b", keys[:3], 0.1, 0.1, False), Freed(origin, 2, "backend")]
    assert mine == []  # its own message comes back to it, and is skipped
    assert publisher.snapshot()["published"] == 5 and listener.snapshot()["received"] == 5


def test_a_placement_on_a_backend_known_by_another_server_is_not_applied(redis_server):
    # The listener's "a" is another server (another URL) under the same name: what the publisher's "a"
    # holds says nothing of it.
    other = {"a": fingerprint("http://10.0.0.7:8000/v1", "m"), "b": BACKENDS["b"]}
    keys = prompt_blocks("Prompt on a backend of the same name elsewhere. " * 20).keys

    async def send(p):
        p.placed("a", keys, 0.1, 0.1, computes=True)
        p.placed("b", keys, 0.1, 0.1, computes=True)

    got, _, listener, _ = asyncio.run(heard(redis_server.url, "t:other", send, other))
    assert [e.backend for e in got] == ["b"]
    assert listener.ignored == 1


def test_unreadable_messages_are_skipped_and_the_listener_goes_on(redis_server):
    keys = prompt_blocks("After the garbage, a real placement. " * 20).keys

    async def send(p):
        raw = connect(redis_server.url, 1.0)
        await raw.publish("t:garbage", b"not json")
        await raw.publish("t:garbage", b'{"from": "x", "events": [["p", 1, "a", "zz", ["not hex"], 0, 0, true]]}')
        await raw.publish("t:garbage", b'{"from": "x", "events": [["z", 1]]}')
        await raw.aclose()
        p.placed("a", keys, 0.1, 0.1, computes=True)

    got, _, listener, _ = asyncio.run(heard(redis_server.url, "t:garbage", send))
    assert [(e.backend, e.keys) for e in got] == [("a", keys)]
    assert listener.errors == 2  # the JSON that is not JSON, the unknown event
    assert listener.ignored == 1  # the placement on a backend it does not know alike


def test_with_redis_gone_events_are_dropped_and_counted_and_nothing_raises():
    dead = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    keys = prompt_blocks("Nobody will hear this. " * 20).keys

    async def main():
        f = PlacementFeed(connect(dead, 0.2), connect(dead, 0.2, idle_ok=True), "t:dead", BACKENDS, 0.2)
        tasks = [asyncio.create_task(f.publish_forever()), asyncio.create_task(f.listen_forever(lambda e: None))]
        f.placed("a", keys, 0.1, 0.1, computes=True)
        await asyncio.sleep(0.5)
        for t in tasks:
            assert not t.done()  # still retrying, not crashed
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await f.aclose()
        return f

    f = asyncio.run(main())
    assert f.dropped == 1 and f.published == 0
    assert f.errors >= 2  # the publish and the subscription


@pytest.mark.parametrize("queued", [0, 1500])
def test_the_queue_is_bounded_while_redis_is_slow(queued):
    async def main():
        dead = f"redis://127.0.0.1:{free_port()}"
        f = PlacementFeed(connect(dead, 0.2), connect(dead, 0.2, idle_ok=True), "t:bound", BACKENDS, 0.2)
        for i in range(queued):  # no publisher runs: all of them wait
            f.placed("a", [i.to_bytes(12, "big")], 0.1, 0.1, computes=True)
        await f.aclose()
        return f

    f = asyncio.run(main())
    assert f.snapshot()["pending"] == min(queued, 1024)
    assert f.dropped == max(0, queued - 1024)
