"""Prefix-cache-aware routing against prefix-blind strategies, in one run, on real llama.cpp servers or
on simulated backends with prompt caches.

Workloads (open-loop Poisson arrivals at --load x the fleet's capacity for cold prompts, or --rate; each
run gets exactly round(rate x seconds) of them, gaps scaled so the mean gap is 1 / rate):
  shared     K system prompts of ~2,300 characters, each request one of them plus a short question:
             359-372 prompt tokens a request as llama.cpp counts them (SmolLM2's tokenizer, chat template
             included; ~6.5 characters a token), which the gateway's 4-characters estimate reads as ~600
  multiturn  conversations of up to --turns turns; each turn repeats the history and adds a question
  unique     every prompt different (nothing to reuse): prefix routing must not cost anything here

Strategies: prefix_aware, predicted_latency (the latency model without the prefix), least_inflight,
round_robin, each behind a fresh gateway; every run salts its prompts, so no strategy inherits a warm
cache from another. Streams with include_usage; per strategy it prints TTFT mean/p50/p99, E2E p99, the
reported cached-token ratio (usage.prompt_tokens_details.cached_tokens over prompt tokens), cold and warm
requests apart, then the aims (with --repeats, per repeat and their median) and, on shared prefixes, a
ceiling: what any placement could reach if each prefix were prefilled cold only once. With --repeats,
every strategy of a repeat runs on the same arrivals and prompts, one after the other (each repeat
starting with the next strategy), and the paired figures follow: per repeat, each strategy's mean TTFT
and E2E over each baseline's in that repeat, as the median and quartiles over repeats and how many
repeats it was lower in. On a noisy box many short repeats resolve more than a few long ones (the
load drifts within minutes; the strategies of one repeat run seconds apart): for unique prompts,
`--seconds 10 --repeats 12`. An A/A (NAME and NAME@base at one commit) shows the floor: on the 2-core
development box, shared with others' work, two arms of main read 1.45x apart at the median of 8 repeats
(quartiles 1.00-1.58, 6 requests a run), far wider than a 5 % aim (bench/ROUTING.md, tenth round). With --replicas 3,
--replica-strategy (latency_aware) also runs behind three gateway replicas that clients reach at random,
with and without consistent hashing, against one replica (a comma list runs each behind replicas, the
first also without hashing: `latency_aware,latency_aware@base` is an A/B of two commits behind replicas). With --slow F the last backend is F times
slower (simulator: its rates; llama.cpp: stopped 1 - 1/F of every 100 ms): unequal servers. With
--clients N, N closed-loop clients instead of open-loop arrivals: they start together (a burst) and
each sends its next request after its answer and a think time. --dump FILE writes every request
(when sent, which prompt, backend, TTFT, E2E, prompt and cached tokens, the gateway's predicted TTFT and
E2E and its own time, a burst wait included) per run. Each run prints the gateway's median prediction
error (its x-slipstream-predicted-*-ms headers against the times measured here), and the workload's
summary the median over repeats with the issue's aim (at most 20 %) for the default. A strategy named `latency_aware/nohash` runs with
prefix.consistent_hashing off (--no-hashing: every single-gateway one), `latency_aware/shared` with
routing.share_prefixes on, through one Redis (scripts/redis-server) the bench starts: behind --replicas,
`--replica-strategy latency_aware,latency_aware/shared` runs replicas that share their placements beside
replicas that do not; one named `NAME@base` runs its
gateway from the checkout --base-tree (another commit), for an A/B of two commits in one run. --system-words N sets the system
prompts' length (default 300 words, ~350 tokens; 600 read ~680 tokens a request as llama.cpp counts
them, 900 ~960): real system prompts are often 1,000-2,000 tokens, and the longer they are, the more of
a request a cache hit saves. Each run's line says the mean prompt tokens the servers reported.

    python bench/prefix_routing.py --backend llama --backends 2 --seconds 60
    python bench/prefix_routing.py --backend llama --backends 2 --workloads shared --prompts 3 --repeats 3 --cache-ram 0
    python bench/prefix_routing.py --backend sim --backends 3 --seconds 40 --repeats 2
    python bench/prefix_routing.py --backend sim --backends 8 --workloads shared --replicas 3
    python bench/prefix_routing.py --backend llama --backends 2 --workloads multiturn --slow 3
    python bench/prefix_routing.py --backend llama --backends 2 --workloads shared --prompts 3 --clients 6
    python bench/prefix_routing.py --backend llama --backends 2 --workloads shared --prompts 4 --clients 6 --think 1 --system-words 600
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import random
import signal
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
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import (
    ROOT,
    Fleet,
    Proc,
    _spawn,
    apply_port_options,
    base_checkout,
    client_session,
    free_port,
    percentile,
    poisson_arrivals,
    port_options,
    relative_errors,
    start_redis,
    stop_on_signals,
    wait_listening,
)

STRATEGIES = ("latency_aware", "prefix_aware", "predicted_latency", "least_inflight", "round_robin")
WORDS = ("account balance refund policy invoice customer payment schedule review escalate ticket support "
         "billing period credit debit statement fee waiver approval manager region currency tax record "
         "request confirm verify identity limit transfer dispute merchant card holder notice").split()
# The simulated backend: a compute-bound server whose prefills share its compute (SmolLM2 on one llama.cpp
# thread here, ten times faster so that runs stay short), a few slots, short answers.
SIM = dict(slots=4, prefill_tokens_per_s=1500, prefill_shared=True, tpot_ms=1, tpot_growth=0.04,
           prefix_cache_tokens=32768, output=dict(median=16, sigma=0, max=16))
OUT_TOKENS = 16


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


# --- workloads: each yields request bodies; `done(conv, answer)` feeds conversations back --------------
class Shared:
    name = "shared"

    def __init__(self, rng: random.Random, salt: str, k: int, words: int = 300) -> None:
        # 300 words: ~2,300 characters each, ~350 tokens as llama.cpp counts them (its reports: 359-372 a
        # request with the question and template); 900 words ~960, 1,300 ~1,370. The salt leads, so runs
        # share nothing.
        self.systems = [f"[{salt} policy {i}] " + text(rng, words) for i in range(k)]
        self.rng = rng

    def next(self) -> tuple[object, list[dict]]:
        system = self.rng.choice(self.systems)
        return None, [{"role": "system", "content": system}, {"role": "user", "content": text(self.rng, 8)}]

    def key(self, messages: list[dict]) -> str:
        """Which shared prompt a request carries (for --dump)."""
        return f"p{self.systems.index(messages[0]['content'])}"

    def done(self, conv, answer: str) -> None:
        pass


class Unique(Shared):
    name = "unique"

    def __init__(self, rng: random.Random, salt: str, k: int, words: int = 300) -> None:
        self.rng, self.salt, self.words = rng, salt, words

    def next(self):
        return None, [{"role": "system", "content": f"[{self.salt} {self.rng.random()}] " + text(self.rng, self.words)},
                      {"role": "user", "content": text(self.rng, 8)}]

    def key(self, messages: list[dict]) -> str:
        return "u"


class MultiTurn:
    name = "multiturn"

    def __init__(self, rng: random.Random, salt: str, turns: int, words: int = 120) -> None:
        self.rng, self.salt, self.turns, self.words = rng, salt, turns, words
        self.idle: list[list[dict]] = []
        self.started = 0

    def next(self):
        if self.idle:
            conv = self.idle.pop(0)
        else:
            self.started += 1
            conv = [{"role": "system", "content": f"[{self.salt} chat {self.started}] " + text(self.rng, self.words)}]
        conv.append({"role": "user", "content": text(self.rng, 40)})
        return conv, list(conv)

    def done(self, conv, answer: str) -> None:
        if conv is None:
            return
        conv.append({"role": "assistant", "content": answer or "ok"})
        if len(conv) < 1 + 2 * self.turns:
            self.idle.append(conv)

    def key(self, messages: list[dict]) -> str:
        return messages[0]["content"].split("]")[0].rsplit(" ", 1)[-1] + f"/t{len(messages) // 2}"


@dataclass
class Run:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    prompt: int = 0
    cached: int = 0
    errors: int = 0
    backends: dict[str, int] = field(default_factory=dict)
    # Per request: (TTFT, share of its prompt the server reported reusing), to split cold from warm.
    shares: list[tuple[float, float]] = field(default_factory=list)
    # (prompt, cached) tokens of conversation turns after the first: what affinity alone decides (a
    # first turn is a new system prompt, and how many conversations start depends on how fast answers come).
    later: list[tuple[int, int]] = field(default_factory=list)
    # Per request, for --dump: sent (s into the run), prompt key, backend, TTFT, E2E, prompt and cached tokens,
    # the gateway's predicted TTFT and E2E (ms).
    log: list[dict] = field(default_factory=list)
    # Per failed request: when it was sent, its prompt key and what came back, so that an error count in a
    # table can be traced to its cause (the gateway's error message, or the client's exception).
    failures: list[dict] = field(default_factory=list)

    @property
    def later_ratio(self) -> float:
        total = sum(p for p, _ in self.later)
        return sum(c for _, c in self.later) / total if total else float("nan")

    @property
    def cached_ratio(self) -> float:
        return self.cached / self.prompt if self.prompt else float("nan")


def arrivals(rng: random.Random, rate: float, seconds: float) -> list[float]:
    """Open-loop arrival times that offer exactly `rate`: round(rate x seconds) Poisson gaps, scaled so the
    last arrival comes at n / rate (about `seconds`; harness.poisson_arrivals, as real_backends' schedule). Drawn freely
    over `seconds`, three 25 s repeats at 0.70 req/s got 16, 22 and 23 arrivals (0.64-0.92 req/s): the
    load moved between repeats by more than the routing did within one."""
    return poisson_arrivals(rng, rate, max(1, round(rate * seconds)))


async def drive(urls: list[str], workload, rate: float, seconds: float, seed: int, clients: int = 0,
                think_s: float | None = None) -> Run:
    """Open-loop Poisson arrivals for `seconds` at exactly `rate` (`arrivals`); each request goes to a random replica in `urls`. With
    `clients`, closed loop instead: that many clients start together (a burst) and each sends its next
    request when its last answer is in, after an exponential think time (mean `think_s`, by default
    clients / rate: the open loop's offered load while answers are quick, less once they queue)."""
    rng = random.Random(seed)
    # The replica each request reaches is drawn from its own stream: drawn from the arrivals' stream, it
    # moved the schedule, and three replicas got 135 arrivals where one got 113 at seed 11 (19 % more
    # load, the most of "unique prompts: 546 ms behind one gateway, 945 ms behind three").
    pick = random.Random(seed + 1_000_003)
    run = Run()
    tasks = []
    async with client_session(180) as s:

        async def one(conv, messages) -> None:
            body = {"model": "fleet", "messages": messages, "max_tokens": OUT_TOKENS, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}}
            # The gateway's own stage times in the final usage (its time outside the backend: a burst
            # wait for a sibling's copy, a queue for a slot), for --dump's per-request trace.
            headers = {"x-slipstream-server-timing": "usage"}
            t0 = time.perf_counter()
            sent = t0 - start
            first, usage = 0.0, None
            answer: list[str] = []

            def failed(what: str) -> None:
                run.errors += 1
                run.failures.append({"sent": round(sent, 3), "key": workload.key(messages),
                                     "after_s": round(time.perf_counter() - t0, 3), "what": what[:300]})

            try:
                async with s.post(f"{pick.choice(urls)}/v1/chat/completions", json=body, headers=headers) as r:
                    if r.status != 200:
                        failed(f"HTTP {r.status}: {(await r.read()).decode(errors='replace')}")
                        return
                    backend = r.headers.get("x-slipstream-backend", "?")
                    request_id = r.headers.get("x-request-id")
                    predicted = r.headers.get("x-slipstream-predicted-ttft-ms")
                    predicted_e2e = r.headers.get("x-slipstream-predicted-e2e-ms")
                    async for line in r.content:
                        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                            continue
                        if not first:
                            first = time.perf_counter() - t0
                        chunk = orjson.loads(line[6:])
                        if "error" in chunk:
                            failed(f"error event after {len(answer)} chunks: {orjson.dumps(chunk['error']).decode()}")
                            return
                        for c in chunk.get("choices") or ():
                            answer.append((c.get("delta") or {}).get("content") or "")
                        usage = chunk.get("usage") or usage
            except (TimeoutError, aiohttp.ClientError) as e:
                failed(f"{type(e).__name__}: {e}")
                return
            run.ttft.append(first)
            run.e2e.append(time.perf_counter() - t0)
            run.backends[backend] = run.backends.get(backend, 0) + 1
            run.log.append({"sent": round(sent, 3), "id": request_id, "key": workload.key(messages), "backend": backend,
                            "ttft": round(first, 3), "e2e": round(run.e2e[-1], 3),
                            "prompt": (usage or {}).get("prompt_tokens"),
                            "cached": ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
                            # The gateway's prediction, and its time before and beside the backend's (ms).
                            "predicted": float(predicted) if predicted else None,
                            "predicted_e2e": float(predicted_e2e) if predicted_e2e else None,
                            "gateway_ms": (((usage or {}).get("slipstream_timing") or {}).get("gateway") or {}).get("ms")})
            if usage:
                prompt = usage.get("prompt_tokens") or 0
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                run.prompt += prompt
                run.cached += cached
                run.shares.append((first, cached / prompt if prompt else 0.0))
                if conv is not None and len(messages) > 2:
                    run.later.append((prompt, cached))
            workload.done(conv, "".join(answer))

        start = time.perf_counter()
        if clients:
            think = clients / rate if think_s is None else think_s

            async def client(k: int) -> None:
                own = random.Random(seed * 1000 + k)
                while time.perf_counter() - start < seconds:
                    await one(*workload.next())
                    if think:
                        # Never past the end: no request follows it, and a think time drawn at the
                        # end (mean clients / rate, 30 s at 0.2 req/s) held runs for minutes.
                        await asyncio.sleep(min(own.expovariate(1 / think), max(0.0, seconds - (time.perf_counter() - start))))

            await asyncio.gather(*(client(k) for k in range(clients)))
            return run
        for t in arrivals(rng, rate, seconds):
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            tasks.append(asyncio.ensure_future(one(*workload.next())))
        await asyncio.gather(*tasks)
    return run


# --- fleets ---------------------------------------------------------------------------------------
@dataclass
class Backends:
    urls: dict[str, str]  # name -> base_url
    flavor: str
    capacity_rps: float
    procs: list = field(default_factory=list)
    throttle: threading.Event | None = None  # set: the throttled server's duty cycle stops

    def clear_caches(self) -> None:
        """Simulated backends start every run cold (real servers: each run's prompts are salted)."""
        for url in self.urls.values():
            if self.flavor == "vllm":
                req = urllib.request.Request(url.removesuffix("/v1") + "/sim/cache", method="DELETE")
                urllib.request.urlopen(req, timeout=5).read()

    def stop(self) -> None:
        if self.throttle is not None:
            self.throttle.set()
        for p in self.procs:
            if isinstance(p, Proc):
                p.stop()
            elif p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def sim_fleet(tmp: Path, n: int, cache_tokens: int, slow: float = 1.0, words: int = 300) -> Backends:
    specs: dict[str, dict[str, Any]] = {f"sim{i}": dict(port=free_port(), model="m", **{**SIM, "prefix_cache_tokens": cache_tokens}) for i in range(n)}
    if slow > 1:
        # Unequal servers: the last one prefills and decodes `slow` times slower.
        last = specs[f"sim{n - 1}"]
        last["prefill_tokens_per_s"], last["tpot_ms"] = last["prefill_tokens_per_s"] / slow, last["tpot_ms"] * slow
    fleet = Fleet.start(tmp, specs)
    # Capacity for cold prompts: prefills run one at a time (shared compute), so each backend finishes
    # at most prefill_rate / prompt_tokens requests a second (decode overlaps in the other slots).
    prompt = 540 * words / 300  # the simulator's count for a ~300-word system prompt and a question, with framing
    cap = sum(s["prefill_tokens_per_s"] for s in specs.values()) / prompt
    # A block-shared prompt cache (as vLLM's): the simulated backends speak vLLM's flavour.
    return Backends({k: f"http://127.0.0.1:{v['port']}/v1" for k, v in specs.items()}, "vllm", cap, [fleet])


def throttle(pid: int, duty: float, stop: threading.Event) -> None:
    """Stop the process for `duty` of every 100 ms (as bench/real_backends.py): a slower server on the same CPU."""
    while not stop.is_set():
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.1 * duty)
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.1 * (1 - duty))
    os.kill(pid, signal.SIGCONT)


def llama_fleet(tmp: Path, n: int, slots: int, cache_ram_mib: int | None = None, slow: float = 1.0,
                words: int = 300) -> Backends:
    binary, model = subprocess.run([str(ROOT / "scripts" / "llama-server"), "--print-paths"], check=True,
                                   capture_output=True, text=True).stdout.split()
    # The flags scripts/llama-server starts every server with (--no-repack: never the AMX path).
    safe = subprocess.run([str(ROOT / "scripts" / "llama-server"), "--print-args"], check=True,
                          capture_output=True, text=True).stdout.split()
    # --cache-ram 0 turns llama.cpp's host-memory prompt cache off (each slot then keeps only its last
    # prompt, as in builds before it and in deployments that leave host memory alone).
    ram = ["--cache-ram", str(cache_ram_mib)] if cache_ram_mib is not None else []
    urls: dict[str, str] = {}
    # The fleet owns its servers from the first start: one that fails to start or calibrate (or a SIGTERM
    # meanwhile) stops those already running rather than leaving them to no one.
    fleet = Backends(urls, "llamacpp", 0.0)
    try:
        for i in range(n):
            port = free_port()
            p = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", str(2048 * slots),
                                  "-np", str(slots), "-t", "1", "--metrics", "--slots", "--alias", "m", *ram, *safe],
                                 stdout=open(tmp / f"llama-{port}.log", "wb"), stderr=subprocess.STDOUT)
            fleet.procs.append(p)
            wait_listening(port, p, timeout=120)
            urls[f"llama{i}"] = f"http://127.0.0.1:{port}/v1"
        if slow > 1:
            # Unequal servers: the last one runs 1 / slow of the time (calibrated so, too).
            fleet.throttle = threading.Event()
            threading.Thread(target=throttle, args=(fleet.procs[-1].pid, 1 - 1 / slow, fleet.throttle), daemon=True).start()
        fleet.capacity_rps = asyncio.run(_calibrate(list(urls.values()), words))
    except BaseException:
        fleet.stop()
        raise
    return fleet


async def _calibrate(urls: list[str], words: int = 300) -> float:
    """Fleet capacity for cold prompts of `words` words (300: ~370 tokens): one server on one CPU thread runs one prefill at a
    time, so each adds 1 / (its cold service time), timed with every server busy at once. Timed one
    server at a time, three single-threaded servers on a 2-core box read as 1.49 req/s that they could
    not sustain together (the arrivals at 70 % of it were over the box's capacity, load average 3.4)."""
    rng = random.Random(99)
    async with aiohttp.ClientSession() as s:
        for url in urls:
            for _ in range(40):  # the server answers /health 503 while it loads the model
                async with s.get(url.removesuffix("/v1") + "/health") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.5)
        times: dict[str, list[float]] = {url: [] for url in urls}

        async def cold(url: str, k: int) -> None:
            body = {"model": "m", "max_tokens": OUT_TOKENS, "temperature": 0, "messages": [
                {"role": "system", "content": f"[calibrate {url} {k}] " + text(rng, words)}, {"role": "user", "content": "hi"}]}
            t0 = time.perf_counter()
            async with s.post(f"{url}/chat/completions", json=body) as r:
                await r.read()
            times[url].append(time.perf_counter() - t0)

        for k in range(2):
            await asyncio.gather(*(cold(url, k) for url in urls))
    return sum(1 / statistics.median(v) for v in times.values())


def start_gateways(tmp: Path, backends: Backends, strategy: str, replicas: int, hashing: bool = True,
                   base: Path | None = None, trace: bool = False) -> list[Proc]:
    # `latency_aware@base`: that strategy's gateway run from the checkout --base-tree (an A/B of two
    # commits on one fleet and one schedule).
    cwd = base_checkout(strategy, base)
    strategy = strategy.partition("@")[0]
    # `latency_aware/nohash`: that strategy with prefix.consistent_hashing off, beside others in one run;
    # `latency_aware/shared`: with routing.share_prefixes on, through the bench's own Redis.
    strategy, _, flag = strategy.partition("/")
    hashing = hashing and flag != "nohash"
    channel = f"bench:prefixes:{time.time_ns()}"  # each run's replicas alone: no message of an earlier run is heard
    sharing = {"routing": {"share_prefixes": True, "redis_url": shared_redis(tmp), "channel": channel}} if flag == "shared" else {}
    out: list[Proc] = []
    try:
        for _ in range(replicas):
            port = free_port()
            config = {
                "server": {"host": "127.0.0.1", "port": port, "log_level": "warning", "queue_timeout_s": 120},
                "auth": {"mode": "open"},
                "backends": {n: {"base_url": u, "model": "m", "flavor": backends.flavor, "max_concurrency": 64,
                                 "timeouts": {"first_token_s": 120, "total_s": 180}}
                             for n, u in backends.urls.items()},
                "models": {"fleet": {"backends": list(backends.urls), "strategy": strategy.partition(":")[0],
                                     "retry": {"max_attempts": 1},
                                     "prefix": {"consistent_hashing": hashing},
                                     # `latency_aware:ttft`: streams ranked by their first token
                                     **({"stream_objective": strategy.partition(":")[2]} if ":" in strategy else {})}},
                "cache": {"store": "memory"},
                **sharing,
                # --trace: every request's spans (each route decision's scores among them) on the log.
                **({"telemetry": {"tracing": {"enabled": True, "exporter": "console"}}} if trace else {}),
            }
            path = tmp / f"gw-{port}.yaml"
            path.write_text(yaml.safe_dump(config))
            proc = _spawn(["serve", "--config", str(path)], gateway_log(tmp, port), None, cwd=cwd)
            out.append(Proc(proc, f"http://127.0.0.1:{port}"))
            wait_listening(port, proc)
    except BaseException:
        # Those already started stop with the one that failed (or a SIGTERM meanwhile): no one else holds them.
        for g in out:
            g.stop()
        raise
    return out


_REDIS: list[tuple[subprocess.Popen, int]] = []


def shared_redis(tmp: Path) -> str:
    """The URL of the Redis the `/shared` arms share placements through: started at the first one's run
    (scripts/redis-server), stopped when the bench exits."""
    if not _REDIS:
        proc, port = start_redis(tmp / "redis.log")
        _REDIS.append((proc, port))
        atexit.register(_stop_redis)
    return f"redis://127.0.0.1:{_REDIS[0][1]}/0"


def _stop_redis() -> None:
    for proc, _ in _REDIS:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def gateway_log(tmp: Path, port: int) -> Path:
    """Where start_gateways' gateway on `port` writes its log (with --trace, its spans)."""
    return tmp / f"gw-{port}.log"


def keep_spans(tmp: Path, gws: list[Proc], stem: Path) -> None:
    """Each stopped gateway's log (its console-exported spans) as STEM-N.spans."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    for n, g in enumerate(gws):
        log = gateway_log(tmp, int(g.url.rsplit(":", 1)[1]))
        stem.with_name(f"{stem.name}-{n}.spans").write_bytes(log.read_bytes())


def make_workload(name: str, rng: random.Random, salt: str, args) -> object:
    words = args.system_words
    if name == "shared":
        return Shared(rng, salt, args.prompts, words or 300)
    if name == "unique":
        return Unique(rng, salt, 1, words or 300)
    return MultiTurn(rng, salt, args.turns, words or 120)


def row(label: str, r: Run) -> str:
    mean = statistics.fmean(r.ttft) * 1000 if r.ttft else float("nan")
    return (f"  {label:<34} n={len(r.e2e):4d} err={r.errors:3d}  TTFT mean {mean:7.0f}  p50 {percentile(r.ttft, 50):7.0f}"
            f"  p99 {percentile(r.ttft, 99):7.0f}  E2E p99 {percentile(r.e2e, 99):7.0f} ms  cached {r.cached_ratio:6.1%}"
            f"  prompt {r.prompt / len(r.shares) if r.shares else float('nan'):.0f} tok"
            f"  per backend {dict(sorted(r.backends.items()))}{cold_warm(r)}"
            + (f"  later turns {len(r.later)}: cached {r.later_ratio:.1%}" if r.later else ""))


def split(r: Run) -> tuple[list[float], list[float]]:
    """TTFTs of cold requests (the server reused under half the prompt) and of warm ones."""
    return [t for t, s in r.shares if s < 0.5], [t for t, s in r.shares if s >= 0.5]


def cold_warm(r: Run) -> str:
    cold, warm = split(r)
    mean = lambda v: statistics.fmean(v) * 1000 if v else float("nan")
    return f"  cold {len(cold)} (mean TTFT {mean(cold):.0f} ms), warm {len(warm)} ({mean(warm):.0f} ms)"


def prediction_errors(r: Run) -> dict[str, tuple[float, float]]:
    """The gateway's prediction against what the client measured, per figure ("ttft", "e2e"): the median
    signed and absolute relative error of the run's requests (positive: over-predicted), as
    bench/real_backends.py reads them. A figure no request was predicted for is left out."""
    out = {}
    for figure, key in (("ttft", "predicted"), ("e2e", "predicted_e2e")):
        e = relative_errors([(q[key] / 1000, q[figure]) for q in r.log if q.get(key) and q.get(figure)])
        if e is not None:
            out[figure] = e
    return out


def error_text(errors: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{k.upper()} {s:+.0%} / {a:.0%}" for k, (s, a) in errors.items())


def prediction_report(workload: str, results: dict[str, list[Run]]) -> None:
    """Each strategy's median prediction error per repeat and the median over repeats; the issue's aim
    (at most 20 %) for the default's."""
    print(f"== {workload}: prediction error per repeat (median signed / absolute, predicted against measured)")
    for label, runs in results.items():
        per = [e for r in runs if (e := prediction_errors(r))]
        if not per:
            continue
        over = {k: (statistics.median(e[k][0] for e in per if k in e), statistics.median(e[k][1] for e in per if k in e))
                for k in ("ttft", "e2e") if any(k in e for e in per)}
        print(f"  {label:<22} " + "; ".join(error_text(e) for e in per) + f"  | median {error_text(over)}")
        if label == "latency_aware":
            worst = max(a for _, a in over.values())
            print(f"  aim ({label}): median prediction error <= 20 %: {error_text(over)} -> "
                  f"{'met' if worst <= 0.20 else 'NOT met'}")


def pooled(runs: list[Run]) -> Run:
    out = Run()
    for r in runs:
        out.ttft += r.ttft
        out.e2e += r.e2e
        out.prompt += r.prompt
        out.cached += r.cached
        out.errors += r.errors
        out.failures += r.failures
        out.shares += r.shares
        out.later += r.later
        for k, v in r.backends.items():
            out.backends[k] = out.backends.get(k, 0) + v
    return out


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("sim", "llama"), default="sim")
    ap.add_argument("--backends", type=int, default=3)
    ap.add_argument("--slots", type=int, default=2, help="llama.cpp -np per server")
    ap.add_argument("--workloads", default="shared,multiturn,unique")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--load", type=float, default=0.7, help="arrival rate as a share of cold-prompt capacity")
    ap.add_argument("--rate", type=float, default=None,
                    help="arrivals a second, in place of --load x the measured capacity (two llama.cpp servers measured "
                         "1.00 and 0.53 req/s twenty minutes apart on this box, by two cold prompts each)")
    ap.add_argument("--prompts", type=int, default=6, help="K shared system prompts")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--system-words", type=int, default=None,
                    help="words per system prompt (default 300 on shared and unique prompts: ~350 tokens as llama.cpp "
                         "counts them; 120 on multi-turn); 900 words read ~960 tokens, 1,300 ~1,370. Capacity is "
                         "calibrated with prompts of this length")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=0, help="also run --replica-strategy behind this many replicas")
    ap.add_argument("--replica-strategy", default="latency_aware",
                    help="the strategy run behind --replicas (a comma list: the first also without hashing)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-ram", type=int, default=None,
                    help="llama.cpp --cache-ram in MiB (0: no host-memory prompt cache); default: the server's")
    ap.add_argument("--slow", type=float, default=1.0,
                    help="unequal servers: the last backend this many times slower (simulator: its rates; llama.cpp: "
                         "stopped 1 - 1/slow of every 100 ms)")
    ap.add_argument("--sim-cache-tokens", type=int, default=32768,
                    help="each simulated backend's prompt cache; below K x ~540 tokens, caches are under pressure")
    ap.add_argument("--clients", type=int, default=0,
                    help="closed loop: this many clients start at once and each sends its next request after its "
                         "answer and a think time (0: open-loop Poisson arrivals)")
    ap.add_argument("--think", type=float, default=None,
                    help="closed loop: each client's mean think time in seconds (default: clients / the open-loop rate)")
    ap.add_argument("--no-hashing", action="store_true",
                    help="the single-gateway runs with prefix.consistent_hashing off (what one replica can set): new "
                         "prefixes go to the lowest prediction, not to where every replica would send them")
    ap.add_argument("--base-tree", default=None,
                    help="a checkout of another commit (with its .venv's packages importable): a strategy named "
                         "NAME@base runs its gateway from there, beside the others in the same run (an A/B)")
    ap.add_argument("--dump", default=None,
                    help="write every request (sent, prompt key, backend, TTFT, E2E, cached tokens) per run to this JSON file")
    ap.add_argument("--trace", default=None, metavar="DIR",
                    help="keep each run's gateway spans (console exporter: every route decision's candidate scores, the "
                         "predicted and measured stages) in DIR/WORKLOAD-LABEL-rREPEAT-N.spans, for bench/route_trace.py; "
                         "tracing adds its own cost to every request")
    port_options(ap)
    args = ap.parse_args()
    apply_port_options(args)
    dumped: dict[str, list] = {}
    strategies = args.strategies.split(",")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.backend == "sim":
            fleet = sim_fleet(tmp, args.backends, args.sim_cache_tokens, args.slow, args.system_words or 300)
        else:
            fleet = llama_fleet(tmp, args.backends, args.slots, args.cache_ram, args.slow, args.system_words or 300)
        try:
            rate = args.rate if args.rate is not None else args.load * fleet.capacity_rps
            print(f"{args.backend} fleet of {args.backends}: cold-prompt capacity {fleet.capacity_rps:.2f} req/s; "
                  f"arrivals {rate:.2f} req/s for {args.seconds:.0f} s per run; {args.repeats} repeat(s); shared machine"
                  + (f"; llama.cpp --cache-ram {args.cache_ram}" if args.cache_ram is not None else "")
                  + (f"; last backend {args.slow:g}x slower" if args.slow > 1 else "")
                  + (f"; closed loop: {args.clients} clients, think {args.think if args.think is not None else args.clients / rate:.2f} s"
                     if args.clients else "")
                  + ("; consistent hashing off" if args.no_hashing else "")
                  + (f"; system prompts of {args.system_words} words" if args.system_words else "")
                  + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
            # The strategies run behind --replicas: the first also without consistent hashing.
            replica_strategies = args.replica_strategy.split(",")
            for wl in args.workloads.split(","):
                results: dict[str, list[Run]] = {s: [] for s in strategies}
                variants = [(s, 1, not args.no_hashing) for s in strategies]
                if args.replicas > 1:
                    # The first replica strategy with and without consistent hashing; any more (an A/B of
                    # two commits behind replicas: `latency_aware,latency_aware@base`) with it only.
                    first, *more = replica_strategies
                    variants += [(first, args.replicas, True), (first, args.replicas, False)]
                    variants += [(rs, args.replicas, True) for rs in more]
                    for rs in replica_strategies:
                        results[f"{rs} x{args.replicas}"] = []
                    results[f"{first} x{args.replicas} no hashing"] = []
                for rep in range(args.repeats):
                    # Each repeat starts with a different strategy: none always runs first on a cold box.
                    k = rep % len(variants)
                    for strategy, replicas, hashing in variants[k:] + variants[:k]:
                        label = strategy if replicas == 1 else f"{strategy} x{replicas}" + ("" if hashing else " no hashing")
                        fleet.clear_caches()
                        gws = start_gateways(tmp, fleet, strategy, replicas, hashing,
                                             Path(args.base_tree) if args.base_tree else None, args.trace is not None)
                        try:
                            salt = f"{wl}-{label}-{rep}-{time.time()}"
                            workload = make_workload(wl, random.Random(args.seed + rep), salt, args)
                            run = asyncio.run(drive([g.url for g in gws], workload, rate, args.seconds, args.seed + rep,
                                                    args.clients, args.think))
                        finally:
                            for g in gws:
                                g.stop()
                            if args.trace:
                                keep_spans(tmp, gws, Path(args.trace) / f"{wl}-{label.replace(' ', '_')}-r{rep}")
                        results[label].append(run)
                        if args.dump:
                            dumped.setdefault(wl, []).append({"label": label, "repeat": rep, "requests": run.log,
                                                              "failures": run.failures})
                            Path(args.dump).write_bytes(orjson.dumps(dumped, option=orjson.OPT_INDENT_2))
                        print(row(f"{wl} r{rep} {label}", run) + f"  load {os.getloadavg()[0]:.1f}", flush=True)
                        if errors := prediction_errors(run):
                            print(f"    prediction error (median signed / absolute): {error_text(errors)}", flush=True)
                        for f in run.failures:
                            print(f"    failed: sent {f['sent']} s, {f['key']}, after {f['after_s']} s: {f['what']}",
                                  flush=True)
                report(wl, {k: pooled(v) for k, v in results.items() if v}, args.replicas, args.prompts, args.repeats)
                if args.repeats > 1:
                    medians(wl, results, args.prompts if wl == "shared" else 0)
                    paired(wl, {k: v for k, v in results.items() if v})
                prediction_report(wl, {k: v for k, v in results.items() if v})
        finally:
            fleet.stop()


def share_ceiling(r: Run, prefixes: int) -> float:
    """The most of `r`'s prompt tokens any placement could have found cached: the first request of each of
    `prefixes` prefixes finds nothing, and the rest reuse what this run's warm requests did (the shared
    system prompt, not the question)."""
    warm = [s for _, s in r.shares if s >= 0.5]
    if not r.shares or not warm:
        return float("nan")
    return (len(r.shares) - min(prefixes, len(r.shares))) / len(r.shares) * statistics.fmean(warm)


def medians(workload: str, results: dict[str, list[Run]], prefixes: int = 0) -> None:
    """The issue's figure: per repeat, each strategy's mean TTFT against least_inflight's in that repeat
    (the box's load moves between repeats, so only ratios within one are compared); then the median.
    With `prefixes` (shared prompts), each repeat's cached-share ceiling too."""
    lead = "latency_aware" if "latency_aware" in results else "prefix_aware"
    if lead not in results or "least_inflight" not in results:
        return
    print(f"== {workload}: per repeat, least_inflight's mean TTFT / {lead}'s, and {lead}'s cached share")
    ratios, shares = [], []
    for a, b in zip(results[lead], results["least_inflight"]):
        if a.ttft and b.ttft:
            ratios.append(statistics.fmean(b.ttft) / statistics.fmean(a.ttft))
            shares.append(a.cached_ratio)
    print("  " + "  ".join(f"{r:.2f}x / {s:.1%}" for r, s in zip(ratios, shares)))
    for label, runs in results.items():
        # Any other strategy of the run (an A/B's other arm), against least_inflight alike.
        if label in (lead, "least_inflight") or not runs:
            continue
        other = [(statistics.fmean(b.ttft) / statistics.fmean(a.ttft), a.cached_ratio)
                 for a, b in zip(runs, results["least_inflight"]) if a.ttft and b.ttft]
        if other:
            print(f"  {label}: " + "  ".join(f"{r:.2f}x / {s:.1%}" for r, s in other)
                  + f"  (median {statistics.median(r for r, _ in other):.2f}x)")
    if prefixes:
        tops = [share_ceiling(a, prefixes) for a in results[lead]]
        print("  cached-share ceiling per repeat (each prefix cold once): " + "  ".join(f"{t:.1%}" for t in tops))
    if ratios:
        print(f"  median: {statistics.median(ratios):.2f}x lower mean TTFT, {statistics.median(shares):.1%} cached")


BASELINES = ("least_inflight", "round_robin")


def spread(ratios: list[float]) -> tuple[float, float, float, int]:
    """A list of per-repeat ratios as (median, lower quartile, upper quartile, how many are below 1)."""
    if len(ratios) < 2:
        r = ratios[0] if ratios else float("nan")
        return r, r, r, sum(x < 1 for x in ratios)
    q1, med, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return med, q1, q3, sum(x < 1 for x in ratios)


def paired_ratios(results: dict[str, list[Run]], label: str, against: str | tuple[str, ...],
                  figure: str = "ttft") -> list[float]:
    """Per repeat, `label`'s mean TTFT (or E2E) over `against`'s in the same repeat: every strategy of a
    repeat ran on the same arrivals and prompts, one after another, so only the load of a minute or two
    moves between them. `against` a tuple of strategies: the lowest of their means in each repeat."""
    names = (against,) if isinstance(against, str) else against
    out = []
    for k, run in enumerate(results[label]):
        others = [results[b][k] for b in names if k < len(results.get(b, ()))]
        if not run.ttft or not others or not all(o.ttft for o in others):
            continue
        best = min(statistics.fmean(getattr(o, figure)) for o in others)
        out.append(statistics.fmean(getattr(run, figure)) / best)
    return out


def pooled_ratio(results: dict[str, list[Run]], label: str, against: str, figure: str = "ttft") -> float:
    """`label`'s mean TTFT (or E2E) over `against`'s, each pooled over the repeats both completed: the same
    arrivals, so a few repeats where one strategy queued count by their weight, which a median of
    per-repeat ratios leaves out (most short repeats of two like strategies decide alike)."""
    pairs = [(a, b) for a, b in zip(results[label], results[against]) if a.ttft and b.ttft]
    mine = [t for a, _ in pairs for t in getattr(a, figure)]
    theirs = [t for _, b in pairs for t in getattr(b, figure)]
    return statistics.fmean(mine) / statistics.fmean(theirs) if mine and theirs else float("nan")


def paired(workload: str, results: dict[str, list[Run]]) -> float | None:
    """The paired comparison over repeats: for each strategy that is not a baseline, its mean TTFT and E2E
    over each baseline's (and the lower baseline's) in the same repeat, as the median and quartiles of
    those per-repeat ratios and the number of repeats it was lower in; an A/B arm (NAME@base) against
    NAME too. Returns the lead's (latency_aware, else prefix_aware) median TTFT ratio over its best
    baseline: the one it trails most (the highest median ratio), the unique-prompt aim's figure."""
    base = tuple(b for b in BASELINES if results.get(b))
    lead = "latency_aware" if "latency_aware" in results else "prefix_aware"
    aim = None
    print(f"== {workload}: paired per repeat (same arrivals and prompts; median [quartiles], repeats lower)")
    for label, runs in results.items():
        if label in base or not runs:
            continue
        pairs: list[str | tuple[str, ...]] = [*base, *([base] if len(base) > 1 else [])]
        at = label.partition("@")[0]
        if at != label and results.get(at):
            pairs.append(at)
        for against in pairs:
            name = "the lower of " + "/".join(against) if isinstance(against, tuple) else against
            parts = []
            for figure in ("ttft", "e2e"):
                r = paired_ratios(results, label, against, figure)
                if not r:
                    continue
                med, q1, q3, lower = spread(r)
                parts.append(f"mean {figure.upper()} {med:.3f}x [{q1:.3f}-{q3:.3f}], lower in {lower} of {len(r)}"
                             + (f", pooled {pooled_ratio(results, label, against, figure):.3f}x" if isinstance(against, str) else ""))
            if parts:
                print(f"  {label} / {name}: " + "; ".join(parts))
        if label == lead and base:
            aim = max(spread(paired_ratios(results, lead, b))[0] for b in base)
    if aim is not None and workload == "unique":
        print(f"  aim ({lead}): within 5 % of the best baseline, median of per-repeat ratios: {aim - 1:+.1%} -> "
              f"{'met' if aim <= 1.05 else 'NOT met'}")
    return aim


def ceiling(runs: dict[str, Run], prefixes: int) -> None:
    """How much lower than least_inflight's any placement's mean TTFT could be on this run: every
    prefix must be prefilled cold at least once in the fleet, and a warm request is taken to be no
    faster than the fastest warm mean any strategy had here (an estimate, not a proof: less queueing
    could make warm requests faster). least_inflight's cold count shows what it paid beyond that."""
    li = runs["least_inflight"]
    colds = [split(r)[0] for r in runs.values()]
    warms = [split(r)[1] for r in runs.values()]
    cold_ms = statistics.fmean([t for c in colds for t in c]) if any(colds) else float("nan")
    warm_ms = min(statistics.fmean(w) for w in warms if w) if any(warms) else float("nan")
    n = len(li.shares)
    if not n:
        return
    best = (prefixes * cold_ms + max(0, n - prefixes) * warm_ms) / n
    li_mean = statistics.fmean(li.ttft)
    # An estimate, not a bound: with fewer cold prefills warm requests also queue less behind them, so the
    # default has passed it (2.53x against 2.01x, bench/ROUTING.md's twenty-fifth round).
    print(f"  ceiling (estimate): {prefixes} prefixes cold once at {cold_ms * 1000:.0f} ms, {n - prefixes} warm at "
          f"{warm_ms * 1000:.0f} ms -> mean TTFT ~{best * 1000:.0f} ms; least_inflight {li_mean * 1000:.0f} ms with "
          f"{len(split(li)[0])} cold: about {li_mean / best:.2f}x lower")
    # The cached share has a ceiling too: the first request of each prefix finds nothing, and a warm one
    # reuses at most its shared part (the system prompt, not the question). In a short run it is below
    # the 75 % aim whatever the routing: 13 requests on 4 prefixes, warm ones reusing 96 %, allow 66 %.
    for label, r in runs.items():
        print(f"  cached-share ceiling for {label}'s {len(r.shares)} requests ({prefixes} cold): ~{share_ceiling(r, prefixes):.1%} "
              f"(got {r.cached_ratio:.1%}, {len(split(r)[0])} cold)")


def report(workload: str, runs: dict[str, Run], replicas: int, prompts: int = 0, repeats: int = 1) -> None:
    print(f"\n== {workload} (pooled over repeats)")
    for label, r in runs.items():
        print(row(label, r))
    mean = {k: statistics.fmean(r.ttft) if r.ttft else float("nan") for k, r in runs.items()}
    # The aims are the default's (latency_aware), else prefix_aware's when only that ran.
    lead = "latency_aware" if "latency_aware" in mean else "prefix_aware"
    aware = mean.get(lead)
    if aware is None:
        return
    if workload in ("shared", "multiturn") and "least_inflight" in mean:
        ratio = mean["least_inflight"] / aware
        print(f"  aim ({lead}): mean TTFT >= 2x lower than least_inflight: {ratio:.2f}x -> {'met' if ratio >= 2 else 'NOT met'}")
        share = runs[lead].cached_ratio
        print(f"  aim ({lead}): >= 75 % of prompt tokens from the KV cache: {share:.1%} -> {'met' if share >= 0.75 else 'NOT met'}")
        if workload == "shared" and prompts:
            ceiling(runs, prompts * repeats)
    if workload == "unique":
        others = [v for k, v in mean.items() if k in STRATEGIES and k != lead]
        best = min(others) if others else aware
        print(f"  aim ({lead}): within 5 % of the best other strategy's mean TTFT: {aware / best - 1:+.1%} -> "
              f"{'met' if aware <= 1.05 * best else 'NOT met'}")
    # Each strategy run behind replicas against the same strategy on one gateway (a `/shared` or `/nohash`
    # variant against its plain name).
    for key in [k for k in runs if k.endswith(f" x{replicas}")]:
        name = key.removesuffix(f" x{replicas}")
        single = runs.get(name) or runs.get(name.partition("/")[0])
        if single is None or not single.cached_ratio:
            continue
        one, many = single.cached_ratio, runs[key].cached_ratio
        off = runs.get(f"{key} no hashing")
        print(f"  aim ({name}): {replicas} replicas' cached-token ratio within 10 % of one replica's: {many:.1%} vs {one:.1%} "
              f"({many / one - 1:+.1%}) -> {'met' if many >= 0.9 * one else 'NOT met'}"
              + (f"; without consistent hashing {off.cached_ratio:.1%}" if off else ""))


if __name__ == "__main__":
    main()
