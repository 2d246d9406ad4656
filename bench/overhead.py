"""What the gateway adds: direct (client -> zero-latency simulator) vs through the gateway, in one run.

Direct and gateway runs are interleaved (order alternates each round) at each concurrency, for JSON
and streaming calls, and the table reports medians over rounds of p50/p99 latency, the added
milliseconds and the RPS ratio. By default the gateway is pinned to CPU 0 and the simulator and this
load generator to CPU 1, so the gateway gets one core of this 2-core box.

    python bench/overhead.py                       # c = 1, 16, 64; json and stream; 3 rounds
    python bench/overhead.py --conc 16 --rounds 5 --seconds 4
    python bench/overhead.py --profile             # also writes a pyinstrument profile of the gateway
    python bench/overhead.py --variants bare,default,traced --conc 16   # what telemetry adds

Variants: bare (no metrics, no Server-Timing, no tracing), default (metrics and Server-Timing, as
shipped), traced (default plus every request traced and exported over OTLP/HTTP to a local receiver),
workers2 (default, two uvicorn workers, unpinned: run it with --no-pin beside `default` to compare),
limited (default plus requests/tokens/concurrency limits on the in-process limiter, never reached),
limited-redis (the same limits on a real Redis started here: one Lua call per admission and one per
settlement). The limiter's cost is `limited-redis` minus `default`, printed per cell:

    python bench/overhead.py --variants default,limited-redis --conc 1,16 --modes json,stream --rounds 5

The operator console's cost: `console` is `default` with the console open (a poller fetches what an
open fleet page and an open requests page fetch, each every 3 s, for the whole run), `no-ring` is
`default` without the ring of recent requests the console reads (telemetry.recent_requests: 0). The
poller's payload sizes and update rate are printed at the end:

    python bench/overhead.py --variants default,console,no-ring --conc 16 --modes json,stream --rounds 5

Anthropic's Messages API against chat, same run: `msg-native` sends /v1/messages to a backend that speaks it
(passthrough; the simulator answers Messages natively), `msg-translated` to one declared chat-only (the gateway
translates to chat completions and back). With either, the simulator's answers are a fixed 16 tokens, so every
API returns the same length; their direct baseline is the simulator's own /v1/messages:

    python bench/overhead.py --variants default,msg-native,msg-translated --conc 16 --modes json,stream --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import Fleet, free_port, percentile, start_gateway, start_redis, stop_on_signals

BODY_TOKENS = 16


@dataclass
class RunResult:
    latencies: list[float]
    ttfts: list[float]
    errors: int
    seconds: float
    cpu_s: float = 0.0  # the gateway process's CPU time (user + system) during the run; 0 for direct

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / len(self.latencies) * 1e6 if self.latencies else 0.0


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc): less moved by other load than RPS."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def closed_loop(url: str, model: str, stream: bool, concurrency: int, seconds: float, max_requests: int) -> RunResult:
    """`concurrency` workers send back-to-back requests for `seconds` (bounded by max_requests)."""
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": "Measure the gateway, not the model."}],
        "max_tokens": BODY_TOKENS,
        "stream": stream,
    }
    if not url.endswith("/v1/messages"):
        payload["ignore_eos"] = True  # not a Messages parameter: there the simulator's fixed length does it
    latencies: list[float] = []
    ttfts: list[float] = []
    errors = 0
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, headers={"authorization": "Bearer bench"}) as session:
        # Warm the connection pool so connect time is not in the figures.
        models = url.replace("/chat/completions", "/models").replace("/messages", "/models")
        await asyncio.gather(*(session.get(models) for _ in range(concurrency)), return_exceptions=True)
        start = time.perf_counter()
        stop_at = start + seconds

        async def worker() -> None:
            nonlocal errors, sent
            while time.perf_counter() < stop_at and sent < max_requests:
                sent += 1
                t0 = time.perf_counter()
                try:
                    async with session.post(url, json=payload) as r:
                        if stream:
                            first = 0.0
                            async for _ in r.content.iter_any():
                                if not first:
                                    first = time.perf_counter()
                        else:
                            await r.read()
                        ok = r.status == 200
                except aiohttp.ClientError:
                    ok = False
                t1 = time.perf_counter()
                if ok:
                    latencies.append(t1 - t0)
                    if stream:
                        ttfts.append(first - t0)
                else:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return RunResult(latencies, ttfts, errors, elapsed)


CONSOLE_KEY = "bench-admin"  # the console variant's admin key (sha256 in its config)
CONSOLE_VIEWS = ("fleet", "requests")  # what an open fleet page and an open requests page each poll
CONSOLE_PERIOD_S = 3.0


@dataclass
class ConsolePoller:
    """An open console: each view fetched every CONSOLE_PERIOD_S, as the page does, until stopped."""

    base: str
    sizes: dict[str, list[int]] = field(default_factory=dict)
    # Per view, the Server-Timing figures of each fetch that rebuilt it: (wall ms, event-loop CPU ms).
    builds: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    failures: int = 0
    started: float = 0.0
    stopped: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        self.started = time.perf_counter()
        while not self._stop.is_set():
            for view in CONSOLE_VIEWS:
                req = urllib.request.Request(f"{self.base}/console/api/{view}", headers={"authorization": f"Bearer {CONSOLE_KEY}"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        self.sizes.setdefault(view, []).append(len(r.read()))
                        timing = dict(part.strip().split(";dur=") for part in r.headers.get("server-timing", "").split(",") if ";dur=" in part)
                        if float(timing.get("build", 0)) > 0:
                            self.builds.setdefault(view, []).append((float(timing["build"]), float(timing.get("cpu", 0))))
                except OSError:
                    self.failures += 1
            self._stop.wait(CONSOLE_PERIOD_S)
        self.stopped = time.perf_counter()

    def start(self) -> None:
        threading.Thread(target=self.run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        time.sleep(0.1)

    def report(self) -> str:
        span = (self.stopped or time.perf_counter()) - self.started
        lines = [f"\nconsole open: {len(CONSOLE_VIEWS)} views polled every {CONSOLE_PERIOD_S:g} s for {span:.0f} s, {self.failures} failures"]
        cpu_per_s = 0.0
        for view, sizes in self.sizes.items():
            builds = self.builds.get(view) or [(0.0, 0.0)]
            cpu = statistics.median(c for _, c in builds)
            cpu_per_s += cpu * len(builds) / span
            lines.append(f"  /console/api/{view}: {len(sizes)} fetches ({len(sizes) / span:.2f}/s), payload median "
                         f"{statistics.median(sizes) / 1024:.1f} KiB, max {max(sizes) / 1024:.1f} KiB; built {len(builds)} times, "
                         f"median {statistics.median(w for w, _ in builds):.2f} ms wall / {cpu:.2f} ms event-loop CPU, "
                         f"max {max(w for w, _ in builds):.2f} ms wall")
        lines.append(f"  the console's share of the gateway's event loop: {cpu_per_s:.2f} ms CPU per second = {cpu_per_s / 10:.3f} % of a core")
        return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conc", default="1,16,64")
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max-requests", type=int, default=20000)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--profile", action="store_true", help="run the gateway under pyinstrument")
    ap.add_argument("--gateway-env", action="append", default=[], help="KEY=VALUE for the gateway process")
    ap.add_argument("--variants", default="default", help="comma-separated: bare, default, traced")
    args = ap.parse_args()
    pin = not args.no_pin and shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
    if pin:
        os.sched_setaffinity(0, {1})
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-bench-"))
    variants = args.variants.split(",")
    messages = [v for v in variants if v in MESSAGES_MODEL]
    if messages:
        # One zero-latency backend that also speaks Messages, answering a fixed BODY_TOKENS tokens.
        fleet = Fleet.start(tmp, {"zero": dict(port=free_port(), model="m-zero", slots=4096, prefill_tokens_per_s=1e12,
                                               tpot_ms=0, output=dict(median=BODY_TOKENS, sigma=0, max=BODY_TOKENS),
                                               apis=["chat", "completions", "embeddings", "messages"])})
    else:
        fleet = Fleet.zero_latency(tmp)
    env = dict(kv.split("=", 1) for kv in args.gateway_env)
    redis_proc = None
    if "limited-redis" in variants:
        # Not pinned: on CPU 1 it would queue behind the load generator, which is not how it runs in service.
        redis_proc, redis_port = start_redis()
        LIMITS["limited-redis"]["limits"]["redis_url"] = f"redis://127.0.0.1:{redis_port}/0"
    receiver = None
    if "traced" in variants:
        port = free_port()
        receiver = subprocess.Popen([sys.executable, str(Path(__file__).parent / "otlp_receiver.py"), str(port)])
        env_traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    gateways = {}
    pollers = []
    for v in variants:
        extra = {"telemetry": TELEMETRY[v], **LIMITS.get(v, {})}
        if messages:
            extra.update(messages_config(fleet))
        gateways[v] = start_gateway(tmp, fleet, cpus="0" if pin else None, extra=extra,
                                    profile=tmp / f"profile-{v}.txt" if args.profile else None,
                                    env=env_traced if v == "traced" else env, workers=2 if v == "workers2" else 1)
        if v == "console":
            pollers.append(ConsolePoller(gateways[v].url))
            pollers[-1].start()
    targets = {"direct": (f"{fleet.url}/v1/chat/completions", fleet.model)}
    if messages:
        targets["direct-messages"] = (f"{fleet.url}/v1/messages", fleet.model)
    targets.update({v: (f"{g.url}/v1/messages", MESSAGES_MODEL[v]) if v in MESSAGES_MODEL
                    else (f"{g.url}/v1/chat/completions", "zero") for v, g in gateways.items()})
    rows: dict[tuple[str, int, str], list[RunResult]] = {}
    try:
        for rnd in range(args.rounds):
            for mode in args.modes.split(","):
                for c in map(int, args.conc.split(",")):
                    names = list(targets)
                    k = rnd % len(names)
                    order = names[k:] + names[:k]  # rotate who goes first each round
                    for name in order:
                        url, model = targets[name]
                        pid = gateways[name].proc.pid if name in gateways else None
                        cpu0 = process_cpu_s(pid) if pid else 0.0
                        res = asyncio.run(closed_loop(url, model, mode == "stream", c, args.seconds, args.max_requests))
                        res.cpu_s = process_cpu_s(pid) - cpu0 if pid else 0.0
                        rows.setdefault((mode, c, name), []).append(res)
                        print(f"round {rnd + 1} {mode:6} c={c:<3} {name:8} n={len(res.latencies):6} err={res.errors} "
                              f"p50={percentile(res.latencies, 50):.2f}ms p99={percentile(res.latencies, 99):.2f}ms rps={res.rps:.0f}",
                              file=sys.stderr)
    finally:
        for poller in pollers:
            poller.stop()
        for g in gateways.values():
            g.stop()
        fleet.stop()
        if receiver is not None:
            receiver.terminate()
        if redis_proc is not None:
            redis_proc.terminate()
    print_table(rows, args, variants)
    for poller in pollers:
        print(poller.report())
    if args.profile:
        print(f"\nprofiles: {tmp}/profile-*.txt")
    return 0


# Messages variants: the alias each calls (native: passthrough; zero: declared chat-only, translated).
MESSAGES_MODEL = {"msg-native": "native", "msg-translated": "zero"}


def messages_config(fleet: Fleet) -> dict:
    url = f"{fleet.url}/v1"
    return {"backends": {"zero": {"base_url": url, "model": fleet.model, "max_concurrency": 1024, "apis": ["chat"]},
                         "native": {"base_url": url, "model": fleet.model, "max_concurrency": 1024,
                                    "apis": ["chat", "messages"]}},
            "models": {"zero": {"backends": ["zero"]}, "native": {"backends": ["native"]}}}


TELEMETRY: dict[str, dict[str, Any]] = {
    "bare": {"metrics": False, "server_timing": False},
    "msg-native": {},
    "msg-translated": {},
    "default": {},
    "traced": {"tracing": {"enabled": True, "sample_ratio": 1.0}},
    "workers2": {},
    "limited": {},
    "limited-redis": {},
    "console": {},
    "no-ring": {"recent_requests": 0},
}
# Limits on the open tenant that every call passes through but none reaches: the cost of checking.
_NEVER_REACHED = {"requests_per_minute": 10**9, "tokens_per_minute": 10**12, "concurrent_requests": 10**6}
LIMITS: dict[str, dict[str, Any]] = {
    "console": {"auth": {"mode": "open", "admin_keys": [hashlib.sha256(CONSOLE_KEY.encode()).hexdigest()]}},
    "limited": {"limits": {"tenants": {"local": {"limits": _NEVER_REACHED}}}},
    "limited-redis": {"limits": {"store": "redis", "key_prefix": "bench:", "tenants": {"local": {"limits": _NEVER_REACHED}}}},
}


def print_table(rows: dict, args, variants: list[str]) -> None:
    def med(results: list[RunResult], f) -> float:
        return statistics.median(f(r) for r in results)

    def p(q: float):
        return lambda r: percentile(r.latencies, q)

    print(f"\nSlipstream overhead: medians over {args.rounds} rounds of {args.seconds:g}s, {BODY_TOKENS} output tokens, "
          f"zero-latency simulator")
    print("| gateway | mode | c | direct p50 / p99 ms | gateway p50 / p99 ms | added p50 / p99 ms | RPS direct / gateway | RPS ratio | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    cells = [(v, m, c) for v in variants for m in args.modes.split(",") for c in map(int, args.conc.split(","))]
    for variant, mode, c in cells:
        d, g = rows[(mode, c, "direct-messages" if variant in MESSAGES_MODEL else "direct")], rows[(mode, c, variant)]
        # Added latency per round (gateway minus direct of the same round), then the median.
        a50 = statistics.median(p(50)(x) - p(50)(y) for x, y in zip(g, d))
        a99 = statistics.median(p(99)(x) - p(99)(y) for x, y in zip(g, d))
        drps, grps = med(d, lambda r: r.rps), med(g, lambda r: r.rps)
        errs = sum(r.errors for r in d + g)
        print(f"| {variant} | {mode} | {c} | {med(d, p(50)):.2f} / {med(d, p(99)):.2f} | {med(g, p(50)):.2f} / {med(g, p(99)):.2f} | "
              f"{a50:.2f} / {a99:.2f} | {drps:.0f} / {grps:.0f} | {grps / drps:.2f} | {errs} |")
    limited = [v for v in variants if v.startswith("limited") or v in ("console", "no-ring", *MESSAGES_MODEL)]
    if "default" in variants and limited:
        print("\nWhat each variant adds over `default`, same run (per-round differences, then the median):")
        print("| variant | mode | c | added p50 / p99 ms | RPS ratio | gateway CPU us/request, default -> variant |")
        print("|---|---|---|---|---|---|")
        for variant in limited:
            for mode in args.modes.split(","):
                for c in map(int, args.conc.split(",")):
                    base, g = rows[(mode, c, "default")], rows[(mode, c, variant)]
                    a50 = statistics.median(p(50)(x) - p(50)(y) for x, y in zip(g, base))
                    a99 = statistics.median(p(99)(x) - p(99)(y) for x, y in zip(g, base))
                    ratio = med(g, lambda r: r.rps) / med(base, lambda r: r.rps)
                    cpu_b, cpu_v = med(base, lambda r: r.cpu_us_per_request), med(g, lambda r: r.cpu_us_per_request)
                    print(f"| {variant} | {mode} | {c} | {a50:.3f} / {a99:.3f} | {ratio:.3f} | {cpu_b:.0f} -> {cpu_v:.0f} "
                          f"({(cpu_v / cpu_b - 1) * 100:+.1f} %) |")


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
