"""Memory per semantic cache entry in process (MemoryStore) and in Redis, and what a lookup costs there.

Fills one scope of the in-process store with `--entries` entries shaped like real ones (a unit
vector of 384 float32, a 60-character question, a 1,042-byte answer: a 150-token chat completion)
and reports the Python heap they take (tracemalloc) and the process RSS growth, then times a
nearest-neighbour search, alone and right after a write (a write must not make the next lookup
rebuild the scope's matrix).

Then, for each of `--vector-types` in turn, a fresh Redis Stack server of its own gets cache_speed's
20 seeded questions and then the same entries, through the gateway's write path
(RedisStore.write_batch: hash, TTL, HNSW index). It reports Redis's `used_memory` growth and FT.INFO's
sizes, and the KNN's recall against an exact (float32, brute-force) search: for the 160 reworded
seeded questions (is their question among the 4 returned, and recall@4) and for 200 fresh filler-like
queries (recall@4), with the time per lookup. The vectors are bench/fillers.py's (`--fillers`).

    python bench/cache_memory.py                 # 100k entries, in process and in Redis (float32, float16)
    python bench/cache_memory.py --no-redis      # in process only
    python bench/cache_memory.py --no-process --fillers random   # Redis only, uniform random vectors
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.store import MemoryStore
from app.cache.writer import WriteOp
from bench.fillers import KINDS as FILLER_KINDS
from bench.fillers import filler_vectors

SCOPE = "ab" * 32  # a scope is a hex digest


def entries_like_real(entries: int, chunk: int = 5000, fillers: str = "perturbed", avoid: np.ndarray | None = None):
    """(vector, question, answer) in chunks: unit vectors, 60-character questions, 1,042-byte answers."""
    start = 0
    for vecs in filler_vectors(fillers, entries, avoid, chunk):
        yield [(v, f"How do I do the thing number {start + i:08d} in this question?"[:60],
                b"%08d" % (start + i) + b"x" * 1034) for i, v in enumerate(vecs)]  # 1,042 distinct bytes
        start += len(vecs)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main_async(entries: int, fillers: str) -> None:
    store = MemoryStore(entries + 10)
    rss0 = rss_mib()
    tracemalloc.start()
    t0 = time.perf_counter()
    for chunk in entries_like_real(entries, fillers=fillers):
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


def _ft_info(client, index: str) -> dict[str, float]:
    raw = client.execute_command("FT.INFO", index)
    info = dict(zip(raw[::2], raw[1::2])) if isinstance(raw, list) else raw
    return {k.decode(): float(v) for k, v in info.items() if isinstance(v, (bytes, int, float)) and _number(v)}


def _number(value) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


async def in_redis(entries: int, vector_type: str, fillers: str) -> dict:
    """The same entries through RedisStore's write path into a fresh Redis of this bench's own."""
    import redis as sync_redis

    from app.cache.embedder import model_id
    from app.cache.redis_store import RedisStore, connect
    from bench.cache_speed import TOPICS, VARIANTS, own_vectors
    from bench.harness import start_redis

    tmp = Path(tempfile.mkdtemp(prefix="slipstream-cache-memory-"))
    proc, port = start_redis(tmp / "redis.log")
    questions = [f"How do I {t}?" for t in TOPICS]
    own = own_vectors()  # the 20 questions, then their 160 rewordings
    seeded, reworded = own[:len(questions)], own[len(questions):]
    truth = [q for q in questions for _ in VARIANTS]
    try:
        client = sync_redis.Redis(port=port)
        store = RedisStore(connect(f"redis://127.0.0.1:{port}/0", 30.0), "slipstream:", model_id("int8"),
                           vector_type=vector_type)
        await store.ensure_index()
        index = next(i.decode() for i in client.execute_command("FT._LIST"))
        used0 = client.info("memory")["used_memory"]
        # The seeded questions first, then buried under the fillers (as bench/cache_speed.py does).
        await store.write_batch([WriteOp(b"answer", 3600, scope=SCOPE, vector=v, query=q) for v, q in zip(seeded, questions)])
        names, vectors = list(questions), [seeded]
        t0 = time.perf_counter()
        for chunk in entries_like_real(entries, 1000, fillers, avoid=own):
            await store.write_batch([WriteOp(a, 3600, scope=SCOPE, vector=v, query=q) for v, q, a in chunk])
            names += [q for _, q, _ in chunk]
            vectors.append(np.stack([v for v, _, _ in chunk]))
        fill_s = time.perf_counter() - t0
        while int(_ft_info(client, index).get("indexing", 0)):
            await asyncio.sleep(0.2)
        used = client.info("memory")["used_memory"] - used0
        info = _ft_info(client, index)
        matrix = np.concatenate(vectors)
        position = {name: i for i, name in enumerate(names)}
        fresh = next(filler_vectors(fillers, 200, own, seed=1))[:200]

        async def recall(queries: np.ndarray) -> tuple[list[float], list[bool], list[float], list[float]]:
            """recall@4 against brute force, whether the exact top 1 came back, time, |similarity error|."""
            exact = queries @ matrix.T
            top = np.argsort(-exact, axis=1)[:, :4]
            scores, first, times, errors = [], [], [], []
            for q, row, sims in zip(queries, top, exact):
                t0 = time.perf_counter()
                got = await store.nearest(SCOPE, q, 4)
                times.append(time.perf_counter() - t0)
                want = {names[i] for i in row}
                scores.append(len(want & {n.query for n in got}) / 4)
                first.append(bool(got) and got[0].query == names[row[0]])
                errors += [abs(n.similarity - float(sims[position[n.query]])) for n in got[:1]]
            return scores, first, times, errors

        r_scores, r_first, r_times, r_err = await recall(reworded)
        found = 0
        for v, t in zip(reworded, truth):
            found += t in {n.query for n in await store.nearest(SCOPE, v, 4)}
        f_scores, _, f_times, f_err = await recall(fresh)
        await store.aclose()
        return {"type": vector_type, "entries": entries + len(questions), "fill_s": fill_s, "used": used,
                "vector_mb": info.get("vector_index_sz_mb", 0.0), "index_mb": info.get("total_index_memory_sz_mb", 0.0),
                "failures": info.get("hash_indexing_failures", 0.0), "found": found, "reworded": len(reworded),
                "r_recall": statistics.mean(r_scores), "r_first": sum(r_first), "r_p50": statistics.median(r_times),
                "f_recall": statistics.mean(f_scores), "f_p50": statistics.median(f_times),
                "err": max(r_err + f_err)}
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def report(rows: list[dict], fillers: str) -> None:
    n = rows[0]["entries"]
    print(f"\nIn Redis, {n} entries ({fillers} fillers, the 20 seeded questions among them), one fresh server per vector "
          f"type; recall against an exact float32 search\n")
    print("| vectors | used_memory growth | per 100k | per entry | FT.INFO vector index | FT.INFO all index memory | "
          "reworded: own question in the 4 | reworded: recall@4 / top 1 right | KNN p50 | fresh queries: recall@4 | KNN p50 | "
          "largest similarity error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['type']} | {r['used'] / 2**20:.0f} MiB | {r['used'] / r['entries'] * 1e5 / 2**20:.0f} MiB | "
              f"{r['used'] / r['entries']:.0f} B | {r['vector_mb']:.0f} MB | {r['index_mb']:.0f} MB | "
              f"{r['found']}/{r['reworded']} | {r['r_recall']:.3f} / {r['r_first']}/{r['reworded']} | "
              f"{r['r_p50'] * 1000:.2f} ms | {r['f_recall']:.3f} | {r['f_p50'] * 1000:.2f} ms | {r['err']:.4f} |")
    for r in rows:
        print(f"{r['type']}: filled in {r['fill_s']:.1f} s, hash_indexing_failures {r['failures']:.0f}")
    if len(rows) == 2:
        a, b = rows
        print(f"{b['type']} over {a['type']}: used_memory {b['used'] / a['used']:.2f}x ({(b['used'] - a['used']) / 2**20:+.0f} MiB)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--no-redis", action="store_true", help="in process only")
    ap.add_argument("--no-process", action="store_true", help="Redis only")
    ap.add_argument("--fillers", choices=FILLER_KINDS, default="perturbed", help="the entries' vectors (bench/fillers.py)")
    ap.add_argument("--vector-types", default="FLOAT32,FLOAT16", help="Redis vector types, one fresh server each")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    if not args.no_process:
        asyncio.run(main_async(args.entries, args.fillers))
    if not args.no_redis:
        rows = [asyncio.run(in_redis(args.entries, t.strip().upper(), args.fillers)) for t in args.vector_types.split(",")]
        report(rows, args.fillers)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
