"""The response store: tenant-scoped, bounded, expiring; the same behaviour in process and in real Redis."""

from __future__ import annotations

import asyncio

import pytest

from app.cache.redis_store import connect
from app.conversations.store import MemoryResponseStore, RedisResponseStore, StoredResponse


def turn(rid: str, text: str = "hi") -> StoredResponse:
    return StoredResponse(rid, [{"role": "user", "content": text}],
                          [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
                          {"id": rid, "object": "response", "status": "completed"})


async def put(store, tenant: str, t: StoredResponse) -> None:
    await store.put(tenant, t, t.dumps())


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    """A factory: a Redis client belongs to the event loop it is made in (each test's own)."""
    if request.param == "memory":
        return lambda: MemoryResponseStore(1 << 20, 60)
    url = request.getfixturevalue("redis_server").url
    return lambda: RedisResponseStore(connect(url, 2.0), f"test-store-{request.node.name}:", 60)


def test_a_stored_turn_reads_back_whole(make_store):
    async def go():
        store = make_store()
        t = turn("resp_1")
        await put(store, "acme", t)
        assert await store.get("acme", "resp_1") == t
    asyncio.run(go())


def test_another_tenants_id_is_absent_as_an_unknown_one_is(make_store):
    async def go():
        store = make_store()
        await put(store, "acme", turn("resp_2"))
        assert await store.get("globex", "resp_2") is None
        assert await store.get("acme", "resp_unknown") is None
        assert await store.delete("globex", "resp_2") is False  # and cannot be deleted by it either
        assert await store.get("acme", "resp_2") is not None
    asyncio.run(go())


def test_delete_removes_only_the_owners_turn(make_store):
    async def go():
        store = make_store()
        await put(store, "acme", turn("resp_3"))
        assert await store.delete("acme", "resp_3") is True
        assert await store.get("acme", "resp_3") is None
        assert await store.delete("acme", "resp_3") is False
    asyncio.run(go())


def test_memory_store_is_bounded_in_bytes_oldest_written_first():
    async def go():
        one = turn("resp_a", "x" * 400)
        size = len(one.dumps())
        store = MemoryResponseStore(size * 2 + size // 2, 60)
        for rid in ("resp_a", "resp_b", "resp_c"):
            await put(store, "acme", turn(rid, "x" * 400))
        assert store.size_bytes <= size * 2 + size // 2
        assert await store.get("acme", "resp_a") is None
        assert await store.get("acme", "resp_c") is not None
    asyncio.run(go())


def test_memory_store_expires_turns(monkeypatch):
    async def go():
        store = MemoryResponseStore(1 << 20, 10)
        await put(store, "acme", turn("resp_t"))
        clock = __import__("time").monotonic() + 11
        monkeypatch.setattr("app.conversations.store.time.monotonic", lambda: clock)
        assert await store.get("acme", "resp_t") is None
        assert store.size_bytes == 0
    asyncio.run(go())


def test_redis_store_sets_a_ttl_and_keeps_tenant_names_out_of_keys(redis_server):
    async def go():
        client = connect(redis_server.url, 2.0)
        store = RedisResponseStore(client, "ttl-test:", 120)
        await put(store, "acme-secret-tenant", turn("resp_ttl"))
        keys = [k async for k in client.scan_iter("ttl-test:*")]
        assert len(keys) == 1 and b"acme-secret-tenant" not in keys[0]
        assert 0 < await client.ttl(keys[0]) <= 120
        await store.aclose()
    asyncio.run(go())
