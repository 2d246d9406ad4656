"""Routing strategies compared in one run, on a heterogeneous simulated fleet under open-loop load.

Fleet: `fast` (few slots, quick decode), `big` (many slots, slow decode), `degrading` (like fast-ish,
turns slow halfway through every run) and `flaky` (10 % errors). Poisson arrivals at 50 %, 80 % and
95 % of the fleet's estimated capacity, mixed prompt and output lengths, half of them streamed. Each
strategy gets a fresh gateway; runs are interleaved by load level. Prints p50/p99 TTFT and end-to-end
latency, throughput and errors, then the aims, and the latency model's median prediction error.

    python bench/routing.py                       # 30 s per strategy and load
    python bench/routing.py --seconds 30 --loads 0.8 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.routing.strategies import STRATEGY_NAMES
from bench.harness import (
    Fleet,
    apply_port_options,
    client_session,
    free_port,
    percentile,
    port_options,
    start_gateway,
    stop_on_signals,
)

GROWTH = 0.04
FLEET: dict[str, dict[str, Any]] = {
    "fast": dict(slots=4, tpot_ms=10, prefill_tokens_per_s=20000),
    "big": dict(slots=32, tpot_ms=35, prefill_tokens_per_s=8000),
    "degrading": dict(slots=12, tpot_ms=15, prefill_tokens_per_s=12000),
    "flaky": dict(slots=12, tpot_ms=15, prefill_tokens_per_s=12000, faults=dict(error_rate=0.1)),
}
OUTPUTS = (20, 50, 100, 200, 300)
DEGRADED_TPOT_MS = 60


def capacity_rps(mean_out: float, mean_prompt: float) -> float:
    """Requests per second the fleet can finish at full batches (continuous-batching model)."""
    total = 0.0
    for name, spec in FLEET.items():
        # `degrading` runs half of each run at DEGRADED_TPOT_MS: count it at its average speed.
        tpot_ms = (spec["tpot_ms"] + DEGRADED_TPOT_MS) / 2 if name == "degrading" else spec["tpot_ms"]
        tpot = tpot_ms / 1000 * (1 + GROWTH * (spec["slots"] - 1))
        service = mean_prompt / spec["prefill_tokens_per_s"] + mean_out * tpot
        ok = 1 - spec.get("faults", {}).get("error_rate", 0)
        total += spec["slots"] / service * ok
    return total


@dataclass
class Run:
    e2e: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    errors: int = 0
    sent: int = 0
    seconds: float = 0.0
    ttft_err: list[float] = field(default_factory=list)  # streams: |predicted - actual| / actual TTFT
    e2e_err: list[float] = field(default_factory=list)  # every request, end to end
    backends: dict[str, int] = field(default_factory=dict)  # answers per backend
    rows: list[dict] = field(default_factory=list)  # one per answered request, for --dump


ADMIN_KEY = "bench-admin"


async def watch(s: aiohttp.ClientSession, url: str, every_s: float, start: float) -> None:
    """Print each backend's live latency model (from /admin/backends) every `every_s` seconds."""
    while True:
        await asyncio.sleep(every_s)
        async with s.get(f"{url}/admin/backends", headers={"authorization": f"Bearer {ADMIN_KEY}"}) as r:
            body = await r.json()
        parts = []
        for b in body["backends"]:
            m = b["latency_model"]
            parts.append(f"{b['name']} in {b['inflight']} slots {m['slots']} q {1000 * m['residual_queue_s']:.0f} "
                         f"net {1000 * m['net_s']:.0f} tpot {1000 * m['tpot_s']:.1f} pf {1000 * m['prefill_overhead_s']:.0f}+{m['prefill_tokens_per_s'] or 0:.0f}/s")
        print(f"  t={time.perf_counter() - start:4.0f}s " + " | ".join(parts), file=sys.stderr)


async def drive(url: str, rate: float, seconds: float, seed: int, degrade_url: str, watch_s: float = 0) -> Run:
    rng = random.Random(seed)
    run = Run()
    tasks = []
    start = time.perf_counter()
    async with client_session(120, {"authorization": "Bearer bench"}) as s:

        async def one(i: int, stream: bool, prompt_chars: int, out: int) -> None:
            body = {"model": "fleet", "messages": [{"role": "user", "content": "x" * prompt_chars}], "max_tokens": out,
                    "ignore_eos": True, "stream": stream}
            t0 = time.perf_counter()
            try:
                async with s.post(f"{url}/v1/chat/completions", json=body) as r:
                    first = 0.0
                    if stream:
                        async for _ in r.content.iter_any():
                            if not first:
                                first = time.perf_counter() - t0
                    data = await r.read()
                    if r.status != 200 or (stream and b'"error"' in data):
                        run.errors += 1
                        return
                    e2e = time.perf_counter() - t0
                    run.e2e.append(e2e)
                    if stream:
                        run.ttft.append(first)
                    backend = r.headers.get("x-slipstream-backend", "?")
                    run.backends[backend] = run.backends.get(backend, 0) + 1
                    p_ttft = float(r.headers.get("x-slipstream-predicted-ttft-ms", "nan")) / 1000
                    p_e2e = float(r.headers.get("x-slipstream-predicted-e2e-ms", "nan")) / 1000
                    # Retried requests are left out: the prediction was for their last attempt alone.
                    if not math.isnan(p_e2e) and r.headers.get("x-slipstream-attempts", "1") == "1":
                        run.e2e_err.append(abs(p_e2e - e2e) / e2e)
                        if stream:
                            run.ttft_err.append(abs(p_ttft - first) / first)
                    run.rows.append({"i": i, "at": t0 - start, "backend": backend, "stream": stream,
                                     "prompt_chars": prompt_chars, "max_tokens": out, "ttft": first if stream else None,
                                     "e2e": e2e, "predicted_ttft": p_ttft, "predicted_e2e": p_e2e})
            except (aiohttp.ClientError, TimeoutError):
                run.errors += 1

        watcher = asyncio.create_task(watch(s, url, watch_s, start)) if watch_s else None
        degraded = False
        next_at = start
        i = 0
        while (now := time.perf_counter()) < start + seconds:
            if not degraded and now >= start + seconds / 2:
                degraded = True
                async with s.put(degrade_url, json={"tpot_ms": DEGRADED_TPOT_MS}) as r:
                    await r.read()
            if now >= next_at:
                stream = rng.random() < 0.5
                prompt_chars = int(min(8000, rng.lognormvariate(6.5, 0.8)))
                tasks.append(asyncio.create_task(one(i, stream, prompt_chars, rng.choice(OUTPUTS))))
                i += 1
                next_at += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        run.sent = i
        await asyncio.gather(*tasks)
        if watcher:
            watcher.cancel()
        run.seconds = time.perf_counter() - start
        async with s.put(degrade_url, json={"tpot_ms": FLEET["degrading"]["tpot_ms"]}) as r:
            await r.read()
    return run


def _pool(runs: list[Run], attr: str) -> list[float]:
    return [v for r in runs for v in getattr(r, attr)]


def report(results: dict[tuple[float, str], list[Run]], strategies: list[str], args) -> None:
    """The comparison table (percentiles over every round's answers pooled), the aims, the model's error."""
    rounds = f"{args.repeats} rounds of " if args.repeats > 1 else ""
    print(f"\nRouting strategies, {rounds}{args.seconds:g} s per cell, Poisson arrivals; percentiles over all rounds")
    print("| load | strategy | TTFT p50 / p99 ms | E2E p50 / p99 ms | throughput req/s | errors |")
    print("|---|---|---|---|---|---|")
    for (load, st), runs in results.items():
        ttft, e2e = _pool(runs, "ttft"), _pool(runs, "e2e")
        rps = sum(len(r.e2e) for r in runs) / sum(r.seconds for r in runs)
        print(f"| {load:.0%} | {st} | {percentile(ttft, 50):.0f} / {percentile(ttft, 99):.0f} | "
              f"{percentile(e2e, 50):.0f} / {percentile(e2e, 99):.0f} | {rps:.1f} | {sum(r.errors for r in runs)} |")
    for mine in [st for st in strategies if st.startswith("predicted_latency")]:
        if (0.8, mine) not in results:
            continue
        p = percentile(_pool(results[(0.8, mine)], "e2e"), 99)
        print(f"\nAt 80 % load, {mine}'s p99 E2E against the others (pooled; per round in brackets):")
        for st in strategies:
            if st.startswith("predicted_latency"):
                continue
            other = percentile(_pool(results[(0.8, st)], "e2e"), 99)
            per_round = [100 * (1 - percentile(a.e2e, 99) / percentile(b.e2e, 99))
                         for a, b in zip(results[(0.8, mine)], results[(0.8, st)])]
            print(f"  vs {st}: {100 * (1 - p / other):.1f} % lower [{', '.join(f'{x:.0f}' for x in per_round)}]")
    print("\nAnswers per backend:")
    for (load, st), runs in results.items():
        counts: dict[str, int] = {}
        for r in runs:
            for b, n in r.backends.items():
                counts[b] = counts.get(b, 0) + n
        print(f"  {load:.0%} {st}: " + ", ".join(f"{b} {n}" for b, n in sorted(counts.items())))
    predicted = [r for (_, st), runs in results.items() if st.startswith("predicted_latency") for r in runs]
    e2e_err, ttft_err = _pool(predicted, "e2e_err"), _pool(predicted, "ttft_err")
    if e2e_err:
        print(f"\nlatency model (predicted_latency runs, single-attempt answers): median prediction error "
              f"E2E {100 * statistics.median(e2e_err):.1f} % over {len(e2e_err)} requests, "
              f"TTFT {100 * statistics.median(ttft_err):.1f} % over {len(ttft_err)} streams")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--loads", default="0.5,0.8,0.95")
    ap.add_argument("--repeats", type=int, default=1, help="rounds per load (each with its own arrivals)")
    ap.add_argument("--watch", type=float, default=0, help="print the live latency models every N seconds")
    ap.add_argument("--dump", help="write every answered request (JSONL) here")
    ap.add_argument("--strategies", default=",".join([s for s in STRATEGY_NAMES if s != "weighted"] + ["predicted_latency:stream_objective=e2e"]),
                    help="strategy[:key=value...] (model alias settings), comma-separated")
    port_options(ap)
    args = ap.parse_args()
    apply_port_options(args)
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-routing-"))
    backends = {n: dict(port=free_port(), model="m", tpot_growth=GROWTH, output=dict(median=400, max=400), **spec)
                for n, spec in FLEET.items()}
    fleet = Fleet.start(tmp, backends)
    mean_prompt = 900 / 4  # lognormal(6.5, 0.8) characters, about 4 characters a token
    cap = capacity_rps(statistics.mean(OUTPUTS), mean_prompt)
    strategies = args.strategies.split(",")
    gateways = {}
    for st in strategies:
        name, *settings = st.split(":")
        models = {"fleet": {"backends": list(FLEET), "strategy": name,
                            "retry": {"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
                            **{k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in settings)}}}
        extra = {"reliability": {"breaker": {"consecutive_failures": 50, "error_rate": 1.0}},
                 "auth": {"mode": "open", "admin_keys": [hashlib.sha256(ADMIN_KEY.encode()).hexdigest()]}}
        gateways[st] = start_gateway(tmp, fleet, models=models, extra=extra)
    degrade_url = f"http://127.0.0.1:{backends['degrading']['port']}/sim/speed"
    results: dict[tuple[float, str], list[Run]] = {}
    print(f"fleet capacity estimate: {cap:.1f} req/s (mean output {statistics.mean(OUTPUTS):.0f} tokens)", file=sys.stderr)
    try:
        for load in map(float, args.loads.split(",")):
            for rep in range(args.repeats):
                for st in strategies:
                    # Every strategy of a round sees the same arrivals (the seed), so rounds pair up.
                    run = asyncio.run(drive(gateways[st].url, load * cap, args.seconds, seed=int(load * 100) + 1000 * rep,
                                            degrade_url=degrade_url, watch_s=args.watch))
                    results.setdefault((load, st), []).append(run)
                    print(f"load {load:.0%} round {rep + 1} {st:18} sent {run.sent} ok {len(run.e2e)} err {run.errors} "
                          f"p99 e2e {percentile(run.e2e, 99):.0f} ms", file=sys.stderr)
                    time.sleep(1.0)  # let the fleet drain
    finally:
        for g in gateways.values():
            g.stop()
        fleet.stop()
    report(results, strategies, args)
    if args.dump:
        with open(args.dump, "w") as f:
            for (load, st), runs in results.items():
                for rep, r in enumerate(runs):
                    f.writelines(json.dumps({"load": load, "strategy": st, "round": rep + 1, **row}) + "\n" for row in r.rows)
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
