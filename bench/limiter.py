"""The limiter alone: latency of one admission and CPU of admission plus settlement, per client.

Three checks per call (requests, tokens, concurrency), limits never reached, against a real Redis
started here: the shipped client (app/admission/resp.py: one pipelined connection), redis-py's
asyncio client running the same script, and the in-process limiter. One process, one event loop,
`--calls` admissions at each concurrency; CPU is this process's (time.process_time), so it holds up
better than wall time on a shared box.

    python bench/limiter.py
    python bench/limiter.py --calls 5000 --conc 1,16,64
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.admission.limits import CONCURRENT, REQUESTS, TOKENS, Check
from app.admission.local_limiter import LocalLimiter
from app.admission.redis_limiter import _SCRIPT, RedisLimiter
from bench.harness import percentile, stop_on_signals
from tests.support import RedisServer

CHECKS = (Check(REQUESTS, "t:a:r", 10**9, "t"), Check(TOKENS, "t:a:t", 10**12, "t"), Check(CONCURRENT, "t:a:c", 10**6, "t"))


class RedisPyLimiter(RedisLimiter):
    """The same script through redis-py's asyncio client (what the limiter used at first)."""

    @classmethod
    def make(cls, url: str) -> RedisPyLimiter:
        import redis.asyncio as redis

        self = cls.__new__(cls)
        RedisLimiter.__init__(self, url, "bench-py:", 1.0, 60, 900)
        self._resp = None
        self._r = redis.Redis.from_url(url, socket_timeout=1.0)
        self._script = self._r.register_script(_SCRIPT)
        return self


async def measure(limiter, conc: int, calls: int) -> tuple[float, float, float]:
    await limiter.admit(CHECKS, "warm", 10)
    latencies: list[float] = []

    async def worker(k: int) -> None:
        for i in range(calls // conc):
            rid = f"{k}-{i}"
            t = time.perf_counter()
            d = await limiter.admit(CHECKS, rid, 50)
            latencies.append(time.perf_counter() - t)
            await limiter.settle(CHECKS, rid, 50, 40, d.periods)

    cpu = time.process_time()
    await asyncio.gather(*(worker(k) for k in range(conc)))
    cpu = time.process_time() - cpu
    return percentile(latencies, 50), percentile(latencies, 99), cpu / len(latencies) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--conc", default="1,16")
    args = ap.parse_args()
    server = RedisServer(Path(tempfile.mkdtemp(prefix="slipstream-limiter-")))
    server.start()
    rows = []
    try:
        for name, make in (("lean client (shipped)", lambda: RedisLimiter(server.url, "bench:", 1.0, 60, 900)),
                           ("redis-py asyncio", lambda: RedisPyLimiter.make(server.url)),
                           ("in-process", lambda: LocalLimiter(60, 900))):
            for conc in map(int, args.conc.split(",")):
                async def run(make=make, conc=conc) -> tuple[float, float, float]:
                    limiter = make()
                    try:
                        return await measure(limiter, conc, args.calls)
                    finally:
                        await limiter.aclose()
                rows.append((name, conc, *asyncio.run(run())))
    finally:
        server.stop()
    print(f"\nLimiter: {args.calls} admissions (3 checks each) + settlements per cell, one process")
    print("| limiter | concurrency | admit p50 / p99 ms | CPU per admit + settle, us |")
    print("|---|---|---|---|")
    for name, conc, p50, p99, cpu in rows:
        print(f"| {name} | {conc} | {p50:.3f} / {p99:.3f} | {cpu:.0f} |")
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
