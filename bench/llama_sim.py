"""The real Router in front of llama.cpp-like servers on a virtual clock: many seeded runs in seconds, the
same arrivals and prompts for every strategy, so small differences in routing show above the noise that
real servers on a shared 2-core box add (one run's mean TTFT there moves by 20-50 % with the box's load).

Each server is one llama.cpp process with `--slots` slots and one CPU thread (`-np 2 -t 1`, as
bench/prefix_routing.py starts them): one compute step at a time, and each step processes the whole
prompt of every slot just taken plus one token of every slot decoding. So a newcomer's prefill stalls
the running decodes, two prompts taken together are prefilled together (both first tokens at the end),
and a request beyond the slots waits for one (FIFO). The gateway is fed what a gateway feeds it (first
token, a progress sample every 8 tokens, the end with llama.cpp's timings, as bench/route_cost.py's warm
run). Rates are this box's: ~2 s to prefill a cold ~380-token prompt, ~35 ms a token at batch 1.

Workloads: unique prompts (~300-word system prompts, nothing shared), `--shared K` system prompts (each
server keeps its last `--cache` prompts), `--mixed` (half the prompts 10x shorter), `--slow F` (the last
server F times slower), `--context F` (a decoding slot's step F TPOTs slower per 1,000 tokens of its
context, as a llama.cpp decode step reads the whole context: the real quick server decoded ~13 ms a token
for ~60-token prompts and ~20 ms for ~900-token ones, about 0.6; off by default). With `--per-slot`, each slot keeps only the last prompt it ran instead (llama.cpp
with --cache-ram 0): a request taking a slot takes the free one holding its prompt, else the least
recently used free one, whose prompt it replaces; the servers publish their slots (as /props does) and the
gateway's burst wait is played (a request held back for a sibling's busy copy of its prefix is sent when
that copy frees, or at the wait's limit). Without them a request whose prompt sat in a running request's
slot found it as if the cache were shared, and the collapses seen on real servers did not show. With
`--per-slot --host-cache`, a prompt a slot gives up is saved to host memory and moved back into the slot
that next takes it (llama.cpp's default --cache-ram: the prompt in a running request's slot is the one copy
it has). `--clients N` plays bench/prefix_routing.py's closed loop: N clients start together (a burst
before any server is timed) and each sends its next request a think time after its answer (mean --think,
by default N / --rate, as that bench), --requests in all, every one counted. Printed per strategy: mean and median TTFT and E2E, p99s, pooled over seeds,
each seed's mean TTFT and E2E against the best of least_inflight and round_robin on that seed, and the
median prediction error of TTFT and E2E (signed and absolute, pooled over seeds).
`--spread` draws mixed lengths as bench/real_backends.py's mixed workload does (20-80 or 200-800 words; with
`--output 24`, its answers); `--replay DUMP` plays a real run's arrival times and prompt lengths (its --dump) on
every seed, the seeds then varying only the burst; `--per-run` reads each seed as one real run is read (p50
and p99 over its arrivals, each class's E2E median) against least_inflight's on the same seed, and prints the
median ratio and the share of seeds lost: with ~10 requests a run, how often one run's medians lose by chance.
`--oracle` (with `--per-run`, unique prompts) then tries every placement of each seed's arrivals on the same
servers (2^n, n <= 14) and prints the share of seeds where any placement meets issue 24's p99 aims (0.7x
least_inflight's TTFT, 0.85x its E2E) and each strategy's p99s over the least reachable: a seed none meets is
lost whatever routes it (a burst of long prompts sets every placement's tail).
A burst's prompts come from a generator of their own, so every strategy meets the same arrivals after it.
`--tree DIR` runs a strategy's router from another checkout (an A/B of two commits: `NAME@DIR`).

`--burst S` runs S seconds of closed loop (8 clients, as bench/real_backends.py's calibration) before each
seed's arrivals; the latency figures are then the arrivals' alone, and each strategy also prints its
prediction error (median signed and absolute, TTFT and E2E, pooled over seeds) for the first `--after`
arrivals after the burst beside the rest's: the issue's "no over-prediction after a burst".

    python bench/llama_sim.py --strategies latency_aware,least_inflight,round_robin --seeds 20
    python bench/llama_sim.py --strategies latency_aware,latency_aware@/tmp/main,least_inflight,round_robin
    python bench/llama_sim.py --mixed --slow 2.5 --rate 0.8
    python bench/llama_sim.py --mixed --slow 2.5 --rate 0.5 --requests 60 --seeds 12 --burst 20 --after 8
    python bench/llama_sim.py --spread --output 24 --slow 2.5 --rate 0.33 --requests 10 --seeds 200 --burst 6 --after 4 \
        --per-run --strategies latency_aware,least_inflight    # the real mixed bench's shape, one seed a run
    python bench/llama_sim.py --spread --output 24 --slow 2.6 --rate 0.33 --requests 12 --seeds 200 --burst 6 --after 4 \
        --per-run --oracle --strategies latency_aware,least_inflight    # which runs any routing could win (~5 min)
    python bench/llama_sim.py --shared 4 --per-slot --rate 1.0 --requests 30 --seeds 60
    python bench/llama_sim.py --shared 4 --per-slot --host-cache --clients 6 --rate 0.52 --requests 22 --seeds 100
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import os
import random
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

WORDS = ("account balance refund policy invoice customer payment schedule review escalate ticket support "
         "billing period credit debit statement fee waiver approval manager region currency tax record "
         "request confirm verify identity limit transfer dispute merchant card holder notice").split()
PER_TOKEN_S = 2.0 / 600  # a cold ~380-token prompt (~600 as the gateway estimates it) in ~2 s
TPOT_S, GROWTH, OUTPUT, NET_S = 0.035, 0.1, 16, 0.002
TEMPLATE_SHARE = 0.07  # what llama.cpp reports reusing of a unique prompt: the chat template and the salt


@dataclass(eq=False)
class _Req:
    lease: Any
    rec: Any
    ctx: Any
    sent: float
    uncached: float
    reused: int
    slot_at: float | None = None
    first: float | None = None
    out: int = 0
    burst: bool = False
    system: str = ""
    slot: int = -1  # with --per-slot: the slot that took it


@dataclass(eq=False)
class _Held:
    """A request held back for a sibling's copy of its prefix, as app/routing/lease.py's wait_for_prefix holds
    it: until the copy is computed (its first token; on a timed server, at most until the copy is far overdue),
    then at most `limit_s` more for it to be free."""

    req: _Req
    copy: Any  # the sibling's PrefixCopy: set when free, its `computed` at its first token
    limit_s: float
    overdue_at: float  # inf: no bound before the copy is computed (an untimed server)
    computed_at: float | None = None

    def due(self, at: float) -> bool:
        """Whether the wait ends at `at` (the copy free; computed `limit_s` ago; or far overdue)."""
        if self.copy.is_set():
            return True
        computed = getattr(self.copy, "computed", None)
        if computed is None or computed.is_set():
            if self.computed_at is None:
                self.computed_at = at
            return at >= self.computed_at + self.limit_s
        return at >= self.overdue_at


@dataclass
class _Server:
    speed: float
    slots: list[_Req] = field(default_factory=list)
    queue: list[_Req] = field(default_factory=list)
    step: list[_Req] = field(default_factory=list)
    busy: bool = False
    cache: list[str] = field(default_factory=list)
    # With --per-slot: each slot's last prompt, when it was last released, and the request it runs.
    held: list[str | None] = field(default_factory=list)
    used: list[float] = field(default_factory=list)
    taken: list[_Req | None] = field(default_factory=list)
    waiting: list[_Held] = field(default_factory=list)  # requests held back for a sibling's copy of their prefix
    stored: list[str] = field(default_factory=list)  # with --host-cache: prompts saved from slots to host memory


def run(strategy: str, seed: int, requests: int, rate: float, shared: int, cache: int, slow: float, mixed: bool,
        slots: int, burst_s: float = 0.0, clients: int = 8, detail: bool = False, context: float = 0.0,
        per_slot: bool = False, host_cache: bool = False, closed: int = 0, think: float = 0.0,
        spread: bool = False, output: int = OUTPUT, replay: list[tuple[float, int]] | None = None,
        published: bool = False) -> list[tuple[float, ...]]:
    """One seeded run: each request's (TTFT, E2E); with `detail`, (TTFT, E2E, predicted TTFT, predicted
    E2E, sent, 1 for a burst request else 0, share of the prompt reused, prompt tokens, server: 0 the quick
    one), in the order they ended. With `per_slot`, each slot keeps
    only the last prompt it ran (llama.cpp with --cache-ram 0) instead of each server its last `cache`. With `burst_s`, `clients` send
    closed-loop for that long first (each again as soon as its answer ends, as bench/real_backends.py's
    calibration does), and the `requests` arrivals begin when the burst's last answer has ended. With
    `host_cache` (and `per_slot`), a prompt a slot gives up is kept in host memory and moved back into the
    slot that next takes it (llama.cpp's --cache-ram, on by default). With `closed`, that many clients
    start together and each sends its next request a think time (exponential, mean `think`) after its
    answer, until `requests` were sent: bench/prefix_routing.py's --clients. A `replay` is open loop (its
    arrival times are the schedule), so it takes no `closed` clients: their next requests would run past
    its prompts."""
    if replay and closed:
        raise ValueError("a replay plays its own arrival times: it takes no closed-loop clients")
    from app.config import BackendConfig, ModelAlias
    from app.dispatch.loop import route_context, with_policy
    from app.protocols.chat import CHAT
    from app.record import AttemptRecord
    from app.routing.router import Router
    from app.upstream.adapters import BackendReport, adapter_for
    from bench.route_cost import PROGRESS_EVENTS, Backend, _drive, _virtual_clock

    backends = {f"b{i}": Backend(f"b{i}", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp",
                                                        max_concurrency=64), adapter_for("llamacpp")) for i in range(2)}
    spec = ModelAlias(backends=tuple(backends), strategy=strategy)
    router = Router(backends, {"m": spec}, 1.0)  # type: ignore[arg-type]
    for entry in router._aliases.values():
        if hasattr(entry.strategy, "_rng"):
            entry.strategy._rng.seed(seed)  # its exploration, the same each run
    learner = router.learner
    if per_slot or published:
        # As the gateway's discovery reads llama.cpp's /props (total_slots) before the first request.
        for state in router.states.values():
            state.model.set_reported_slots(slots)
    servers = [_Server(1.0), _Server(slow)]
    for s in servers:
        s.held, s.used, s.taken = [None] * slots, [0.0] * slots, [None] * slots
    rng = random.Random(seed)
    burst_rng = random.Random(f"burst {seed}")
    systems = [f"[s{seed} policy {i}] " + " ".join(rng.choice(WORDS) for _ in range(300)) + "." for i in range(shared)]
    done: list[tuple[float, ...]] = []
    events: list[tuple[float, int, int]] = []  # (at, tie, server, or -1 for an arrival, -2 a burst's)
    tie = 0
    with _virtual_clock() as box:
        burst_end = box[0] + burst_s
        bursting = 0  # the burst's requests not yet ended

        replayed = 0  # with `replay`: its arrivals sent so far

        def schedule(t: float) -> None:
            nonlocal tie
            if replay:  # a real run's arrival times (from the arrivals' start) and prompt lengths
                for at, _words in replay:
                    tie += 1
                    heapq.heappush(events, (t + at, tie, -1))
                return
            for _ in range(requests):
                t += rng.expovariate(rate)
                tie += 1
                heapq.heappush(events, (t, tie, -1))

        sent = min(closed, requests)  # with `closed`: requests sent (or scheduled) so far
        if burst_s > 0:
            for _ in range(clients):
                tie += 1
                heapq.heappush(events, (box[0], tie, -2))
        elif closed:
            for _ in range(min(closed, requests)):
                tie += 1
                heapq.heappush(events, (box[0], tie, -1))
        else:
            schedule(box[0])

        def start_step(s: _Server, i: int, at: float) -> None:
            nonlocal tie
            new = [r for r in s.slots if r.first is None]
            decoding = [r for r in s.slots if r.first is not None]
            s.busy = bool(new or decoding)
            if not s.busy:
                return
            took = sum(r.uncached for r in new) * PER_TOKEN_S
            if decoding:
                took += TPOT_S * (1 + GROWTH * (len(decoding) - 1))
                if context:
                    # Each decoding slot's step reads its whole context (--context).
                    took += TPOT_S * context * sum(r.ctx.prompt_tokens + r.out for r in decoding) / 1000
            s.step = new + decoding
            tie += 1
            heapq.heappush(events, (at + took * s.speed, tie, i))

        while events:
            at, _, i = heapq.heappop(events)
            box[0] = at
            if i <= -10:
                pass  # a held request's wait limit (per slot): checked below
            elif i < 0:
                burst = i == -2
                bursting += burst
                # The burst's prompts come from a stream of their own: a burst runs as long as each strategy's
                # answers take, and drawn from `rng` its prompts shifted every arrival after it, so each
                # strategy met other arrivals and prompts (--burst's runs were not paired by seed).
                draw = burst_rng if burst else rng
                if shared:
                    system = draw.choice(systems)
                else:
                    if replay and not burst:
                        words = replay[replayed][1]
                        replayed += 1
                    elif spread:  # bench/real_backends.py's mixed lengths: 20-80 words, or 200-800
                        words = draw.randint(20, 80) if draw.random() < 0.5 else draw.randint(200, 800)
                    else:
                        words = 30 if mixed and draw.random() < 0.5 else 300
                    system = f"[s{seed} {draw.random()}] " + " ".join(draw.choice(WORDS) for _ in range(words)) + "."
                body = orjson.dumps({"model": "m", "stream": True, "max_tokens": output, "messages": [
                    {"role": "system", "content": system}, {"role": "user", "content": " ".join(draw.choice(WORDS) for _ in range(8))}]})
                ctx = with_policy(route_context(CHAT.parse(body)), spec)
                lease = _drive(router.acquire("m", ctx=ctx))
                k = int(lease.state.name[1:])
                s = servers[k]
                hit = system in s.cache and not per_slot  # per slot: decided when a slot takes it
                if shared and not per_slot:
                    if hit:
                        s.cache.remove(system)
                    s.cache = [*s.cache, system][-cache:]
                reused = round(ctx.prompt_tokens * (0.9 if hit else TEMPLATE_SHARE))
                # What the gateway records: the forecast, and the estimate its learner reads (an A/B's older
                # tree has neither: its lease has no forecast, its record the estimate as its prediction).
                told = {"predicted": lease.forecast, "booked": lease.estimate} if hasattr(lease, "forecast") else {
                    "predicted": lease.estimate}
                rec = AttemptRecord(len(done), "m", lease.state.name, "llamacpp", "h", 1, "m", True, at,
                                    load=lease.state.inflight, prefix=lease.prefix, **told)
                r = _Req(lease, rec, ctx, at, ctx.prompt_tokens - reused, reused, burst=burst, system=system)
                leader = lease.prefix.leader if lease.prefix is not None else None
                if per_slot and lease.burst_wait_s and leader is not None and not leader.is_set():
                    # The gateway holds it back for a sibling's copy of its prefix (app/dispatch's burst
                    # wait): until the copy is computed, then until it is free or the wait's limit. Released
                    # at the limit counted from its arrival instead, a request held behind a copy queued on
                    # a busy server was sent before the copy was computed and took another slot cold.
                    first_at, ttft = getattr(leader, "first_token_at", math.inf), getattr(leader, "ttft_s", math.inf)
                    overdue = (first_at + max(ttft, lease.burst_wait_s)
                               if lease.state.model.prefill.samples and math.isfinite(first_at) else math.inf)
                    held = _Held(r, leader, lease.burst_wait_s, overdue)
                    s.waiting.append(held)
                    if math.isfinite(overdue):  # checked then (and when the copy is computed, below)
                        tie += 1
                        heapq.heappush(events, (overdue, tie, -10 - k))
                else:
                    _send(r)
                    s.queue.append(r)
            else:
                s = servers[i]
                for r in s.step:
                    if r.first is None:
                        r.first = r.rec.first_event = at
                        r.lease.prefilled()
                        r.lease.first_token()
                        learner.first_token(r.rec, r.ctx.prompt_tokens)
                        r.out = 1
                    else:
                        r.out += 1
                        if r.out % PROGRESS_EVENTS == 0 and r.out < output:
                            last = r.rec.progress if r.rec.progress[1] else (1, r.rec.first_event)
                            r.rec.progress = (r.out, at)
                            r.lease.progress(r.out)
                            learner.progress(r.rec, r.lease.state, last, r.out, at)
                    if r.out >= output:
                        s.slots.remove(r)
                        if r.slot >= 0:
                            s.taken[r.slot], s.used[r.slot] = None, at
                        r.rec.end = at
                        r.rec.report = BackendReport(prefill_s=r.first - (r.slot_at or r.sent), decode_s=at - r.first,
                                                     prompt_tokens=r.ctx.prompt_tokens, output_tokens=output,
                                                     prompt_cached=r.reused, source="llamacpp")
                        r.lease.release()
                        # A tree from before Router.report judged a lease's outcome (an A/B) is told its backend.
                        router.report(r.lease if hasattr(r.lease, "predicted_wait_s") else r.lease.state, None)
                        # The batch its decode had beside it, from its lease (a tree from before leases
                        # measured it, in an A/B, is fed as it was).
                        beside = (r.lease.beside_s,) if hasattr(r.lease, "beside_s") else ()
                        learner.learn(r.rec, r.ctx.prompt_tokens, output, r.ctx.prefix, r.lease.shape, *beside)
                        p = r.rec.predicted
                        done.append((r.first - r.sent, at - r.sent, p.ttft_s, p.e2e_s, r.sent, float(r.burst),
                                     r.reused / r.ctx.prompt_tokens, r.ctx.prompt_tokens, float(i)) if detail
                                    else (r.first - r.sent, at - r.sent))
                        if closed and sent < requests:
                            # Its client thinks, then sends its next request (the others are in flight or thinking).
                            tie += 1
                            heapq.heappush(events, (at + rng.expovariate(1 / think), tie, -1))
                            sent += 1
                        if r.burst:
                            bursting -= 1
                            if at < burst_end:
                                tie += 1
                                heapq.heappush(events, (at, tie, -2))
                            elif not bursting:
                                schedule(at)
                s.step = []
                s.busy = False
            k = int(i if i >= 0 else -10 - i if i <= -10 else lease.state.name[1:])
            s = servers[k]
            for w in list(s.waiting):
                computed = w.computed_at is not None
                if not computed and hasattr(w.req.lease, "hold_limit") and getattr(w.copy, "computed", None) is not None \
                        and w.copy.computed.is_set():
                    # The limit as the gateway reads it once the copy is computed (a tree from before
                    # Lease.hold_limit, in an A/B, holds as it did).
                    w.limit_s = w.req.lease.hold_limit(w.limit_s)
                if w.due(at):
                    s.waiting.remove(w)
                    _send(w.req)
                    s.queue.append(w.req)
                elif not computed and w.computed_at is not None:
                    tie += 1
                    heapq.heappush(events, (w.computed_at + w.limit_s, tie, -10 - k))
            while len(s.slots) < slots and s.queue:
                r = s.queue.pop(0)
                r.slot_at = at
                if per_slot:
                    # llama.cpp's choice: the free slot whose last prompt this one repeats, else the least
                    # recently used free one, whose prompt it then replaces.
                    free = [j for j in range(slots) if s.taken[j] is None]
                    j = next((j for j in free if s.held[j] == r.system), min(free, key=s.used.__getitem__))
                    hit = s.held[j] == r.system
                    if host_cache and not hit:
                        # llama.cpp saves the slot's prompt to host memory before it is overwritten, and
                        # moves the new one's prompt from there into the slot if it was kept.
                        if (gone := s.held[j]) is not None and gone not in s.stored:
                            s.stored.append(gone)
                        if r.system in s.stored:
                            s.stored.remove(r.system)
                            hit = True
                    s.held[j], s.taken[j], r.slot = r.system, r, j
                    r.reused = round(r.ctx.prompt_tokens * (0.9 if hit else TEMPLATE_SHARE))
                    r.uncached = r.ctx.prompt_tokens - r.reused
                # llama.cpp sends a stream's headers when a slot takes it (the wait before is queue).
                r.rec.headers = at + NET_S
                s.slots.append(r)
            if not s.busy:
                start_step(s, k, at)
    return done


def _send(r: _Req) -> None:
    """The gateway sends the request on (its hold over, if it had one: Lease.wait_for_prefix's end). A tree
    from before Lease.sent_on, in an A/B, counts no hold."""
    if hasattr(r.lease, "sent_on"):
        r.lease.sent_on()


def _pct(v: list[float], p: float) -> float:
    return sorted(v)[min(len(v) - 1, int(p / 100 * len(v)))]


def _interpolated(v: list[float], p: float) -> float:
    """The p-th percentile as bench/real_backends.py reads one run (bench/harness.py's percentile: linear
    interpolation), in seconds. harness is not imported: it brings HTTP and Redis clients a simulation
    does not use."""
    v = sorted(v)
    k = (len(v) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="latency_aware,least_inflight,round_robin",
                    help="NAME or NAME@DIR (that strategy's router from the checkout DIR)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--requests", type=int, default=400, help="per seed")
    ap.add_argument("--rate", type=float, default=0.65, help="arrivals a second (2 equal servers: ~1 req/s of cold prompts)")
    ap.add_argument("--shared", type=int, default=0, help="K shared system prompts (0: every prompt unique)")
    ap.add_argument("--cache", type=int, default=2, help="system prompts each server keeps (--shared)")
    ap.add_argument("--slow", type=float, default=1.0, help="the second server this many times slower")
    ap.add_argument("--mixed", action="store_true", help="half the prompts 10x shorter")
    ap.add_argument("--spread", action="store_true",
                    help="mixed lengths as bench/real_backends.py draws them: 20-80 words or 200-800 (implies --mixed)")
    ap.add_argument("--replay", default=None,
                    help="a bench/real_backends.py --dump: its first run's arrival times and prompt lengths (every seed)")
    ap.add_argument("--output", type=int, default=OUTPUT, help="tokens an answer (bench/real_backends.py: 24)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--per-slot", action="store_true",
                    help="each slot keeps only its last prompt (llama.cpp --cache-ram 0), not each server its last --cache")
    ap.add_argument("--published-slots", action="store_true",
                    help="the servers publish their slots (llama.cpp's /props, which the gateway's discovery reads; "
                         "--per-slot implies it): without it the gateway learns them from the waits it sees")
    ap.add_argument("--host-cache", action="store_true",
                    help="with --per-slot: a prompt a slot gives up is kept in host memory (llama.cpp's default --cache-ram)")
    ap.add_argument("--clients", type=int, default=0,
                    help="closed loop: this many clients start together, each sending its next request a think time "
                         "after its answer, --requests in all (bench/prefix_routing.py's --clients; 0: open loop at --rate)")
    ap.add_argument("--think", type=float, default=None, help="closed loop: mean think time (default: clients / --rate)")
    ap.add_argument("--burst", type=float, default=0.0, help="seconds of closed loop (8 clients) before the arrivals")
    ap.add_argument("--context", type=float, default=0.0,
                    help="a decoding slot's step costs this many TPOTs more per 1,000 tokens of its context (0: none)")
    ap.add_argument("--after", type=int, default=8, help="with --burst: the arrivals whose prediction error is printed apart")
    ap.add_argument("--per-run", action="store_true",
                    help="also each seed's figures as bench/real_backends.py reads one run (p50/p99 of its arrivals), "
                         "against least_inflight's on the same seed: the median ratio and the share of seeds it loses")
    ap.add_argument("--oracle", action="store_true",
                    help="with --per-run, unique prompts and at most 14 arrivals a seed: also every placement of each seed's "
                         "arrivals on these servers, and the least p99 TTFT and E2E any of them reaches")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one strategy, JSON out
    args = ap.parse_args()
    if args.replay and args.clients:
        ap.error("--replay plays the dump's arrival times: it is open loop, not --clients")
    if args.oracle and (not args.per_run or args.shared or args.clients or args.slots < 1):
        ap.error("--oracle reads each seed as one run (--per-run) of unique prompts, open loop")
    if args.per_run and not args.one and "least_inflight" not in args.strategies.split(","):
        # Without it --per-run (and --oracle) printed nothing: both read each seed against least_inflight's.
        ap.error("--per-run reads each seed against least_inflight's: add least_inflight to --strategies")
    args.mixed = args.mixed or args.spread or bool(args.replay)
    replay = None
    if args.replay:
        first_run = next(iter(orjson.loads(Path(args.replay).read_bytes())["requests"].values()))
        replay = [(r["at"], r["words"]) for r in first_run]
        replay = sorted(replay[:next((i for i in range(1, len(replay)) if replay[i][0] < replay[i - 1][0]), len(replay))])
    runs = lambda s: [run(s, seed, args.requests, args.rate, args.shared, args.cache, args.slow, args.mixed, args.slots,
                          burst_s=args.burst, detail=True, context=args.context, per_slot=args.per_slot,
                          host_cache=args.host_cache, closed=args.clients, published=args.published_slots,
                          think=args.think if args.think is not None else args.clients / args.rate,
                          spread=args.spread, output=args.output, replay=replay)
                      for seed in range(args.seeds)]
    if args.one:
        sys.stdout.buffer.write(orjson.dumps(runs(args.one)))
        return
    # SIGTERM ends this run as Ctrl-C does (bench/harness.py's stop_on_signals, not imported: a strategy's child
    # runs this file against another checkout): subprocess.run kills the strategy's child on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # Each seed's arrivals (the burst's requests left out), in the order they were sent: (TTFT, E2E, predicted
    # TTFT, predicted E2E, sent, 0).
    results: dict[str, list[list[tuple[float, ...]]]] = {}
    for label in args.strategies.split(","):
        name, _, tree = label.partition("@")
        argv = [a for a in sys.argv[1:] if not a.startswith("--strategies") and a != args.strategies]
        cwd = Path(tree) if tree else Path(__file__).resolve().parent.parent
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--one", name], cwd=cwd, check=True,
                             capture_output=True, env={**os.environ, "PYTHONPATH": str(cwd)}).stdout
        results[label] = [sorted((x for x in seed if not x[5]), key=lambda x: x[4]) for seed in orjson.loads(out)]
    traffic = (f"{len(replay)} arrivals replayed from {args.replay}" if replay
               else f"{args.rate} req/s, {args.requests} requests")
    print(f"llama.cpp-like sim: 2 servers x {args.slots} slots, {traffic} x {args.seeds} seeds"
          + (f", {args.shared} shared prompts (" + (("a prompt per slot" + (" and a host cache" if args.host_cache else ""))
                                                     if args.per_slot else f"cache {args.cache}") + ")"
             if args.shared else ", unique prompts")
          + ((", mixed lengths (20-80 / 200-800 words)" if args.spread else ", mixed lengths") if args.mixed else "")
          + (f", {args.output} tokens an answer" if args.output != OUTPUT else "") + (f", second server {args.slow:g}x slower" if args.slow > 1 else "")
          + (f", after a {args.burst:g} s closed-loop burst" if args.burst else "")
          + (f", closed loop: {args.clients} clients starting together" if args.clients else "")
          + (f", decode {args.context:g} TPOT slower per 1,000 context tokens" if args.context else ""))
    base = [k for k in ("least_inflight", "round_robin") if k in results]
    for label, seeds in results.items():
        tt = [x[0] for s in seeds for x in s]
        ee = [x[1] for s in seeds for x in s]
        line = (f"  {label:<28} TTFT mean {statistics.fmean(tt):6.3f} p50 {statistics.median(tt):6.3f} p99 {_pct(tt, 99):6.3f}"
                f"  E2E mean {statistics.fmean(ee):6.3f} p50 {statistics.median(ee):6.3f} p99 {_pct(ee, 99):6.3f} s"
                + (f"  cached {statistics.fmean(x[6] for s in seeds for x in s):.1%}" if args.shared else ""))
        if base:
            for k, col in (("TTFT", 0), ("E2E", 1)):
                ratios = [statistics.fmean(x[col] for x in s) / min(statistics.fmean(x[col] for x in results[b][j]) for b in base) - 1
                          for j, s in enumerate(seeds)]
                line += f"  | {k} vs best baseline per seed: median {statistics.median(ratios):+.1%}"
        first = next(iter(results))
        if label != first:
            # Paired with the first strategy on each seed (the same arrivals and prompts).
            for k, col in (("TTFT", 0), ("E2E", 1)):
                ratios = [statistics.fmean(x[col] for x in s) / statistics.fmean(x[col] for x in results[first][j]) - 1
                          for j, s in enumerate(seeds)]
                line += (f"  | {k} vs {first}: median {statistics.median(ratios):+.1%}, lower on"
                         f" {sum(r < 0 for r in ratios)} of {len(ratios)} seeds")
        print(line)
    if args.mixed:
        # Each class's medians and its share on the quick server (b0): the median of mixed traffic sits between
        # the classes, so a strategy that trades short answers for long ones shows here, not in the overall p50.
        print("by class (pooled over seeds): TTFT p50 / E2E p50 / E2E p90 s, quick share")
        for label, seeds in results.items():
            rows = [x for s in seeds for x in s]
            cut = statistics.median(x[7] for x in rows)
            parts = []
            for cls, members in (("short", [x for x in rows if x[7] < cut]), ("long", [x for x in rows if x[7] >= cut])):
                if members:
                    parts.append(f"{cls} {statistics.median(x[0] for x in members):6.3f} / {statistics.median(x[1] for x in members):6.3f}"
                                 f" / {_pct([x[1] for x in members], 90):6.3f} ({sum(x[8] == 0 for x in members) / len(members):.0%})")
            print(f"  {label:<28} " + ", ".join(parts))
    if args.per_run and "least_inflight" in results:
        _per_run(results, args.mixed)
        if args.oracle:
            _oracle(results, args.slow, args.slots, args.output, args.context)
    if args.burst:
        print(f"prediction error (median signed / absolute, pooled over seeds): the first {args.after} arrivals after the"
              " burst; the rest")
        for label, seeds in results.items():
            early = [x for s in seeds for x in s[:args.after]]
            rest = [x for s in seeds for x in s[args.after:]]
            print(f"  {label:<28} first {args.after}: {_errors(early)}; the rest: {_errors(rest)}")
    else:
        print("prediction error (median signed / absolute, pooled over seeds)")
        for label, seeds in results.items():
            print(f"  {label:<28} {_errors([x for s in seeds for x in s])}")


def _per_run(results: dict[str, list[list[tuple[float, ...]]]], mixed: bool) -> None:
    """Each seed read as one real run is (bench/real_backends.py: p50 and p99 by linear interpolation over its
    arrivals, and on mixed lengths each class's E2E p50), each strategy's figure over least_inflight's on the
    same seed: the median of those ratios and the share of seeds where it is over 1 (loses). A real run of ~10
    requests is one such seed: its medians sit between the classes and turn on one or two placements."""
    cut = statistics.median(x[7] for seeds in results.values() for s in seeds for x in s) if mixed else math.inf

    def figures(rows: list[tuple[float, ...]]) -> dict[str, float]:
        out = {f"{k} p{p}": _interpolated([x[col] for x in rows], p) for k, col in (("TTFT", 0), ("E2E", 1)) for p in (50, 99)}
        if mixed:
            for cls, members in (("short", [x for x in rows if x[7] < cut]), ("long", [x for x in rows if x[7] >= cut])):
                if members:
                    out[f"{cls} E2E p50"] = _interpolated([x[1] for x in members], 50)
        return out

    base = [figures(s) for s in results["least_inflight"]]
    print("per run (each seed as one real run), against least_inflight on the same seed: median ratio [share of seeds lost]")
    for label, seeds in results.items():
        if label == "least_inflight":
            continue
        mine = [figures(s) for s in seeds]
        parts = []
        for k in dict.fromkeys(k for b in base for k in b):  # every seed's (the first may lack a class)
            ratios = [m[k] / b[k] for m, b in zip(mine, base) if k in m and k in b and b[k] > 0]
            if ratios:
                parts.append(f"{k} {statistics.median(ratios):.2f}x [{sum(r > 1 for r in ratios) / len(ratios):.0%}]")
        print(f"  {label:<28} " + ", ".join(parts))


def _placed(arrivals: list[tuple[float, float]], placement: tuple[int, ...], slow: float, slots: int, output: int,
            context: float = 0.0) -> tuple[list[float], list[float]]:
    """Each arrival's (TTFT, E2E) with arrival i (its time, its prompt's tokens) sent to server placement[i],
    both servers idle at first: `run`'s servers for unique prompts (one step at a time, every new slot's
    uncached prompt plus one token of each decoding slot; slots taken in the order requests came, at a
    step's end or on arrival at an idle server), without a router. It times a placement as `run` does."""
    n = len(arrivals)
    ttft, e2e = [0.0] * n, [0.0] * n
    for server, speed in ((0, 1.0), (1, slow)):
        mine = [i for i in range(n) if placement[i] == server]
        k, at = 0, 0.0
        queue: list[int] = []
        running: list[list[int]] = []  # [arrival, tokens out]
        while k < len(mine) or queue or running:
            while k < len(mine) and arrivals[mine[k]][0] <= at:
                queue.append(mine[k])
                k += 1
            if not queue and not running:
                at = arrivals[mine[k]][0]
                continue
            while queue and len(running) < slots:
                running.append([queue.pop(0), 0])
            new = [r for r in running if not r[1]]
            decoding = [r for r in running if r[1]]
            took = sum(arrivals[i][1] - round(arrivals[i][1] * TEMPLATE_SHARE) for i, _ in new) * PER_TOKEN_S
            if decoding:
                took += TPOT_S * (1 + GROWTH * (len(decoding) - 1))
                if context:
                    took += TPOT_S * context * sum(arrivals[i][1] + out for i, out in decoding) / 1000
            at += took * speed
            for r in list(running):
                r[1] += 1
                if r[1] == 1:
                    ttft[r[0]] = at - arrivals[r[0]][0]
                if r[1] >= output:
                    e2e[r[0]] = at - arrivals[r[0]][0]
                    running.remove(r)
    return ttft, e2e


def _oracle(results: dict[str, list[list[tuple[float, ...]]]], slow: float, slots: int, output: int,
            context: float) -> None:
    """Every placement of each seed's arrivals on its servers (`_placed`), read as `_per_run` reads a run: the
    least p99 TTFT and p99 E2E any of them reaches, against least_inflight's; the share of seeds where some
    placement is at most 0.7x least_inflight's p99 TTFT and 0.85x its p99 E2E (issue 24's aims for one run),
    and each strategy's share and its p99s over the least reachable. A seed no placement meets the aims on
    is lost whatever the router does; its tail is set by the arrivals, not by routing."""
    def p99(v: list[float]) -> float:
        return _interpolated(v, 99)

    base = results["least_inflight"]
    if any(len(s) > 14 for s in base):
        print("oracle: skipped (over 14 arrivals a seed: 2^n placements)")
        return
    reach: list[bool] = []
    lis: list[tuple[float, float]] = []  # least_inflight's p99 TTFT and E2E, each seed
    least: list[tuple[float, float]] = []  # the least reachable, each seed
    for rows in base:
        arrivals = [(x[4] - rows[0][4], x[7]) for x in rows]
        li = (p99([x[0] for x in rows]), p99([x[1] for x in rows]))
        best_t = best_e = math.inf
        met = False
        for placement in itertools.product(range(2), repeat=len(arrivals)):
            ttft, e2e = _placed(arrivals, placement, slow, slots, output, context)
            t, e = p99(ttft), p99(e2e)
            best_t, best_e = min(best_t, t), min(best_e, e)
            met = met or (t <= 0.7 * li[0] and e <= 0.85 * li[1])
        reach.append(met)
        lis.append(li)
        least.append((best_t, best_e))

    def p90(v: list[float]) -> float:  # of the seeds' ratios, nearest rank (of 2 seeds the larger, not the smaller)
        return sorted(v)[math.ceil(0.9 * len(v)) - 1]

    print(f"oracle (every placement of each seed's arrivals): the aims (p99 TTFT <= 0.7x, p99 E2E <= 0.85x least_inflight's)"
          f" reachable on {sum(reach) / len(reach):.0%} of seeds; least p99 over least_inflight's, median "
          f"{statistics.median(b[0] / li[0] for b, li in zip(least, lis)):.2f}x TTFT, "
          f"{statistics.median(b[1] / li[1] for b, li in zip(least, lis)):.2f}x E2E")
    for label, seeds in results.items():
        if label == "least_inflight":
            continue
        mine = [(p99([x[0] for x in s]), p99([x[1] for x in s])) for s in seeds]
        meets = [m[0] <= 0.7 * li[0] and m[1] <= 0.85 * li[1] for m, li in zip(mine, lis)]
        over_t = [m[0] / b[0] for m, b in zip(mine, least)]
        over_e = [m[1] / b[1] for m, b in zip(mine, least)]
        print(f"  {label:<28} meets both on {sum(meets) / len(meets):.0%} of seeds ({sum(m and r for m, r in zip(meets, reach))} of "
              f"the {sum(reach)} reachable); p99 over the least reachable, median {statistics.median(over_t):.2f}x TTFT "
              f"(p90 {p90(over_t):.2f}x), {statistics.median(over_e):.2f}x E2E (p90 {p90(over_e):.2f}x)")


def _errors(rows: list[tuple[float, ...]]) -> str:
    """Median signed and absolute relative error of the predicted TTFT and E2E (positive: over-predicted)."""
    out = []
    for name, measured, predicted in (("TTFT", 0, 2), ("E2E", 1, 3)):
        signed = [(x[predicted] - x[measured]) / x[measured] for x in rows if x[measured] > 0]
        out.append(f"{name} {statistics.median(signed):+.0%} / {statistics.median(abs(e) for e in signed):.0%}"
                   if signed else f"{name} n/a")
    return ", ".join(out)


if __name__ == "__main__":
    main()
