"""Cache writes happen off the request path, batched, and are not lost when Redis is slow for a moment."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import numpy as np

from app.cache.redis_store import RedisStore, connect
from app.cache.service import Cache
from app.cache.store import MemoryStore
from app.cache.writer import StoreWriter, WriteOp
from app.config import CacheConfig

PREFIX = "writer-test:"


def _vector(rng) -> np.ndarray:
    v = rng.standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def test_no_write_lost_at_soak_load_with_redis_stalling(redis_server):
    """60 requests/s (the soak's top rate), each an exact and a semantic write, while lookups keep Redis
    busy and Redis stalls twice for 200 ms (four times the lookup timeout): every write lands."""
    prefix = f"{PREFIX}{time.monotonic_ns()}:"

    async def main():
        config = CacheConfig(store="redis", redis_url=redis_server.url)
        reads = connect(redis_server.url, config.timeout_ms / 1000)
        writes = connect(redis_server.url, config.write_timeout_ms / 1000)
        store = RedisStore(reads, prefix, "test", write_client=writes)
        cache = Cache(config, store, None)
        rng = np.random.default_rng(0)
        await store.ensure_index()
        stop = asyncio.Event()

        async def lookups():
            while not stop.is_set():
                await cache._safe(store.nearest("scope", _vector(rng), 4))
                await asyncio.sleep(0.002)

        async def stall(after_s: float):
            await asyncio.sleep(after_s)
            os.kill(redis_server.proc.pid, signal.SIGSTOP)
            await asyncio.sleep(0.2)
            os.kill(redis_server.proc.pid, signal.SIGCONT)

        readers = [asyncio.create_task(lookups()) for _ in range(4)]
        stalls = [asyncio.create_task(stall(0.7)), asyncio.create_task(stall(2.0))]
        n = 180  # 3 s at 60 requests/s
        for i in range(n):
            cache.writer.submit(WriteOp(b"answer %d" % i, 60, key=f"k{i}"))
            cache.writer.submit(WriteOp(b"answer %d" % i, 60, scope="scope", vector=_vector(rng), query=f"q{i}"))
            await asyncio.sleep(1 / 60)
        await asyncio.gather(*stalls)
        await cache.writer.drain(10)
        stop.set()
        await asyncio.gather(*readers)
        stats = cache.writer.stats
        await cache.aclose()
        return n, stats

    n, stats = asyncio.run(main())
    assert stats.lost == 0
    assert stats.written == 2 * n
    assert stats.batches < 2 * n  # batched: fewer round trips than entries
    client = redis_server.client()
    assert len(client.keys(f"{prefix}x:*")) == n
    assert len(client.keys(f"{prefix}sem:test-f16:*")) == n


class _FailingFirst:
    """A real in-process store that fails its first `n` batches (a store that times out)."""

    OUTAGE_ERRORS = (TimeoutError,)

    def __init__(self, n: int) -> None:
        self.store = MemoryStore(100)
        self.n = n

    async def write_batch(self, ops):
        if self.n > 0:
            self.n -= 1
            raise TimeoutError("store busy")
        await self.store.write_batch(ops)


def test_a_failed_batch_is_retried_then_counted_as_lost():
    async def main(failures: int):
        store = _FailingFirst(failures)
        writer = StoreWriter(store, timeout_s=0.5, max_queue=100, attempts=3)
        writer.submit(WriteOp(b"v", 60, key="k"))
        await writer.drain(5)
        return writer.stats, await store.store.get("k")

    stats, value = asyncio.run(main(2))
    assert (stats.written, stats.lost, stats.retries, value) == (1, 0, 2, b"v")
    stats, value = asyncio.run(main(3))
    assert (stats.written, stats.lost, value) == (0, 1, None)


def test_a_full_write_queue_loses_writes_visibly():
    async def main():
        writer = StoreWriter(MemoryStore(100), timeout_s=0.5, max_queue=2)
        for i in range(5):
            writer.submit(WriteOp(b"v", 60, key=f"k{i}"))  # no await: the worker cannot run in between
        await writer.drain(5)
        return writer.stats

    stats = asyncio.run(main())
    assert (stats.written, stats.lost) == (2, 3)


def test_one_timeout_does_not_switch_the_store_off():
    cache = Cache(CacheConfig(skip_after_failures=3, skip_for_s=1.0), _FailingFirst(0), None)
    cache._note_store_result(False, TimeoutError())
    cache._note_store_result(False, TimeoutError())
    assert cache._down_until == 0.0
    cache._note_store_result(True, None)  # a success resets the count
    cache._note_store_result(False, TimeoutError())
    cache._note_store_result(False, TimeoutError())
    assert cache._down_until == 0.0
    cache._note_store_result(False, TimeoutError())
    assert cache._down_until > time.monotonic()
