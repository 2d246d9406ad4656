"""Cache speed, in one run: an exact hit end to end through the gateway against a miss to a
zero-latency backend, and a semantic lookup (embedding + KNN) over N entries in Redis.

Starts its own Redis Stack server (scripts/redis-server), simulator and gateway on loopback.

    python bench/cache_speed.py                    # 100k semantic entries, 300 requests each
    python bench/cache_speed.py --entries 20000 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.embedder import Embedder  # noqa: E402
from app.cache.keys import semantic_query  # noqa: E402
from app.cache.redis_store import RedisStore, connect  # noqa: E402
from app.config import EmbeddingConfig  # noqa: E402
from app.request import Endpoint, parse_request  # noqa: E402
from bench.harness import ROOT, Fleet, free_port, percentile, start_gateway  # noqa: E402

PREFIX = "slipstream:"


def start_redis(tmp: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([str(ROOT / "scripts/redis-server"), "--port", str(port), "--logfile", str(tmp / "redis.log")])
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis did not start")


async def through_gateway(url: str, requests: int) -> dict[str, list[float]]:
    """Interleave exact hits and misses (c=1) and time each end to end."""
    out: dict[str, list[float]] = {"exact hit": [], "miss (zero-latency backend)": []}
    hit_body = {"model": "exact", "messages": [{"role": "user", "content": "the cached question"}], "temperature": 0, "max_tokens": 16}
    async with aiohttp.ClientSession(headers={"authorization": "Bearer bench"}) as s:
        async with s.post(f"{url}/v1/chat/completions", json=hit_body) as r:
            await r.read()
        await asyncio.sleep(0.2)
        for i in range(requests):
            for name, body in (("exact hit", hit_body), ("miss (zero-latency backend)", {**hit_body, "messages": [{"role": "user", "content": f"fresh {i} {uuid.uuid4().hex}"}]})):
                t0 = time.perf_counter()
                async with s.post(f"{url}/v1/chat/completions", json=body) as r:
                    await r.read()
                    status = r.headers.get("x-slipstream-cache")
                out[name].append(time.perf_counter() - t0)
                expected = "hit" if name == "exact hit" else "miss"
                assert status == expected, (name, status)
    return out


async def fill_and_lookup(port: int, entries: int, requests: int) -> dict[str, list[float]]:
    store = RedisStore(connect(f"redis://127.0.0.1:{port}/0", 5.0), PREFIX, "bench")
    await store.ensure_index()
    embedder = Embedder(EmbeddingConfig(threads=1))
    await embedder.start()
    req = parse_request(Endpoint.CHAT, b'{"model":"m","temperature":0,"messages":[{"role":"user","content":"x"}]}')
    scope = semantic_query("bench", req).scope
    # Most entries are random unit vectors (cheap to make); the queried ones are real embeddings.
    rng = np.random.default_rng(0)
    client = redis.Redis(port=port)
    t0 = time.perf_counter()
    batch = 2000
    for start in range(0, entries, batch):
        vecs = rng.standard_normal((min(batch, entries - start), 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        pipe = client.pipeline(transaction=False)
        for v in vecs:
            key = f"{PREFIX}sem:bench:{scope[:16]}:{uuid.uuid4().hex}"
            pipe.hset(key, mapping={"scope": scope, "vec": v.tobytes(), "query": "filler", "answer": b"{}"})
            pipe.pexpire(key, 3_600_000)
        pipe.execute()
    fill_s = time.perf_counter() - t0
    questions = [f"How do I configure feature number {i} of the gateway?" for i in range(20)]
    for q in questions:
        await store.add_vector(scope, await embedder.embed(q), q, b"{}", 3600)
    out: dict[str, list[float]] = {"embedding": [], "KNN (Redis, scoped)": [], "semantic lookup (both)": []}
    found = 0
    for i in range(requests):
        q = questions[i % len(questions)].replace("How do I", "How can I")
        t0 = time.perf_counter()
        vec = await embedder.embed(q)
        t1 = time.perf_counter()
        hits = await store.nearest(scope, vec, 4)
        t2 = time.perf_counter()
        found += any(h.query == questions[i % len(questions)] for h in hits)
        out["embedding"].append(t1 - t0)
        out["KNN (Redis, scoped)"].append(t2 - t1)
        out["semantic lookup (both)"].append(t2 - t0)
    info = client.info("memory")
    print(f"filled {entries} entries in {fill_s:.1f}s; Redis used_memory {info['used_memory'] / 2**20:.0f} MiB "
          f"(~{info['used_memory'] / max(1, entries) :.0f} B per semantic entry incl. index); "
          f"the paraphrased question's own entry was among the 4 nearest in {found}/{requests} lookups")
    await embedder.aclose()
    await store.aclose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-cache-bench-"))
    redis_proc, port = start_redis(tmp)
    fleet = Fleet.zero_latency(tmp)
    # finish_reason "length" allowed: the zero-latency backend cuts answers at max_tokens.
    models = {"exact": {"backends": ["zero"], "cache": {"exact": {"enabled": True}, "finish_reasons": ["stop", "length"]}}}
    gw = start_gateway(tmp, fleet, models=models, extra={"cache": {"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"}})
    try:
        rows = asyncio.run(through_gateway(gw.url, args.requests))
        rows.update(asyncio.run(fill_and_lookup(port, args.entries, args.requests)))
    finally:
        gw.stop()
        fleet.stop()
        redis_proc.terminate()
    print("\n| what | p50 ms | p99 ms | n |\n|---|---|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {percentile(values, 50):.2f} | {percentile(values, 99):.2f} | {len(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
