"""The in-process store's semantic side: nearest first, expired and evicted entries never returned."""

from __future__ import annotations

import asyncio

import numpy as np

from app.cache.store import MemoryStore


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def test_nearest_first_over_many_writes_and_lookups_between_them():
    async def go():
        store = MemoryStore(10_000)
        for i in range(300):  # grows the arrays several times, with lookups in between
            await store.add_vector("s", unit(i), f"q{i}", f"a{i}".encode(), 60)
            if i % 50 == 0:
                assert (await store.nearest("s", unit(i), 1))[0].query == f"q{i}"
        got = await store.nearest("s", unit(123), 4)
        assert got[0].query == "q123" and abs(got[0].similarity - 1.0) < 1e-5
        assert [n.similarity for n in got] == sorted((n.similarity for n in got), reverse=True)
        assert await store.nearest("other scope", unit(123), 4) == []

    asyncio.run(go())


def test_expired_entries_are_never_returned():
    async def go():
        store = MemoryStore(100)
        await store.add_vector("s", unit(1), "short-lived", b"x", 0.05)
        await store.add_vector("s", unit(2), "long-lived", b"y", 60)
        await asyncio.sleep(0.1)
        return [n.query for n in await store.nearest("s", unit(1), 4)]

    assert asyncio.run(go()) == ["long-lived"]


def test_the_oldest_entry_of_any_scope_is_evicted_first():
    async def go():
        store = MemoryStore(20)
        await store.add_vector("a", unit(0), "oldest", b"x", 60)
        for i in range(1, 21):
            await store.add_vector("b", unit(i), f"b{i}", b"y", 60)
        return await store.nearest("a", unit(0), 4), len(await store.nearest("b", unit(5), 25))

    assert asyncio.run(go()) == ([], 20)
