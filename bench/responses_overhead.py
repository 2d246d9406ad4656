"""What /v1/responses costs the gateway, against /v1/chat/completions, and what a stored chain costs per turn.

One zero-latency simulator speaking chat and Responses; one gateway with two aliases on it: `native` (the
backend declared to speak Responses: passthrough) and `chatonly` (declared chat-only: translation).

Part 1, CPU per request (the gateway process's user+system time from /proc over each closed-loop run, divided
by the requests served), in one run, rotating the order each round:
    chat         POST /v1/chat/completions  model native
    passthrough  POST /v1/responses         model native    (store: false, so nothing but the protocol differs)
    translated   POST /v1/responses         model chatonly  (store: false)

Part 2, a stored chain's cost per turn (c=1, sequential), for the in-process store and for Redis:
    stateless    store: false, no previous_response_id
    stored       store: true (one write per turn)
    chained      store: true, previous_response_id of a 10-turn chain (one read and one write per turn; each
                 turn chains from the same 10th turn, so the chain's length stays the same)
The three run interleaved, one turn of each in turn. p50 latency per variant, and Redis commands per turn from
Redis's own counters (INFO commandstats, less the INFO itself).

    python bench/responses_overhead.py --rounds 3 --seconds 3 --conc 16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import yaml

from bench.harness import Fleet, Proc, _spawn, free_port, percentile, start_redis, stop_on_signals, wait_listening

TOKENS = 16
PROMPT = "Measure the gateway, not the model."


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway(tmp: Path, fleet: Fleet, responses: dict, cpus: str | None) -> Proc:
    port = free_port()
    url = fleet.url + "/v1"
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "auth": {"mode": "open"},
        "backends": {"native": {"base_url": url, "model": "m-zero", "apis": ["chat", "responses"], "max_concurrency": 1024},
                     "chatonly": {"base_url": url, "model": "m-zero", "apis": ["chat"], "max_concurrency": 1024}},
        "models": {"native": {"backends": ["native"]}, "chatonly": {"backends": ["chatonly"]}},
        "responses": responses,
    }
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _spawn(["serve", "--config", str(path)], tmp / f"gateway-{port}.log", cpus)
    wait_listening(port, proc)
    return Proc(proc, f"http://127.0.0.1:{port}")


def request(variant: str, stream: bool) -> tuple[str, dict]:
    if variant == "chat":
        return "/v1/chat/completions", {"model": "native", "messages": [{"role": "user", "content": PROMPT}],
                                        "max_tokens": TOKENS, "ignore_eos": True, "stream": stream}
    model = "native" if variant == "passthrough" else "chatonly"
    return "/v1/responses", {"model": model, "input": PROMPT, "max_output_tokens": TOKENS, "store": False,
                             "stream": stream}


async def closed_loop(base: str, path: str, body: dict, concurrency: int, seconds: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(session.get(base + "/healthz") for _ in range(concurrency)))
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                async with session.post(base + path, json=body) as r:
                    await r.read()
                    ok = r.status == 200
                if ok:
                    latencies.append(time.perf_counter() - t0)
                else:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


def part1(gw: Proc, args) -> None:
    variants = ["chat", "passthrough", "translated"]
    cpu: dict[tuple[str, str], list[float]] = {}
    p50: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for mode in args.modes.split(","):
            k = rnd % len(variants)
            for v in variants[k:] + variants[:k]:
                path, body = request(v, mode == "stream")
                c0 = process_cpu_s(gw.proc.pid)
                lat, err = asyncio.run(closed_loop(gw.url, path, body, args.conc, args.seconds))
                used = process_cpu_s(gw.proc.pid) - c0
                assert err == 0 and lat, (v, mode, err)
                cpu.setdefault((v, mode), []).append(used / len(lat) * 1e6)
                p50.setdefault((v, mode), []).append(percentile(lat, 50))
                print(f"round {rnd + 1} {mode:6} {v:11} n={len(lat):5} cpu/req={used / len(lat) * 1e6:.0f}us",
                      file=sys.stderr)
    print(f"\nGateway CPU per request, c={args.conc}, median of {args.rounds} rounds of {args.seconds:g} s "
          f"(load average before: {args.load})")
    print("| variant | mode | CPU us/request | vs chat | p50 ms |")
    print("|---|---|---|---|---|")
    for mode in args.modes.split(","):
        base = statistics.median(cpu[("chat", mode)])
        for v in variants:
            m = statistics.median(cpu[(v, mode)])
            print(f"| {v} | {mode} | {m:.0f} | {m / base:.3f} | {statistics.median(p50[(v, mode)]):.2f} |")


def chain_turns(gw: Proc, turns: int) -> str:
    import httpx
    previous: str | None = None
    for i in range(turns):
        r = httpx.post(gw.url + "/v1/responses", json={"model": "native", "input": f"turn {i}: {PROMPT}",
                                                         "max_output_tokens": TOKENS, "previous_response_id": previous},
                       timeout=30)
        r.raise_for_status()
        previous = r.json()["id"]
    assert previous is not None, "chain_turns needs at least one turn"
    return previous


async def interleaved(base: str, variants: dict[str, dict], n: int, rclient: redis.Redis | None) -> tuple[dict, dict]:
    """n turns of each variant, one of each in turn (A B C A B C ...), so a busy moment on the machine falls on
    all of them alike; latency per variant, and Redis round trips per turn of each (INFO commandstats)."""
    lat: dict[str, list[float]] = {name: [] for name in variants}
    trips: dict[str, int] = dict.fromkeys(variants, 0)
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            for name, body in variants.items():
                before = redis_calls(rclient) if rclient is not None else 0
                t0 = time.perf_counter()
                async with session.post(base + "/v1/responses", json=body) as r:
                    await r.read()
                    assert r.status == 200, await r.text()
                lat[name].append(time.perf_counter() - t0)
                if rclient is not None:
                    trips[name] += redis_calls(rclient) - before - 1  # less the INFO call itself
    return lat, trips


def redis_calls(client: redis.Redis) -> int:
    """Commands Redis has served (every kind, INFO included: a pipeline of n counts n)."""
    stats = client.info("commandstats")
    return sum(v["calls"] for v in stats.values())


def part2(tmp: Path, fleet: Fleet, args) -> None:
    rproc, port = start_redis()
    try:
        rclient = redis.Redis(port=port)
        print(f"\nA stored chain per turn, c=1, {args.turns} turns per variant, median of {args.rounds} rounds")
        print("| store | variant | p50 ms | added p50 vs stateless ms | Redis round trips/turn |")
        print("|---|---|---|---|---|")
        for store in ("memory", "redis"):
            cfg = {"store": store} if store == "memory" else {"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"}
            gw = gateway(tmp, fleet, cfg, None)
            try:
                head = chain_turns(gw, 10)
                base = {"model": "native", "input": PROMPT, "max_output_tokens": TOKENS}
                variants = {"stateless": {**base, "store": False}, "stored": base,
                            "chained": {**base, "previous_response_id": head}}
                meds: dict[str, list[float]] = {}
                trips: dict[str, float] = {}
                for _ in range(args.rounds):
                    lat, calls = asyncio.run(interleaved(gw.url, variants, args.turns,
                                                         rclient if store == "redis" else None))
                    for name in variants:
                        meds.setdefault(name, []).append(percentile(lat[name], 50))
                        trips[name] = calls[name] / args.turns
                stateless = statistics.median(meds["stateless"])
                for name in variants:
                    m = statistics.median(meds[name])
                    rt = f"{trips[name]:.2f}" if store == "redis" else "-"
                    print(f"| {store} | {name} | {m:.3f} | {m - stateless:+.3f} | {rt} |")
            finally:
                gw.stop()
    finally:
        rproc.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--parts", default="1,2")
    args = ap.parse_args()
    args.load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-responses-bench-"))
    zero = dict(port=free_port(), model="m-zero", slots=4096, prefill_tokens_per_s=1e12, tpot_ms=0,
                apis=["chat", "responses"])
    fleet = Fleet.start(tmp, {"zero": zero})
    try:
        if "1" in args.parts.split(","):
            gw = gateway(tmp, fleet, {}, None)
            try:
                part1(gw, args)
            finally:
                gw.stop()
        if "2" in args.parts.split(","):
            part2(tmp, fleet, args)
    finally:
        fleet.stop()
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
