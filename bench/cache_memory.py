"""Memory per semantic cache entry in process (MemoryStore), and what one lookup costs at that size.

Fills one scope of the in-process store with `--entries` entries shaped like real ones (a unit
vector of 384 float32, a 60-character question, a 1,042-byte answer: a 150-token chat completion)
and reports the Python heap they take (tracemalloc) and the process RSS growth, then times a
nearest-neighbour search, alone and right after a write (a write must not make the next lookup
rebuild the scope's matrix). Then the same entries go to a Redis Stack server of its own through the
gateway's write path (RedisStore.write_batch: hash, TTL, HNSW index) and it reports Redis's
`used_memory` growth and a KNN lookup there.

    python bench/cache_memory.py                 # 100k entries, in process and in Redis
    python bench/cache_memory.py --no-redis      # in process only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.store import MemoryStore
from app.cache.writer import WriteOp

SCOPE = "ab" * 32  # a scope is a hex digest


def entries_like_real(entries: int, chunk: int = 5000):
    """(vector, question, answer) in chunks: unit vectors, 60-character questions, 1,042-byte answers."""
    rng = np.random.default_rng(0)
    for start in range(0, entries, chunk):
        vecs = rng.standard_normal((min(chunk, entries - start), 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        yield [(v, f"How do I do the thing number {start + i:08d} in this question?"[:60],
                b"%08d" % (start + i) + b"x" * 1034) for i, v in enumerate(vecs)]  # 1,042 distinct bytes


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main_async(entries: int) -> None:
    store = MemoryStore(entries + 10)
    rss0 = rss_mib()
    tracemalloc.start()
    t0 = time.perf_counter()
    for chunk in entries_like_real(entries):
        for v, question, answer in chunk:
            await store.add_vector(SCOPE, v, question, answer, 3600)
    fill_s = time.perf_counter() - t0
    query = chunk[0][0].copy()
    del chunk  # the last chunk's vectors are copies: not the store's memory
    await store.nearest(SCOPE, query, 4)  # stacks the matrix once
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = rss_mib() - rss0
    print(f"{entries} entries filled in {fill_s:.1f} s")
    print(f"in process: Python heap {heap / 2**20:.0f} MiB ({heap / entries:.0f} B per entry, "
          f"{heap / entries * 1e5 / 2**20:.0f} MiB per 100k), RSS growth {rss:.0f} MiB ({rss * 2**20 / entries:.0f} B per entry, "
          f"{rss / entries * 1e5:.0f} MiB per 100k), matrix growth slack included")
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        await store.nearest(SCOPE, query, 4)
        times.append(time.perf_counter() - t0)
    after_write = []
    for i in range(5):
        await store.add_vector(SCOPE, query, "one more", b"{}", 3600)
        t0 = time.perf_counter()
        await store.nearest(SCOPE, query, 4)
        after_write.append(time.perf_counter() - t0)
    print(f"nearest (k=4) over {entries}: {np.median(times) * 1000:.2f} ms p50 alone; "
          f"{np.median(after_write) * 1000:.1f} ms p50 right after a write")


async def in_redis(entries: int) -> None:
    """The same entries through RedisStore's write path into a Redis of this bench's own."""
    import redis as sync_redis

    from app.cache.embedder import model_id
    from app.cache.redis_store import RedisStore, connect
    from bench.cache_speed import start_redis

    proc, port = start_redis(Path(tempfile.mkdtemp(prefix="slipstream-cache-memory-")))
    try:
        client = sync_redis.Redis(port=port)
        store = RedisStore(connect(f"redis://127.0.0.1:{port}/0", 30.0), "slipstream:", model_id("int8"))
        await store.ensure_index()
        used0 = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        for chunk in entries_like_real(entries, 1000):
            await store.write_batch([WriteOp(a, 3600, scope=SCOPE, vector=v, query=q) for v, q, a in chunk])
        fill_s = time.perf_counter() - t0
        used = client.info("memory")["used_memory"] - used0
        print(f"{entries} entries written to Redis in {fill_s:.1f} s")
        print(f"in Redis: used_memory growth {used / 2**20:.0f} MiB ({used / entries:.0f} B per entry, "
              f"{used / entries * 1e5 / 2**20:.0f} MiB per 100k), HNSW index included")
        times = []
        for v, _, _ in chunk[:20]:
            t0 = time.perf_counter()
            await store.nearest(SCOPE, v, 4)
            times.append(time.perf_counter() - t0)
        print(f"nearest (k=4, scoped KNN) over {entries} in Redis: {np.median(times) * 1000:.2f} ms p50")
        await store.aclose()
    finally:
        proc.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--no-redis", action="store_true", help="in process only")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    asyncio.run(main_async(args.entries))
    if not args.no_redis:
        asyncio.run(in_redis(args.entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
