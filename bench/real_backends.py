"""The latency model in front of two real llama.cpp servers of unequal speed, under open-loop load.

Two llama-servers (SmolLM2-135M, CPU, scripts/llama-server): `quick`, and `throttled`, the same server
stopped for part of every 100 ms (SIGSTOP/SIGCONT duty cycle), so it decodes and prefills slower.
One gateway, one alias per strategy (predicted_latency, least_inflight, round_robin) over both. A
closed-loop calibration measures capacity; then each strategy gets the same Poisson arrival schedule at
--load of it, with a distinct prompt per request (no prompt-cache hits), streamed, include_usage.

Prints, per strategy: p50/p99 TTFT and E2E, the quick backend's share of traffic, errors; and for
predicted_latency the median prediction error of TTFT and E2E (x-slipstream-predicted-*-ms against
what the client measured), and Server-Timing's network p50/p99 with the queue it shows. Each run's line
and the in-repeat ratios also give mean TTFT and E2E; on --workload mixed, each class's medians (short:
20-80 words, long: 200-800) and its quick share: there the median request is a short one, and a strategy
that sends longs to the slow server can win the medians while losing the means and tails.

    python bench/real_backends.py                   # 45 s per strategy at 70 % of capacity
    python bench/real_backends.py --seconds 30 --load 0.7 --duty 0.5
    python bench/real_backends.py --json 0.5       # half the requests JSON (ranked by their end)
    python bench/real_backends.py --workload mixed --strategies latency_aware,latency_aware@base,least_inflight \
        --base-tree /tmp/main-worktree             # an A/B of two commits on one pair of servers

The schedule offers exactly --load of the measured capacity: Poisson gaps scaled so the last arrival
comes at n / rate, and prompt lengths evenly spread over their range (on mixed, exactly half of them
long), so a run's few requests neither bunch up nor come out longer than the mix (drawn freely, 20
arrivals came at 0.62 req/s for 0.41 asked, with 329 words a prompt for 275 expected: a run meant
for 70 % ran at ~1.3x the measured capacity, with queues of ~20 s). NAME@base runs strategy NAME on
a second gateway started from --base-tree (another commit's checkout) over the same two servers,
warmed by a closed-loop burst as long as the calibration (the first gateway's warm-up), and timed
on the same schedule between the others. With --base-held that gateway caps each server at its --slots
requests and holds the rest in its own wait queue, where the first slot to free, on either server, takes the
first request waiting (late binding, bench/dispatch_frontier.py's late_bound(0)): with --base-tree naming
this checkout, an A/B of holding at the gateway against sending at once, on the same commit.

With --json, TTFT figures are the streams' and the E2E error is also given for the JSON requests alone.

`--burst S` runs S seconds of the calibration's closed loop through each strategy's own gateway right
before each of its runs; every run prints the prediction error of its first --after requests (median
signed and absolute, TTFT and E2E) beside the rest's: the issue's "no over-prediction after a burst",
in every run, not only in the first one after the calibration.

    python bench/real_backends.py --strategies latency_aware,latency_aware@base --base-tree /tmp/main --burst 10

With --repeats, the tables end with each strategy's figures over every run's requests pooled (p99, p90,
means) and their ratios: with ~11-16 requests a run, a run's p99 is its one slowest request, and the
in-repeat p99 ratios swing with where that one request went (1.81x and 0.37x in one run of s28p's).

A run cut short (the lock's ~10 minutes, an outer `timeout`) prints no tables; its --dump holds every run it
finished, and `--summarise DUMP` prints the tables from it (and starts nothing):

    python bench/real_backends.py --summarise run.json --workload mixed --after 4 --burst 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.admission.auth import hash_key
from bench.harness import (
    Proc,
    _spawn,
    apply_port_options,
    base_checkout,
    client_session,
    percentile,
    poisson_arrivals,
    port_options,
    relative_errors,
    stop_on_signals,
    wait_listening,
)
from tests.support import LlamaServer, Process, free_port, llama_server_paths, write_yaml

STRATEGIES = ("latency_aware", "predicted_latency", "least_inflight", "round_robin")
WORDS = ["river", "stone", "cloud", "paper", "garden", "window", "silver", "market", "engine", "forest", "lantern", "harbor", "copper", "winter", "meadow", "violin", "planet", "signal", "bridge", "canyon", "orchard", "thunder", "velvet", "compass"]
ADMIN_KEY = "sk-bench-admin-0123456789"  # loopback only: reads the latency models for --dump
_TIMING = re.compile(r'(\w+);dur=([\d.]+)')
_ERROR_EVENT = b'data: {"error"'


@dataclass
class Result:
    ok: bool
    backend: str = ""
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    predicted_ttft_s: float | None = None
    predicted_e2e_s: float | None = None
    timing: dict | None = None
    at: float = 0.0  # when it was sent, seconds into its strategy's run
    words: int = 0  # the prompt's length in words (for --dump)
    stream: bool = True  # False: a JSON request (--json), whose only figure is its end
    error: str = ""  # a failed request: what came back (status and body, the stream's error event, or the exception)


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + ". Summarise."


async def one(session: aiohttp.ClientSession, url: str, alias: str, text: str, max_tokens: int,
              stream: bool = True) -> Result:
    body = {"model": alias, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0.8}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first = 0.0
    try:
        async with session.post(f"{url}/v1/chat/completions", data=orjson.dumps(body),
                                headers={"content-type": "application/json"}) as r:
            if r.status != 200:
                return Result(False, error=f"HTTP {r.status}: {(await r.read()).decode(errors='replace')[:300]}")
            h = r.headers
            timing = {m.group(1): float(m.group(2)) for m in _TIMING.finditer(h.get("server-timing", ""))}
            # A stream that fails midway ends in an error event, which is a failed request, not a short
            # answer; the tail carried over finds the event's start split across two reads.
            tail = b""
            async for chunk in r.content.iter_any():
                if stream and not first and b'"content"' in chunk:
                    first = time.perf_counter() - t0
                if stream and _ERROR_EVENT in tail + chunk:
                    seen = tail + chunk
                    event = (seen[seen.index(_ERROR_EVENT) + 6:] + await r.content.read()).split(b"\n", 1)[0]
                    return Result(False, error="error event: " + event.decode(errors="replace")[:300])
                tail = (tail + chunk)[-len(_ERROR_EVENT):]
            e2e = time.perf_counter() - t0
    except (aiohttp.ClientError, TimeoutError) as e:
        return Result(False, error=f"{type(e).__name__}: {e}"[:300])
    p_ttft, p_e2e = h.get("x-slipstream-predicted-ttft-ms"), h.get("x-slipstream-predicted-e2e-ms")
    return Result(True, h.get("x-slipstream-backend", ""), first or e2e, e2e,
                  float(p_ttft) / 1000 if p_ttft and stream else None, float(p_e2e) / 1000 if p_e2e else None,
                  timing, stream=stream)


async def throttle(pid: int, duty: float, stop: asyncio.Event) -> None:
    """Stop the process for `duty` of every 100 ms: a slower server, on the same CPU."""
    period = 0.1
    while not stop.is_set():
        os.kill(pid, signal.SIGSTOP)
        await asyncio.sleep(period * duty)
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(period * (1 - duty))
    os.kill(pid, signal.SIGCONT)


async def calibrate(url: str, seconds: float, concurrency: int, max_tokens: int, rng: random.Random,
                    mixed: bool = False, alias: str = "least_inflight") -> float:
    """Requests per second the pair sustains closed-loop (least_inflight), the capacity estimate: by
    Little's law, the clients over the mean time of every request they started (the last ones are
    waited for, so long requests are not left out of the count as a done-per-second figure would).
    On mixed lengths each client alternates short and long prompts (half the clients starting long), and
    the mean time is each class's mean, weighed half and half: a 20 s burst holds only ~20 requests, whose
    share of long prompts, drawn freely, is itself off by ~11 % (one standard deviation)."""
    times: dict[bool, list[float]] = {False: [], True: []}
    end = time.perf_counter() + seconds
    async with client_session(300) as session:
        async def worker(k: int):
            long = bool(k % 2)
            while time.perf_counter() < end:
                words = rng.randint(LONG_WORDS, 800) if mixed and long else rng.randint(20, 80) if mixed else 40
                r = await one(session, url, alias, prompt(rng, words), max_tokens)
                if r.ok:
                    times[mixed and long].append(r.e2e_s)
                long = not long
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    means = [statistics.fmean(v) for v in times.values() if v]
    return concurrency / statistics.fmean(means) if means else 0.1


async def open_loop(url: str, alias: str, arrivals: list[float], texts: list[str], max_tokens: int,
                    streams: list[bool]) -> list[Result]:
    async with client_session(120) as session:
        t0 = time.perf_counter()

        async def fire(at: float, text: str, stream: bool) -> Result:
            await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
            r = await one(session, url, alias, text, max_tokens, stream)
            r.at, r.words = at, len(text.split())
            return r

        return await asyncio.gather(*(fire(a, t, st) for a, t, st in zip(arrivals, texts, streams)))


async def admin_models(url: str) -> dict:
    """Each backend's latency model and prediction errors as /admin/backends shows them now."""
    auth = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with aiohttp.ClientSession() as session, session.get(f"{url}/admin/backends", headers=auth) as r:
        data = await r.json()
    return {b["name"]: {"latency_model": b.get("latency_model"), "prediction_error": b.get("prediction_error")}
            for b in data.get("backends", [])}


async def health_line(url: str) -> str:
    """Each backend's failure share as the gateway at `url` holds it now, and the first-token timeouts its
    attempts there have met so far (its /metrics): what a burst left of the backends' health."""
    models = await admin_models(url)
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as r:
        text = await r.text()
    timeouts: dict[str, float] = {}
    for m in re.finditer(r'^slipstream_upstream_attempts_total\{([^}]*)\} (\S+)$', text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("result") == "first_token_timeout":
            timeouts[labels.get("slipstream_backend", "")] = float(m.group(2))
    return ", ".join(f"{name} failure rate {(b['latency_model'] or {}).get('failure_rate', 0.0):.2f} "
                     f"({timeouts.get(name, 0):.0f} first-token timeouts so far)" for name, b in sorted(models.items()))


LONG_WORDS = 200  # the mixed workload's long prompts: 200-800 words; the short ones 20-80


def spread(low: int, high: int, k: int) -> list[int]:
    """k lengths evenly spread over [low, high] (the midpoints of k equal parts): their mean is the range's."""
    return [round(low + (high - low) * (i + 0.5) / k) for i in range(k)]


def schedule(rng: random.Random, rate: float, n: int, workload: str) -> tuple[list[float], list[int]]:
    """n arrival times offering exactly `rate` (Poisson gaps, scaled so the last arrival comes at n / rate)
    and their prompts' lengths in words, in a random order: 20-80 words, and on mixed exactly half of
    them (n // 2) long, 200-800 words, each class evenly spread over its range."""
    arrivals = poisson_arrivals(rng, rate, n)
    longs = n // 2 if workload == "mixed" else 0
    lengths = spread(20, 80, n - longs) + spread(LONG_WORDS, 800, longs)
    rng.shuffle(lengths)
    return arrivals, lengths


def alias(name: str) -> dict:
    """The alias a strategy runs under: `strategy`, or `strategy:e2e` for streams ranked by their last token
    (`NAME@base`: NAME's, on the --base-tree gateway)."""
    strategy, _, objective = name.partition("@")[0].partition(":")
    out = {"backends": ["quick", "throttled"], "strategy": strategy, "retry": {"max_attempts": 1},
           "cache": {"exact": {"enabled": False}}}
    if objective:
        out["stream_objective"] = objective
    return out


def median_row(name: str, rows: list[dict]) -> dict:
    """Each figure's median over the repeats (one run: that run's)."""
    out = {"strategy": name}
    for k in rows[0]:
        if k != "strategy":
            out[k] = statistics.median(r[k] for r in rows)
    return out


def errors(results: list[Result]) -> dict[str, float]:
    """Median signed and absolute relative prediction error, TTFT and E2E (positive: over-predicted)."""
    ok = [r for r in results if r.ok]
    out = {}
    for key, pairs in (("ttft", [(r.predicted_ttft_s, r.ttft_s) for r in ok if r.predicted_ttft_s and r.ttft_s > 0]),
                       ("e2e", [(r.predicted_e2e_s, r.e2e_s) for r in ok if r.predicted_e2e_s and r.e2e_s > 0])):
        out[f"{key}_signed"], out[f"{key}_abs"] = relative_errors(pairs) or (float("nan"), float("nan"))
    return out


def error_text(e: dict[str, float]) -> str:
    return f"TTFT {e['ttft_signed']:+.0%} / {e['ttft_abs']:.0%}, E2E {e['e2e_signed']:+.0%} / {e['e2e_abs']:.0%}"


def prefill_speed(results: list[Result]) -> dict[str, tuple[float, int]]:
    """Each server's median prefill ms a word over a run's long prompts, as llama.cpp reported it, and how many.
    The servers share the box's cores with everything else on it, and their speed drifts over minutes: an
    arm that ran through a slow spell reads slower on every figure without having routed worse. This says
    so beside the run's figures. Long prompts only: a short one's figure is mostly the chat template's and
    the first decode step's fixed cost. It still moves with what else ran on that server at the time (a
    prefill beside a full batch of decodes is slower), so it is a witness, not a correction."""
    rates: dict[str, list[float]] = {}
    for r in results:
        if r.ok and r.words >= LONG_WORDS and r.timing and r.timing.get("prefill"):
            rates.setdefault(r.backend, []).append(r.timing["prefill"] / r.words)
    return {b: (statistics.median(v), len(v)) for b, v in sorted(rates.items())}


def speed_text(speed: dict[str, tuple[float, int]]) -> str:
    return ", ".join(f"{b} {ms:.1f} ({n})" for b, (ms, n) in speed.items())


def report(name: str, results: list[Result]) -> dict:
    ok = [r for r in results if r.ok]
    # A JSON request has no first token of its own: TTFT figures are the streams'.
    ttft, e2e = [r.ttft_s for r in ok if r.stream] or [r.e2e_s for r in ok], [r.e2e_s for r in ok]
    share = sum(1 for r in ok if r.backend == "quick") / len(ok) if ok else 0.0
    row = {"strategy": name, "requests": len(results), "errors": len(results) - len(ok), "quick_share": share,
           "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
           "e2e_p50": percentile(e2e, 50), "e2e_p99": percentile(e2e, 99),
           "ttft_mean": 1000 * statistics.fmean(ttft) if ttft else float("nan"),
           "e2e_mean": 1000 * statistics.fmean(e2e) if e2e else float("nan")}
    # Mixed lengths: each class's medians and its quick share (a long prompt is one of 200-800 words). With
    # half the prompts long, the median request is a short one: whatever sends the longs to the slow
    # server frees the quick one for the shorts, so the medians and the tails trade against each other.
    for cls, members in (("short", [r for r in ok if r.words < LONG_WORDS]), ("long", [r for r in ok if r.words >= LONG_WORDS])):
        row[f"{cls}_ttft_p50"] = percentile([r.ttft_s for r in members if r.stream], 50)
        row[f"{cls}_e2e_p50"] = percentile([r.e2e_s for r in members], 50)
        row[f"{cls}_quick"] = sum(r.backend == "quick" for r in members) / len(members) if members else float("nan")
    pt = [abs(r.predicted_ttft_s - r.ttft_s) / r.ttft_s for r in ok if r.predicted_ttft_s and r.ttft_s > 0]
    pe = [abs(r.predicted_e2e_s - r.e2e_s) / r.e2e_s for r in ok if r.predicted_e2e_s and r.e2e_s > 0]
    row["ttft_pred_err_p50"] = statistics.median(pt) if pt else float("nan")
    row["e2e_pred_err_p50"] = statistics.median(pe) if pe else float("nan")
    pj = [abs(r.predicted_e2e_s - r.e2e_s) / r.e2e_s for r in ok if not r.stream and r.predicted_e2e_s and r.e2e_s > 0]
    row["json_e2e_pred_err_p50"] = statistics.median(pj) if pj else float("nan")
    # Server-Timing is in ms already; percentile() takes seconds.
    net = [r.timing["network"] / 1000 for r in ok if r.timing and "network" in r.timing]
    queue = [r.timing.get("queue", 0.0) / 1000 for r in ok if r.timing]
    row["network_ms_p50"], row["network_ms_p99"] = percentile(net, 50), percentile(net, 99)
    row["queue_ms_p50"], row["queue_ms_p99"] = percentile(queue, 50), percentile(queue, 99)
    return row


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=45.0, help="arrivals per strategy (bounded)")
    ap.add_argument("--load", type=float, default=0.7, help="share of the measured capacity")
    ap.add_argument("--duty", type=float, default=0.6, help="share of each 100 ms the throttled server is stopped")
    ap.add_argument("--slots", type=int, default=2, help="-np of each server")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--calibrate-s", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workload", choices=("unequal", "mixed"), default="unequal",
                    help="unequal: prompts of 20-80 words; mixed: half of them ~10x longer (200-800 words)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated; `latency_aware:e2e` ranks streams by predicted end-to-end time")
    ap.add_argument("--repeats", type=int, default=1, help="runs of every strategy (order rotated each run)")
    ap.add_argument("--json", type=float, default=0.0,
                    help="share of requests sent as JSON (not streamed), drawn once for every strategy")
    ap.add_argument("--dump", default=None, help="write every request's predicted and measured figures (JSON)")
    ap.add_argument("--base-tree", default=None,
                    help="a checkout of another commit (a git worktree): NAME@base runs strategy NAME on a second "
                         "gateway started from there, over the same servers and schedule (an A/B in one run)")
    ap.add_argument("--base-held", action="store_true",
                    help="the NAME@base gateway takes at most --slots requests a server and holds the rest in its own "
                         "queue, each taking the first slot to free (late binding; --base-tree may be this checkout)")
    ap.add_argument("--burst", type=float, default=0.0,
                    help="seconds of closed loop through each strategy's gateway right before each of its runs")
    ap.add_argument("--first-token-s", type=float, default=None,
                    help="both gateways' first-token timeout (default: the gateway's, 60 s); lower, a burst's queue "
                         "on the throttled server reaches it")
    ap.add_argument("--after", type=int, default=8, help="a run's first requests, whose prediction error is printed apart")
    ap.add_argument("--summarise", metavar="DUMP", default=None,
                    help="print the tables of a --dump (a run cut short included) and start nothing; --workload, "
                         "--after and --burst say how to read it")
    port_options(ap)
    args = ap.parse_args()
    apply_port_options(args)
    if args.summarise:
        summarise(runs_from_dump(args.summarise), args.workload, args.after, bool(args.burst), args.json)
        return
    strategies = args.strategies.split(",")
    # NAME@base runs on the --base-tree gateway, under its alias NAME there.
    based = [s for s in strategies if base_checkout(s, args.base_tree)]
    llama_server_paths()
    tmp = Path(tempfile.mkdtemp(prefix="real-backends-"))
    ctx_per_slot = 2048 if args.workload == "mixed" else 1024
    quick = LlamaServer(tmp, slots=args.slots, ctx=ctx_per_slot * args.slots, alias="smol")
    slow = LlamaServer(tmp, slots=args.slots, ctx=ctx_per_slot * args.slots, alias="smol")
    # Every process started here is stopped on every way out: an error, a timeout, SIGTERM (stop_on_signals).
    owned = contextlib.ExitStack()
    owned.callback(quick.stop)
    owned.callback(slow.stop)
    stop = asyncio.Event()
    throttler: asyncio.Task | None = None
    try:
        quick.start()
        slow.start()
        assert slow.proc is not None
        throttler = asyncio.create_task(throttle(slow.proc.pid, args.duty, stop))
        port = free_port()

        timeouts = {"timeouts": {"first_token_s": args.first_token_s}} if args.first_token_s else {}

        def config(port: int, names: set[str], held: bool = False) -> dict:
            # --base-held: at most --slots requests on each server from this gateway, the rest wait in its queue.
            cap = {"max_concurrency": args.slots} if held else {}
            return {
                "server": {"host": "127.0.0.1", "port": port, "log_level": "warning", "queue_timeout_s": 60},
                "auth": {"mode": "open", "admin_keys": [hash_key(ADMIN_KEY)]},
                "backends": {"quick": {"base_url": quick.url, "model": "smol", "flavor": "llamacpp", **timeouts, **cap},
                             "throttled": {"base_url": slow.url, "model": "smol", "flavor": "llamacpp", **timeouts, **cap}},
                "models": {s.partition("@")[0]: alias(s) for s in names},
                "telemetry": {"scrape_interval_s": 1.0},
            }

        gw = Process(["serve", "--config", str(write_yaml(tmp / "gateway.yaml", config(port, {*strategies, "least_inflight"} - {*based})))],
                     tmp / "gateway.log")
        owned.callback(gw.stop)
        gw.wait_listening(port)
        url = f"http://127.0.0.1:{port}"
        base_url = url
        if based:
            base_port = free_port()
            path = write_yaml(tmp / "gateway-base.yaml", config(base_port, {*based, "least_inflight"}, held=args.base_held))
            base_gw = _spawn(["serve", "--config", str(path)], tmp / "gateway-base.log", None, cwd=Path(args.base_tree))
            owned.callback(Proc(base_gw, "").stop)
            wait_listening(base_port, base_gw)
            base_url = f"http://127.0.0.1:{base_port}"
        url_of = {s: base_url if s in based else url for s in strategies}
        rng = random.Random(args.seed)
        # The calibration draws its prompts from its own generator: the schedule does not depend on how many
        # requests the burst got through.
        calib_rng = random.Random(args.seed + 2)
        # Mixed: half the prompts ~10x longer; prefill dominates them, so capacity is measured on the mix.
        capacity = await calibrate(url, args.calibrate_s, 2 * args.slots * 2, args.max_tokens, calib_rng,
                                   mixed=args.workload == "mixed")
        if based:
            # The other gateway's models learn from a burst like the first one's calibration.
            again = await calibrate(base_url, args.calibrate_s, 2 * args.slots * 2, args.max_tokens, calib_rng,
                                    mixed=args.workload == "mixed")
            held = ", holding at the gateway (--base-held)" if args.base_held else ""
            print(f"base gateway ({args.base_tree}{held}) warmed by the same burst: {again:.2f} req/s", flush=True)
        rate = capacity * args.load
        n = max(10, int(rate * args.seconds))
        arrivals, lengths = schedule(rng, rate, n, args.workload)  # one schedule for every strategy
        # Drawn from their own generator: the schedule and prompts of a run without --json stay as they were.
        pick = random.Random(args.seed + 1)
        streams = [pick.random() >= args.json for _ in arrivals]
        print(f"workload {args.workload}; load average {os.getloadavg()[0]:.1f} at start; "
              f"{sum(not x for x in streams)} of {n} requests JSON")
        print(f"capacity {capacity:.2f} req/s (closed loop, c={2 * args.slots * 2}); offered {rate:.2f} req/s "
              f"({args.load:.0%}), {n} requests per strategy over {arrivals[-1]:.0f} s, {statistics.fmean(lengths):.0f} words "
              f"a prompt, max_tokens {args.max_tokens}, throttled duty {args.duty:.0%}", flush=True)
        runs: dict[str, list[list[Result]]] = {s: [] for s in strategies}
        first_rest: dict[str, list[tuple[dict, dict]]] = {s: [] for s in strategies}  # prediction errors
        dump: dict[str, list] = {s: [] for s in strategies}
        models: list = []  # the gateway's latency models before each strategy's run (--dump)
        for rep in range(args.repeats):
            order = strategies[rep % len(strategies):] + strategies[:rep % len(strategies)]
            for s in order:
                if args.burst:
                    await calibrate(url_of[s], args.burst, 2 * args.slots * 2, args.max_tokens, calib_rng,
                                    mixed=args.workload == "mixed")
                if args.dump:
                    models.append({"before": s, "run": rep + 1, "backends": await admin_models(url_of[s])})
                print(f"  before run {rep + 1} {s}: {await health_line(url_of[s])}", flush=True)
                texts = [prompt(rng, w) for w in lengths]  # distinct prompts: no cache hits
                results = await open_loop(url_of[s], s.partition("@")[0], arrivals, texts, args.max_tokens, streams)
                runs[s].append(results)
                dump[s] += [r.__dict__ for r in results]
                row = report(s, results)
                print(f"  run {rep + 1} {s}: TTFT p99 {row['ttft_p99']:.0f} ms, E2E p99 {row['e2e_p99']:.0f} ms, "
                      f"TTFT p50 {row['ttft_p50']:.0f} ms, E2E p50 {row['e2e_p50']:.0f} ms, "
                      f"TTFT mean {row['ttft_mean']:.0f} ms, E2E mean {row['e2e_mean']:.0f} ms, "
                      f"load average {os.getloadavg()[0]:.1f}", flush=True)
                if speed := prefill_speed(results):
                    print(f"    long prompts' prefill, ms a word (median, count): {speed_text(speed)}", flush=True)
                for r in sorted((r for r in results if not r.ok), key=lambda r: r.at):
                    print(f"    failed: sent {r.at:.2f} s, {r.words} words: {r.error}", flush=True)
                if any(r.predicted_e2e_s for r in results):
                    sent = sorted(results, key=lambda r: r.at)
                    first_rest[s].append((errors(sent[:args.after]), errors(sent[args.after:])))
                    print(f"    prediction error (median signed / absolute): first {args.after} "
                          f"{error_text(first_rest[s][-1][0])}; the rest {error_text(first_rest[s][-1][1])}", flush=True)
                if args.dump:  # after every run: a run cut short by a timeout keeps what it measured
                    Path(args.dump).write_bytes(orjson.dumps({"requests": dump, "models": models}))
    finally:
        stop.set()
        # The processes first, without an await: on SIGTERM asyncio.run cancels this task, and an await
        # here would end the clean-up. The throttler may have left the slow server stopped: resumed, it
        # can act on SIGTERM at once.
        if throttler is not None:
            throttler.cancel()
        if slow.proc is not None and slow.proc.poll() is None:
            os.kill(slow.proc.pid, signal.SIGCONT)
        owned.close()
        if throttler is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await throttler
    if args.dump:
        Path(args.dump).write_bytes(orjson.dumps({"requests": dump, "models": models}, option=orjson.OPT_INDENT_2))
    summarise(runs, args.workload, args.after, bool(args.burst), args.json)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def runs_from_dump(path: str) -> dict[str, list[list[Result]]]:
    """Each strategy's runs in a --dump (its requests in schedule order, run after run; a run begins at the
    schedule's first arrival): what a run cut short by a timeout measured, for `summarise`."""
    out: dict[str, list[list[Result]]] = {}
    for name, rows in orjson.loads(Path(path).read_bytes())["requests"].items():
        results = [Result(**r) for r in rows]
        runs: list[list[Result]] = []
        for r in results:
            if not runs or r.at == results[0].at:
                runs.append([])
            runs[-1].append(r)
        out[name] = runs
    return out


def summarise(runs: dict[str, list[list[Result]]], workload: str, after: int, burst: bool, json_share: float) -> None:
    """The tables: each strategy's medians over its runs, the first one's ratios against the others (of the
    medians, and the median of in-repeat ratios where repeats were paired), and the prediction error of
    each run's first `after` requests beside the rest's."""
    strategies = [s for s, v in runs.items() if v]
    rows = [median_row(s, [report(s, r) for r in runs[s]]) for s in strategies]
    print()
    print("(times in ms; prediction errors are medians of |predicted - measured| / measured)")
    print(f"{'strategy':<18} {'req':>4} {'err':>4} {'quick%':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>8} "
          f"{'E2E p99':>8} {'TTFT err':>9} {'E2E err':>8} {'net p50':>8} {'net p99':>8} {'queue p50':>9} {'queue p99':>9}")
    for r in rows:
        print(f"{r['strategy']:<18} {r['requests']:>4} {r['errors']:>4} {r['quick_share']:>7.0%} {r['ttft_p50']:>9.0f} "
              f"{r['ttft_p99']:>9.0f} {r['e2e_p50']:>8.0f} {r['e2e_p99']:>8.0f} {r['ttft_pred_err_p50']:>9.0%} "
              f"{r['e2e_pred_err_p50']:>8.0%} {r['network_ms_p50']:>8.2f} {r['network_ms_p99']:>8.2f} "
              f"{r['queue_ms_p50']:>9.1f} {r['queue_ms_p99']:>9.1f}")
    if workload == "mixed":
        print()
        print("mixed lengths, by class (medians over repeats): TTFT p50 / E2E p50 ms, quick share")
        for r in rows:
            print(f"  {r['strategy']:<18} short {r['short_ttft_p50']:.0f} / {r['short_e2e_p50']:.0f} ({r['short_quick']:.0%}), "
                  f"long {r['long_ttft_p50']:.0f} / {r['long_e2e_p50']:.0f} ({r['long_quick']:.0%})")
    p = rows[0]
    print()
    print(f"aims: median prediction error TTFT {p['ttft_pred_err_p50']:.0%} / E2E {p['e2e_pred_err_p50']:.0%} (<= 20 %); "
          f"quick share {p['quick_share']:.0%} (>= 70 %); Server-Timing network p99 {p['network_ms_p99']:.2f} ms (<= 5 ms)"
          + (f"; JSON requests' E2E error {p['json_e2e_pred_err_p50']:.0%}" if json_share else ""))
    for other in rows[1:]:
        print(f"vs {other['strategy']}: p99 TTFT {p['ttft_p99'] / other['ttft_p99']:.2f}x, "
              f"p99 E2E {p['e2e_p99'] / other['e2e_p99']:.2f}x, p50 TTFT {p['ttft_p50'] / other['ttft_p50']:.2f}x, "
              f"p50 E2E {p['e2e_p50'] / other['e2e_p50']:.2f}x ({p['strategy']} / {other['strategy']})")
    if any(len(runs[s]) > 1 for s in strategies):
        # Ratios within each repeat (same box state, same schedule), then their median: the figures the
        # README reports. The lines above divide medians taken over repeats, which mixes box states.
        lead = strategies[0]
        for name in strategies[1:]:
            parts = []
            for key, label in (("ttft_p99", "p99 TTFT"), ("e2e_p99", "p99 E2E"), ("ttft_p50", "p50 TTFT"),
                               ("e2e_p50", "p50 E2E"), ("ttft_mean", "mean TTFT"), ("e2e_mean", "mean E2E")):
                ratios = [report(lead, a)[key] / report(name, b)[key] for a, b in zip(runs[lead], runs[name])]
                if not ratios:
                    continue
                parts.append(f"{label} {statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
            print(f"vs {name}, median of in-repeat ratios: " + ", ".join(parts))
    if any(prefill_speed(r) for s in strategies for r in runs[s]):
        print()
        print("long prompts' prefill, ms a word, per run (llama.cpp's report): an arm that met a slow spell shows here")
        for s in strategies:
            print(f"  {s:<22} " + "; ".join(speed_text(prefill_speed(r)) or "-" for r in runs[s]))
    if any(len(runs[s]) > 1 for s in strategies):
        pooled_lines(runs, strategies)
    first_rest: dict[str, list[tuple[dict, dict]]] = {}
    for s in strategies:
        for results in runs[s]:
            if any(r.predicted_e2e_s for r in results):
                sent = sorted(results, key=lambda r: r.at)
                first_rest.setdefault(s, []).append((errors(sent[:after]), errors(sent[after:])))
    if first_rest:
        print()
        print(f"prediction error, median over repeats of each run's medians (signed / absolute); the first {after} "
              f"requests came right after {'a burst' if burst else 'the run before (the calibration, in the first)'}")
        for s, pairs in first_rest.items():
            if pairs:
                early = {k: statistics.median(p[0][k] for p in pairs) for k in pairs[0][0]}
                late = {k: statistics.median(p[1][k] for p in pairs) for k in pairs[0][1]}
                print(f"  {s:<22} first {after}: {error_text(early)}; the rest: {error_text(late)}")



def pooled_lines(runs: dict[str, list[list[Result]]], strategies: list[str]) -> None:
    """Each strategy's requests of every repeat taken as one sample: with ~11-16 requests a run, a run's p99 is
    its slowest request, so a tail aim cannot be decided run by run; over the pooled repeats it rests on more
    of the tail. Every strategy has the same schedule in every repeat, so the pools are like for like (a
    strategy cut short by a timeout pools fewer runs, and the line says how many)."""
    rows = {s: report(s, [r for run in runs[s] for r in run]) for s in strategies}
    print()
    print("pooled over repeats (every request of every run as one sample; times in ms)")
    for s, r in rows.items():
        print(f"  {s:<22} {len(runs[s])} runs, {r['requests']} requests: TTFT p99 {r['ttft_p99']:.0f}, "
              f"E2E p99 {r['e2e_p99']:.0f}, TTFT p90 {pooled_p90(runs[s], True):.0f}, "
              f"E2E p90 {pooled_p90(runs[s], False):.0f}, TTFT mean {r['ttft_mean']:.0f}, E2E mean {r['e2e_mean']:.0f}, "
              f"prediction error TTFT {r['ttft_pred_err_p50']:.0%} / E2E {r['e2e_pred_err_p50']:.0%}")
    lead = rows[strategies[0]]
    for s in strategies[1:]:
        o = rows[s]
        print(f"  pooled, {strategies[0]} / {s}: p99 TTFT {lead['ttft_p99'] / o['ttft_p99']:.2f}x, "
              f"p99 E2E {lead['e2e_p99'] / o['e2e_p99']:.2f}x, "
              f"p90 TTFT {pooled_p90(runs[strategies[0]], True) / pooled_p90(runs[s], True):.2f}x, "
              f"mean TTFT {lead['ttft_mean'] / o['ttft_mean']:.2f}x, mean E2E {lead['e2e_mean'] / o['e2e_mean']:.2f}x")


def pooled_p90(runs: list[list[Result]], ttft: bool) -> float:
    """The p90 of the pooled requests' TTFT (streams') or E2E: a tail figure resting on several requests."""
    ok = [r for run in runs for r in run if r.ok]
    return percentile([r.ttft_s for r in ok if r.stream] if ttft else [r.e2e_s for r in ok], 90)


if __name__ == "__main__":
    stop_on_signals()
    asyncio.run(main())
