"""Soak: steady open-loop load through the gateway against a fleet with mixed faults.

Prints requests sent / succeeded / fell back / failed (by kind), p50/p99 latency, and the gateway's
memory (RSS) and open sockets sampled over the run: they should stay flat.

    python bench/soak.py                    # 120 s at 40 req/s
    python bench/soak.py --seconds 300 --rate 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import Fleet, client_session, free_port, percentile, start_gateway, stop_on_signals

BASE = dict(slots=16, prefill_tokens_per_s=20000, tpot_ms=5, output=dict(median=20, sigma=0.5, max=60))


def fleet_spec() -> dict[str, dict]:
    return {
        "healthy-a": dict(port=free_port(), model="big", **BASE),
        "healthy-b": dict(port=free_port(), model="big", **BASE),
        "flaky": dict(port=free_port(), model="big", faults=dict(error_rate=0.15, disconnect_rate=0.03), **BASE),
        "grumpy": dict(port=free_port(), model="big", faults=dict(hang_rate=0.05, rate_limit_rate=0.15, retry_after_s=1, stall_rate=0.02, stall_s=3), **BASE),
        "small": dict(port=free_port(), model="small", **{**BASE, "tpot_ms": 2}),
    }


def gateway_extra() -> dict:
    return {
        "reliability": {"breaker": {"consecutive_failures": 5, "cooldown_s": 2, "max_cooldown_s": 10}},
    }


def models() -> dict:
    retry = {"max_attempts": 3, "backoff_base_s": 0.02, "backoff_max_s": 0.2}
    return {
        "big": {"backends": ["healthy-a", "healthy-b", "flaky", "grumpy"], "fallbacks": ["small"], "retry": retry,
                "timeouts": {"first_token_s": 0.5, "idle_s": 1.0, "total_s": 5}},
        "small": {"backends": ["small"]},
    }


def proc_figures(pid: int) -> tuple[float, int]:
    """RSS in MiB and the number of open sockets of a process (Linux /proc)."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    return rss, sockets


async def run(url: str, rate: float, seconds: float, pid: int) -> dict:
    outcomes: Counter = Counter()
    latencies: list[float] = []
    samples: list[tuple[float, float, int]] = []
    rng = random.Random(1)
    tasks = []
    # A soak counts errors: its client drops an idle connection before the gateway does (a request sent
    # on one as the gateway closes it fails before the gateway reads it).
    async with client_session(30, {"authorization": "Bearer soak"}) as session:

        async def one(i: int) -> None:
            stream = i % 2 == 0
            body = {"model": "big", "messages": [{"role": "user", "content": f"soak {i}"}], "max_tokens": rng.randint(5, 40), "stream": stream}
            t0 = time.perf_counter()
            try:
                async with session.post(f"{url}/v1/chat/completions", json=body) as r:
                    data = await r.read()
                    if r.status != 200:
                        outcomes[f"error_{r.status}"] += 1
                        return
                    if stream and (b'"error"' in data or not data.endswith(b"data: [DONE]\n\n")):
                        outcomes["error_midstream"] += 1
                        return
                    outcomes["fell_back" if "x-slipstream-fallback" in r.headers else "succeeded"] += 1
                    latencies.append(time.perf_counter() - t0)
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcomes[f"client_{type(exc).__name__}"] += 1

        start = time.perf_counter()
        next_sample = start
        i = 0
        next_send = start
        while (now := time.perf_counter()) < start + seconds:
            if now >= next_sample:
                samples.append((now - start, *proc_figures(pid)))
                next_sample += max(1.0, seconds / 10)
            if now >= next_send:
                tasks.append(asyncio.create_task(one(i)))
                i += 1
                next_send += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, min(next_send, next_sample) - time.perf_counter()))
        await asyncio.gather(*tasks)
        await asyncio.sleep(1)
        samples.append((time.perf_counter() - start, *proc_figures(pid)))
    return {"sent": i, "outcomes": outcomes, "latencies": latencies, "samples": samples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=float, default=40, help="mean arrivals per second (Poisson)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-soak-"))
    fleet = Fleet.start(tmp, fleet_spec())
    gw = start_gateway(tmp, fleet, models=models(), extra=gateway_extra())
    try:
        res = asyncio.run(run(gw.url, args.rate, args.seconds, gw.proc.pid))
        ready = json.loads(__import__("urllib.request").request.urlopen(f"{gw.url}/readyz").read())
    finally:
        gw.stop()
        fleet.stop()
    o = res["outcomes"]
    accounted = sum(o.values())
    print(f"\nSoak: {args.seconds:g}s at {args.rate:g} req/s (Poisson), half streamed, fleet with errors, 429s, hangs, stalls, disconnects")
    print(f"sent {res['sent']} | succeeded {o['succeeded']} | fell back {o['fell_back']} | failed {accounted - o['succeeded'] - o['fell_back']} "
          f"| unaccounted {res['sent'] - accounted}")
    print("failures by kind:", {k: v for k, v in o.items() if k not in ('succeeded', 'fell_back')} or "none")
    print(f"latency of answered calls: p50 {percentile(res['latencies'], 50):.1f} ms, p99 {percentile(res['latencies'], 99):.1f} ms")
    print("gateway over time (s, RSS MiB, open sockets):", ", ".join(f"({t:.0f}, {r:.1f}, {s})" for t, r, s in res["samples"]))
    print("ejected at the end:", ready.get("ejected"))
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
