"""Priority and fairness under saturation: TTFT per class and per tenant, with and without them, one run.

One simulated backend with `--slots` slots, 20 ms a token and `--tokens` output tokens per call, so a
call holds a slot about tokens x 20 ms. Four tenants send open-loop (Poisson) streamed calls for
`--seconds`, more than the backend can take, so calls wait in the gateway's queue:

- web: interactive, steady; quiet: interactive, light and steady;
- noisy: interactive, bursts of `--burst` calls at once every 3 s;
- etl: batch (its tenant default), steady, the bulk of the load.

The same arrivals (same seed) go to two gateways in turn: `fifo` (no priority header sent, every
tenant at the same level, `queue.fair: false`: first come, first served) and `priority+wfq` (the
shipped defaults, with `etl` a batch tenant). Printed: p50/p99 TTFT per class and per tenant, and
calls that failed (503 after `server.queue_timeout_s`).

    python bench/priority.py                    # 12 s of arrivals per gateway
    python bench/priority.py --seconds 20 --burst 40
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import Fleet, client_session, free_port, percentile, start_gateway, stop_on_signals

TPOT_MS = 20.0


@dataclass
class Tenant:
    name: str
    rps: float  # steady Poisson arrivals
    klass: str  # the class it belongs to (and sends, in the priority run)
    bursts: bool = False


@dataclass
class Result:
    ttft: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (tenant, class) -> seconds
    failed: dict[str, int] = field(default_factory=dict)


def arrivals(tenants: list[Tenant], seconds: float, burst: int, seed: int) -> list[tuple[float, Tenant]]:
    rng = random.Random(seed)
    out = []
    for t in tenants:
        at = 0.0
        while t.rps > 0:
            at += rng.expovariate(t.rps)
            if at >= seconds:
                break
            out.append((at, t))
        if t.bursts:
            out += [(b + rng.random() * 0.01, t) for b in range(1, int(seconds), 3) for _ in range(burst)]
    return sorted(out, key=lambda x: x[0])


async def run(url: str, plan: list[tuple[float, Tenant]], tokens: int, send_priority: bool) -> Result:
    result = Result()
    body = {"model": "slots", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
            "stream": True, "ignore_eos": True}
    async with client_session(300, limit=0) as session:
        async def one(t: Tenant) -> None:
            headers = {"authorization": f"Bearer sk-bench-{t.name}"}
            if send_priority:
                headers["x-slipstream-priority"] = t.klass
            start = time.perf_counter()
            try:
                async with session.post(url, json=body, headers=headers) as r:
                    if r.status != 200:
                        await r.read()
                        result.failed[t.name] = result.failed.get(t.name, 0) + 1
                        return
                    first = 0.0
                    async for _ in r.content.iter_any():
                        if not first:
                            first = time.perf_counter() - start
                    result.ttft.setdefault((t.name, t.klass), []).append(first)
            except aiohttp.ClientError:
                result.failed[t.name] = result.failed.get(t.name, 0) + 1

        t0 = time.perf_counter()
        tasks = []
        for at, t in plan:
            delay = at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(t)))
        await asyncio.gather(*tasks)
    return result


def gateway_extra(tenants: list[Tenant], fair: bool, fleet: Fleet, slots: int) -> dict:
    from app.admission.auth import hash_key

    port = fleet.backends["slots"]["port"]
    return {
        "auth": {"mode": "keys", "clients": [{"tenant": t.name, "key_sha256": hash_key(f"sk-bench-{t.name}")} for t in tenants]},
        # The gateway holds at most `slots` calls at the backend: the rest wait in its queue (30 s at most).
        "backends": {"slots": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m-slots", "max_concurrency": slots}},
        "limits": {"queue": {"fair": fair},
                   "tenants": {t.name: {"priority": t.klass} for t in tenants} if fair else {}},
    }


def report(name: str, result: Result, tenants: list[Tenant]) -> None:
    klass_of = {t.name: t.klass for t in tenants}

    def row(label: str, values: list[float], failed: int) -> None:
        if values:
            print(f"| {name} | {label} | {len(values)} | {percentile(values, 50):.0f} | {percentile(values, 99):.0f} | {failed} |")
        else:
            print(f"| {name} | {label} | 0 | - | - | {failed} |")

    for klass in ("interactive", "batch"):
        values = [v for (t, k), vs in result.ttft.items() if k == klass for v in vs]
        failed = sum(n for t, n in result.failed.items() if klass_of[t] == klass)
        row(f"class {klass}", values, failed)
    for tenant in sorted({t for t, _ in result.ttft} | set(result.failed)):
        values = [v for (t, _), vs in result.ttft.items() if t == tenant for v in vs]
        row(f"tenant {tenant}", values, result.failed.get(tenant, 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--burst", type=int, default=24)
    ap.add_argument("--load", type=float, default=1.3, help="offered load as a multiple of capacity")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    capacity = args.slots / (args.tokens * TPOT_MS / 1000)  # calls a second the backend can finish
    burst_rps = args.burst / 3
    # Shares of the offered load: etl the bulk; web, quiet steady; noisy's bursts come on top.
    steady = args.load * capacity - burst_rps
    tenants = [Tenant("web", 0.2 * steady, "interactive"), Tenant("quiet", 0.05 * steady, "interactive"),
               Tenant("noisy", 0.0, "interactive", bursts=True), Tenant("etl", 0.75 * steady, "batch")]
    plan = arrivals(tenants, args.seconds, args.burst, args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-prio-"))
    fleet = Fleet.start(tmp, {"slots": dict(port=free_port(), model="m-slots", slots=args.slots, tpot_ms=TPOT_MS,
                                            tpot_growth=0.0, prefill_tokens_per_s=1e9)})
    print(f"backend: {args.slots} slots, {args.tokens} tokens x {TPOT_MS:g} ms = {args.tokens * TPOT_MS:.0f} ms a call, "
          f"capacity {capacity:.1f} calls/s; offered {len(plan) / args.seconds:.1f} calls/s over {args.seconds:g} s "
          f"({len(plan)} calls; noisy bursts of {args.burst} every 3 s)", file=sys.stderr)
    results = {}
    try:
        for name, fair in (("fifo", False), ("priority+wfq", True)):
            models = {"slots": {"backends": ["slots"]}}
            gw = start_gateway(tmp, fleet, models=models, extra=gateway_extra(tenants, fair, fleet, args.slots))
            try:
                results[name] = asyncio.run(run(f"{gw.url}/v1/chat/completions", plan, args.tokens, send_priority=fair))
            finally:
                gw.stop()
    finally:
        fleet.stop()
    print(f"\nTTFT under saturation ({len(plan)} calls, {len(plan) / args.seconds / capacity:.2f}x capacity), ms")
    print("| gateway | group | calls | p50 | p99 | failed |")
    print("|---|---|---|---|---|---|")
    for name, result in results.items():
        report(name, result, tenants)
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
