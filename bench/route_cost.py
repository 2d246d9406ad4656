"""What the router itself costs per decision: building the route context (the prompt's block keys), the
strategy's ranking over the candidates, taking the lease (prediction, in-flight book, prefix index) and
giving it back, for each strategy, in-process (no network), with 3 llama.cpp-flavoured backends and a
~2 KB chat prompt (one of 8 system prompts plus a question). Wall and CPU microseconds per decision.

Two routers are measured. "cold" is never told how a request went: every backend stays untimed for the
whole run, so it takes paths a gateway takes only at start (the priors, the overdue scan of untimed
streams). "warm" is fed what a gateway feeds it (app/dispatch/attempt.py): each stream's first token,
a progress sample every 8 tokens, the end with llama.cpp's timings, the outcome. Its answers come from
three simulated servers on a virtual clock (4 slots each, FIFO beyond; one 3x slower; a prompt's
system part cached where it last ran), Poisson arrivals at about 70 % of their capacity. For it the
decision (parse, context, choose, lease) and what follows it (first token, progress samples, release,
outcome, learning) are timed apart, in wall microseconds per request ("cold" counts the release in the
decision); the CPU column is the whole loop's, the simulation's own bookkeeping included.

    python bench/route_cost.py                 # 20000 decisions per strategy, cold and warm
    python bench/route_cost.py --decisions 10000 --strategies latency_aware,least_inflight
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import heapq
import operator
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.config import BackendConfig, ModelAlias
from app.dispatch.loop import route_context, with_policy
from app.protocols.chat import CHAT
from app.record import AttemptRecord
from app.routing.context import RouteContext
from app.routing.lease import Lease
from app.routing.router import Router
from app.upstream.adapters import Adapter, BackendReport, adapter_for

STRATEGIES = ("latency_aware", "prefix_aware", "predicted_latency", "least_inflight", "round_robin")
PROGRESS_EVENTS = 8  # app/relay/observers.py: a decode-speed sample every 8 data events
# The warm run's simulated servers, per backend: (seconds per prompt token, seconds per output token at
# batch 1, decode slowdown per extra running request); all have SLOTS slots and cache a system prompt.
SERVERS = ((0.0005, 0.02, 0.1), (0.0005, 0.02, 0.1), (0.0015, 0.06, 0.1))
SLOTS = 4
NET_S = 0.002
# A request in flight in the warm run: its lease, its record, its context and its answer's tokens.
_Held = tuple[Lease, AttemptRecord, RouteContext, int]


@dataclass
class Backend:
    # The router reads the name, the configuration and the adapter: no network needed to decide.
    name: str
    config: BackendConfig
    adapter: Adapter


def _router(strategy: str, flavor: str = "llamacpp") -> tuple[Router, ModelAlias]:
    backends = {f"b{i}": Backend(f"b{i}", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor=flavor,
                                                        max_concurrency=64 if flavor == "llamacpp" else 1024), adapter_for(flavor))
                for i in range(3)}
    spec = ModelAlias(backends=tuple(backends), strategy=strategy)
    # scores_read off: as a gateway that does not trace (its default, and shared/peer-bench's).
    router = Router(backends, {"m": spec}, 1.0, scores_read=False)  # type: ignore[arg-type]
    return router, spec


async def run(strategy: str, n: int, bodies: list[bytes]) -> tuple[float, float]:
    router, spec = _router(strategy)
    rng = random.Random(1)
    held = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        req = CHAT.parse(bodies[rng.randrange(len(bodies))])
        ctx = with_policy(route_context(req), spec)
        held.append(await router.acquire("m", ctx=ctx))
        if len(held) > 6:  # a few requests in flight, as under load
            held.pop(0).release()
    for lease in held:
        lease.release()
    return (time.perf_counter() - wall0) / n * 1e6, (time.process_time() - cpu0) / n * 1e6


class _Server:
    """One simulated llama.cpp server: SLOTS slots, FIFO beyond; the last few system prompts it ran stay
    cached (prefilled again only in part)."""

    def __init__(self, per_prompt_token: float, tpot: float, growth: float) -> None:
        self.per_prompt_token, self.tpot, self.growth = per_prompt_token, tpot, growth
        self.free = [0.0] * SLOTS  # when each slot frees
        self.running: list[float] = []  # the ends of the requests running, for the batch
        self.cached: list[int] = []  # system prompts held, most recent last

    def serve(self, now: float, system: int, prompt: int, system_tokens: int, output: int) -> tuple[float, float, float, int]:
        """(slot taken, first token, end, prompt tokens reused) for a request sent at `now`."""
        slot = heapq.heappop(self.free)
        start = max(now, slot) + NET_S
        hit = system in self.cached
        if hit:
            self.cached.remove(system)
        self.cached = [*self.cached[-3:], system]
        reused = system_tokens if hit else 0
        first = start + (prompt - reused) * self.per_prompt_token
        self.running = [e for e in self.running if e > first]
        end = first + (output - 1) * self.tpot * (1.0 + self.growth * len(self.running))
        self.running.append(end)
        heapq.heappush(self.free, end)
        return start, first, end, reused


@contextlib.contextmanager
def _virtual_clock() -> Iterator[list[float]]:
    """time.monotonic reads box[0] while inside: the loops advance it themselves (a virtual clock)."""
    box = [1000.0]
    real = time.monotonic
    time.monotonic = functools.partial(operator.getitem, box, 0)  # type: ignore[assignment]
    try:
        yield box
    finally:
        time.monotonic = real


def run_warm(strategy: str, n: int, bodies: list[bytes], systems: list[int], seed: int = 1) -> tuple[float, float, float]:
    """The warm router: (decision wall us, learning wall us, whole-loop CPU us) per request."""
    with _virtual_clock() as box:
        return _warm(strategy, n, bodies, systems, seed, box)


def _drive(coro):
    """Run the router's fast path (a free slot, no queue: it never waits) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("a decision waited for a slot")


def _warm(strategy: str, n: int, bodies: list[bytes], systems: list[int], seed: int, box: list[float]) -> tuple[float, float, float]:
    router, spec = _router(strategy)
    learner = router.learner
    servers = [_Server(*s) for s in SERVERS]
    rng = random.Random(seed)
    # Capacity: each server's slots over its mean request (~150 uncached prompt tokens, 64 output).
    capacity = sum(SLOTS / (150 * p + 63 * t) for p, t, _ in SERVERS)
    gap = 1.0 / (0.7 * capacity)
    events: list[tuple[float, int, int, _Held]] = []  # (at, request number, kind, request)
    decide = learn = 0.0
    clock = time.perf_counter
    cpu0 = time.process_time()
    now = box[0]
    for number in range(n):
        now += rng.expovariate(1.0 / gap)
        while events and events[0][0] <= now:
            at, _, kind, item = heapq.heappop(events)
            box[0] = at
            held, rec, hctx, tokens = item
            t0 = clock()
            if kind == 0:  # the first event: Attempt.answered
                held.prefilled()
                held.first_token()
                learner.first_token(rec, hctx.prompt_tokens)
            elif kind == 1:  # a progress sample: Attempt.progress
                events_out = rec.progress[0] + PROGRESS_EVENTS if rec.progress[1] else PROGRESS_EVENTS
                last = rec.progress if rec.progress[1] else (1, rec.first_event)
                rec.progress = (events_out, at)
                held.progress(events_out)
                learner.progress(rec, held.state, last, events_out, at)
            else:  # the end: Attempt.end, a whole answer
                rec.end = at
                held.release()
                router.report(held, None)
                learner.learn(rec, hctx.prompt_tokens, tokens, hctx.prefix, held.shape, held.beside_s)
            learn += clock() - t0
        box[0] = now
        k = rng.randrange(len(bodies))
        t0 = clock()
        req = CHAT.parse(bodies[k])
        ctx = with_policy(route_context(req), spec)
        lease: Lease = _drive(router.acquire("m", ctx=ctx))
        decide += clock() - t0
        i = int(lease.state.name[1:])
        output = rng.randint(16, 64)
        prompt = ctx.prompt_tokens
        system_tokens = int(prompt * 0.95)
        start, first, end, reused = servers[i].serve(now, systems[k], prompt, system_tokens, output)
        a = AttemptRecord(number, "m", lease.state.name, "llamacpp", "h", 1, "m", True, now,
                          load=lease.state.inflight, predicted=lease.forecast, booked=lease.estimate, prefix=lease.prefix)
        a.headers, a.first_event = start, first
        a.report = BackendReport(prefill_s=first - start, decode_s=end - first, prompt_tokens=prompt,
                                 output_tokens=output, prompt_cached=reused, source="llamacpp")
        r: _Held = (lease, a, ctx, output)
        heapq.heappush(events, (first, number, 0, r))
        for m in range(PROGRESS_EVENTS, output, PROGRESS_EVENTS):
            heapq.heappush(events, (first + (end - first) * m / output, number, 1, r))
        heapq.heappush(events, (end, number, 2, r))
    cpu = time.process_time() - cpu0
    return decide / n * 1e6, learn / n * 1e6, cpu / n * 1e6


def run_peer(strategy: str, n: int, stream: bool, conc: int, seed: int = 1) -> tuple[float, float, float]:
    """As on ../shared/peer-bench (bench/router_cpu.py): its load generator's request (a 64-character
    prompt, 16 tokens), a closed loop of `conc` clients, three generic (OpenAI) backends answering at once,
    so the gateway's own time per request (~300 us, virtual) is all the latency there is. Each answer is
    fed back as app/dispatch/attempt.py feeds it: a stream's first event and progress samples, the end, the
    outcome. (decision wall us, after-decision wall us, whole-loop CPU us) per request."""
    with _virtual_clock() as box:
        return _peer(strategy, n, stream, conc, seed, box)


def _peer(strategy: str, n: int, stream: bool, conc: int, seed: int, box: list[float]) -> tuple[float, float, float]:
    import orjson

    router, spec = _router(strategy, "openai")
    learner = router.learner
    body: dict = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": ("hello " * 11)[:64]}]}
    if stream:
        body["stream"], body["stream_options"] = True, {"include_usage": True}
    raw = orjson.dumps(body)
    rng = random.Random(seed)
    per_request = 300e-6  # the gateway's own time a request: the clock's step between arrivals
    events: list[tuple[float, int, int, _Held]] = []
    decide = after = 0.0
    clock = time.perf_counter
    cpu0 = time.process_time()
    now = box[0]
    for number in range(n):
        # Closed loop: a new request when one ends (the first `conc` at once).
        if number >= conc:
            while True:
                at, _, kind, item = heapq.heappop(events)
                box[0] = now = max(now, at)
                held, rec, hctx, tokens = item
                t0 = clock()
                if kind == 0:
                    held.prefilled()
                    held.first_token()
                    learner.first_token(rec, hctx.prompt_tokens)
                elif kind == 1:
                    last = rec.progress if rec.progress[1] else (1, rec.first_event)
                    rec.progress = (PROGRESS_EVENTS, at)
                    held.progress(PROGRESS_EVENTS)
                    learner.progress(rec, held.state, last, PROGRESS_EVENTS, at)
                else:
                    rec.end = at
                    held.release()
                    router.report(held, None)
                    learner.learn(rec, hctx.prompt_tokens, tokens, hctx.prefix, held.shape, held.beside_s)
                after += clock() - t0
                if kind == 2:
                    break
        box[0] = now = now + per_request * rng.uniform(0.5, 1.5)
        t0 = clock()
        req = CHAT.parse(raw)
        ctx = with_policy(route_context(req), spec)
        lease: Lease = _drive(router.acquire("m", ctx=ctx))
        decide += clock() - t0
        a = AttemptRecord(number, "m", lease.state.name, "openai", "h", 1, "m", stream, now,
                          load=lease.state.inflight, predicted=lease.forecast, booked=lease.estimate, prefix=lease.prefix)
        end = now + conc * per_request * rng.uniform(0.5, 1.5)
        a.headers = now + 0.1 * (end - now)
        r: _Held = (lease, a, ctx, 16)
        if stream:
            a.first_event = now + 0.2 * (end - now)
            heapq.heappush(events, (a.first_event, number, 0, r))
            heapq.heappush(events, (now + 0.6 * (end - now), number, 1, r))
        else:
            a.first_event = end
        heapq.heappush(events, (end, number, 2, r))
    cpu = time.process_time() - cpu0
    return decide / n * 1e6, after / n * 1e6, cpu / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=20000)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--modes", default="cold,warm", help="cold, warm, peer (as on shared/peer-bench), comma-separated")
    ap.add_argument("--peer", default="json16,stream64", help="peer mode's cells: json or stream, then the clients")
    args = ap.parse_args()
    import orjson

    rng = random.Random(2)
    words = "account balance refund policy invoice customer payment schedule review escalate ticket".split()
    systems = [" ".join(rng.choice(words) for _ in range(300)) for _ in range(8)]
    bodies = [orjson.dumps({"model": "m", "stream": True, "max_tokens": 64, "messages": [
        {"role": "system", "content": s}, {"role": "user", "content": f"question {k}"}]}) for s in systems for k in range(4)]
    which = [j for j in range(len(systems)) for _ in range(4)]
    modes = args.modes.split(",")
    print(f"router cost per decision, {args.decisions} decisions per strategy, 3 backends, ~2 KB prompts; "
          f"load average {os.getloadavg()[0]:.1f} (shared 2-core box)")
    for s in args.strategies.split(","):
        if "cold" in modes:
            wall, cpu = asyncio.run(run(s, args.decisions, bodies))
            print(f"  {s:<18} cold: wall {wall:6.1f} us   CPU {cpu:6.1f} us per decision "
                  "(parse + context + choose + lease + release)")
        if "warm" in modes:
            decide, learn, cpu = run_warm(s, args.decisions, bodies, which)
            print(f"  {s:<18} warm: decide {decide:6.1f} us   learn {learn:6.1f} us   loop CPU {cpu:6.1f} us per request")
        if "peer" in modes:
            for cell in args.peer.split(","):
                kind = cell.rstrip("0123456789")
                conc = int(cell[len(kind):])
                decide, learn, cpu = run_peer(s, args.decisions, kind == "stream", conc)
                print(f"  {s:<18} peer {cell:<9}: decide {decide:6.1f} us   after {learn:6.1f} us   loop CPU {cpu:6.1f} us per request")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
