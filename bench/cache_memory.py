"""Memory per semantic cache entry in process (MemoryStore), and what one lookup costs at that size.

Fills one scope of the in-process store with `--entries` entries shaped like real ones (a unit
vector of 384 float32, a 60-character question, a 1,042-byte answer: a 150-token chat completion)
and reports the Python heap they take (tracemalloc) and the process RSS growth, then times a
nearest-neighbour search, alone and right after a write (a write must not make the next lookup
rebuild the scope's matrix). Redis's figure per entry comes from bench/cache_speed.py (used_memory
after its fill).

    python bench/cache_memory.py                 # 100k entries
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.store import MemoryStore


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main_async(entries: int) -> None:
    rng = np.random.default_rng(0)
    store = MemoryStore(entries + 10)
    rss0 = rss_mib()
    tracemalloc.start()
    t0 = time.perf_counter()
    for start in range(0, entries, 5000):
        vecs = rng.standard_normal((min(5000, entries - start), 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        for i, v in enumerate(vecs):
            await store.add_vector("scope", v, f"How do I do the thing number {start + i:08d} in this question?"[:60],
                                   b"%08d" % (start + i) + b"x" * 1034, 3600)  # 1,042 distinct bytes
    fill_s = time.perf_counter() - t0
    query = vecs[0]
    await store.nearest("scope", query, 4)  # stacks the matrix once
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = rss_mib() - rss0
    print(f"{entries} entries filled in {fill_s:.1f} s")
    print(f"in process: Python heap {heap / 2**20:.0f} MiB ({heap / entries:.0f} B per entry), RSS growth {rss:.0f} MiB "
          f"({rss * 2**20 / entries:.0f} B per entry), stacked matrix included")
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        await store.nearest("scope", query, 4)
        times.append(time.perf_counter() - t0)
    after_write = []
    for i in range(5):
        await store.add_vector("scope", query, "one more", b"{}", 3600)
        t0 = time.perf_counter()
        await store.nearest("scope", query, 4)
        after_write.append(time.perf_counter() - t0)
    print(f"nearest (k=4) over {entries}: {np.median(times) * 1000:.2f} ms p50 alone; "
          f"{np.median(after_write) * 1000:.1f} ms p50 right after a write")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    args = ap.parse_args()
    asyncio.run(main_async(args.entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
