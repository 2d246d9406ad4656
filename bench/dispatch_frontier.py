"""The median against the tail on unequal servers: every dispatch rule in an idealised two-server queue.

Why this exists: on real llama.cpp servers (bench/real_backends.py --workload unequal) the default beats
least_inflight at p99 TTFT and E2E by 0.6x but reads level or up to 1.14x behind it at p50 E2E, and every rule
tried in the gateway that moved load off the quick server gave back the tail before it won the median
(bench/ROUTING.md, t35u). This asks the question without the gateway, its predictions or the box's noise: with
the servers' state known exactly, is there any dispatch rule, immediate or late-bound, that beats
least_inflight at the median and the tail at once?

The model: two servers with `--slots` slots each; the quick one serves a call's work at speed 1, the
throttled one at 1/`--slow`. Calls running together on one server share it as llama.cpp's batch does: each
runs at speed / (1 + (`--batch-slowdown` - 1) x (n - 1)) with n running. A call's work is uniform in
`--work` seconds (its time alone on the quick server), its first `--prefill` share before its first token.
Poisson arrivals at `--loads` of the two servers' capacity, `--seconds` long, `--schedules` seeds; every rule
sees the same schedules. Printed per load: each rule's median over schedules of its ratio to
least_inflight (p50 / p99 E2E, p99 TTFT, mean E2E), the share of schedules whose p50 E2E it lost, its quick
share; then the frontier: the lowest p99 E2E among rules level with least_inflight or better at p50.

Rules:
- least_inflight: the server with fewer calls (running and queued), the quick one on a tie;
- least_inflight_free_slot: least_inflight, but never into the throttled server's queue;
- predicted_end: the server where the call's end comes first, from the exact remaining work (what the
  default estimates);
- spill_queued(T): the quick server unless T or more calls already queue there and the throttled one has a
  slot free;
- late_bound(T): calls wait at the gateway; a quick slot takes the first waiting call as it frees; a
  throttled slot takes one only while more than T wait (the central-queue threshold policy);
- late_bound_newest(T): late_bound(T), but a throttled slot takes the newest waiting call, not the first;
- late_bound_predicted: calls wait at the gateway; a free throttled slot takes the newest waiting call when
  its end there comes before its end waiting for a quick slot;
- weighted_count(a, b): the throttled server when a x its calls + b < the quick one's (least_inflight is
  a=1, b=0).

    python bench/dispatch_frontier.py                     # loads 0.5, 0.7, 0.85; 30 schedules of 45 s
    python bench/dispatch_frontier.py --slow 3 --batch-slowdown 1.5 --loads 0.7
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

QUICK, THROTTLED = 0, 1


@dataclass
class Call:
    arrived: float
    work: float  # seconds alone on the quick server
    left: float  # work not yet done
    to_first: float  # work left before the first token
    server: int = -1
    first_token: float | None = None
    ended: float | None = None


@dataclass
class Server:
    speed: float
    slots: int
    slowdown: float  # a call's slowdown per other call running beside it
    running: list[Call] = field(default_factory=list)
    queued: list[Call] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.running) + len(self.queued)

    @property
    def free(self) -> bool:
        return len(self.running) + len(self.queued) < self.slots

    def rate(self, n: int | None = None) -> float:
        n = len(self.running) if n is None else n
        return self.speed / (1 + self.slowdown * (n - 1)) if n else 0.0

    def end_if_sent(self, call: Call, behind: int = 0) -> float:
        """Seconds from now to `call`'s end if sent here after `behind` more calls than queue now: the
        slot it would take frees when the calls ahead end at a full batch's rate, then it runs at one."""
        full = self.rate(self.slots)
        ahead = len(self.queued) + behind
        if len(self.running) + ahead < self.slots:
            return call.left / self.rate(min(self.slots, len(self.running) + ahead + 1))
        frees = sorted(c.left / full for c in self.running)
        queued = [c.left for c in self.queued] + [call.work] * behind
        for w in queued:  # each call ahead takes the next slot to free and holds it for its work
            frees[0] += w / full
            frees.sort()
        return frees[0] + call.left / full


class Rule:
    """A dispatch rule: `arrive` places (or holds) a new call; `assign` runs at every event to place held
    calls. Immediate rules never hold."""

    name = ""

    def arrive(self, call: Call, servers: list[Server], held: list[Call]) -> None:
        raise NotImplementedError

    def assign(self, servers: list[Server], held: list[Call]) -> None:
        return None


class Immediate(Rule):
    def __init__(self, name: str, pick: Callable[[Call, list[Server]], int]) -> None:
        self.name, self._pick = name, pick

    def arrive(self, call: Call, servers: list[Server], held: list[Call]) -> None:
        send(call, servers, self._pick(call, servers))


class LateBound(Rule):
    def __init__(self, name: str, throttled_takes: Callable[[list[Server], list[Call]], int | None]) -> None:
        self.name, self._throttled_takes = name, throttled_takes

    def arrive(self, call: Call, servers: list[Server], held: list[Call]) -> None:
        held.append(call)
        self.assign(servers, held)

    def assign(self, servers: list[Server], held: list[Call]) -> None:
        while held and servers[QUICK].free:
            send(held.pop(0), servers, QUICK)
        while held and servers[THROTTLED].free:
            i = self._throttled_takes(servers, held)
            if i is None:
                return
            send(held.pop(i), servers, THROTTLED)


def send(call: Call, servers: list[Server], i: int) -> None:
    call.server = i
    servers[i].queued.append(call)


def _spill_queued(t: int) -> Callable[[Call, list[Server]], int]:
    def pick(c: Call, s: list[Server]) -> int:
        return THROTTLED if s[THROTTLED].free and s[QUICK].calls >= s[QUICK].slots + t else QUICK
    return pick


def _weighted_count(a: float, b: float) -> Callable[[Call, list[Server]], int]:
    def pick(c: Call, s: list[Server]) -> int:
        return THROTTLED if a * s[THROTTLED].calls + b < s[QUICK].calls else QUICK
    return pick


def _over(t: int, newest: bool) -> Callable[[list[Server], list[Call]], int | None]:
    def takes(s: list[Server], h: list[Call]) -> int | None:
        return None if len(h) <= t else len(h) - 1 if newest else 0
    return takes


def _predicted_takes(s: list[Server], h: list[Call]) -> int | None:
    newest = h[-1]
    return len(h) - 1 if s[THROTTLED].end_if_sent(newest) < s[QUICK].end_if_sent(newest, len(h) - 1) else None


def rules() -> list[Rule]:
    out: list[Rule] = [
        Immediate("least_inflight", _weighted_count(1.0, 0.0)),
        Immediate("least_inflight_free_slot", lambda c, s: (
            THROTTLED if s[THROTTLED].free and s[THROTTLED].calls < s[QUICK].calls else QUICK)),
        Immediate("predicted_end", lambda c, s: min((QUICK, THROTTLED), key=lambda i: s[i].end_if_sent(c))),
    ]
    for t in (0, 1, 2):
        out.append(Immediate(f"spill_queued({t})", _spill_queued(t)))
        out.append(LateBound(f"late_bound({t})", _over(t, newest=False)))
        out.append(LateBound(f"late_bound_newest({t})", _over(t, newest=True)))
    out.append(LateBound("late_bound_predicted", _predicted_takes))
    for a in (0.5, 0.75, 1.25, 1.5, 2.0):
        for b in (-0.5, 0.0, 0.5, 1.0, 1.5):
            out.append(Immediate(f"weighted_count({a}, {b})", _weighted_count(a, b)))
    return out


@dataclass
class Shape:
    slots: int = 2
    slow: float = 2.5
    batch_slowdown: float = 1.35
    work: tuple[float, float] = (0.8, 1.2)
    prefill: float = 0.1
    seconds: float = 45.0

    def capacity(self) -> float:
        """Calls a second both servers finish with every slot busy."""
        per_call = sum(self.work) / 2
        full = 1 + (self.batch_slowdown - 1) * (self.slots - 1)
        return self.slots / full / per_call * (1 + 1 / self.slow)


def schedule(shape: Shape, load: float, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    rate = load * shape.capacity()
    at, out = 0.0, list[tuple[float, float]]()
    while True:
        at += rng.expovariate(rate)
        if at >= shape.seconds:
            return out
        out.append((at, rng.uniform(*shape.work)))


def simulate(rule: Rule, shape: Shape, arrivals: list[tuple[float, float]]) -> list[Call]:
    """Runs one schedule to its last call's end, event to event (an arrival, a first token, an end)."""
    slowdown = shape.batch_slowdown - 1
    servers = [Server(1.0, shape.slots, slowdown), Server(1 / shape.slow, shape.slots, slowdown)]
    held: list[Call] = []
    calls: list[Call] = []
    now, nxt = 0.0, 0
    while nxt < len(arrivals) or held or any(s.running or s.queued for s in servers):
        for s in servers:
            while s.queued and len(s.running) < s.slots:
                s.running.append(s.queued.pop(0))
        step = arrivals[nxt][0] - now if nxt < len(arrivals) else float("inf")
        for s in servers:
            r = s.rate()
            for c in s.running:
                step = min(step, (c.to_first if c.to_first > 0 else c.left) / r)
        for s in servers:
            r = s.rate()
            for c in s.running:
                c.left -= step * r
                if c.to_first > 0:
                    c.to_first -= step * r
                    if c.to_first <= 1e-12:
                        c.to_first, c.first_token = 0.0, now + step
            for c in [c for c in s.running if c.left <= 1e-12]:
                c.ended = now + step
                s.running.remove(c)
        now += step
        while nxt < len(arrivals) and arrivals[nxt][0] <= now + 1e-12:
            at, work = arrivals[nxt]
            nxt += 1
            call = Call(at, work, work, work * shape.prefill)
            calls.append(call)
            rule.arrive(call, servers, held)
        rule.assign(servers, held)
    return calls


@dataclass
class Figures:
    p50_e2e: float
    p99_e2e: float
    p99_ttft: float
    mean_e2e: float
    quick_share: float


def figures(calls: list[Call]) -> Figures:
    e2e = sorted((c.ended or 0) - c.arrived for c in calls)
    ttft = sorted((c.first_token or 0) - c.arrived for c in calls)
    return Figures(pct(e2e, 50), pct(e2e, 99), pct(ttft, 99), statistics.fmean(e2e),
                   sum(c.server == QUICK for c in calls) / len(calls))


def pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--slow", type=float, default=2.5, help="the throttled server's slowdown (x)")
    ap.add_argument("--batch-slowdown", type=float, default=1.35, help="a call's slowdown at a full batch of two")
    ap.add_argument("--work", type=float, nargs=2, default=(0.8, 1.2), help="a call's seconds alone, quick server")
    ap.add_argument("--prefill", type=float, default=0.1, help="share of a call's work before its first token")
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--loads", default="0.5,0.7,0.85", help="arrival rates as shares of capacity")
    ap.add_argument("--schedules", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--top", type=int, default=12, help="rules printed per load, best p99 E2E first")
    a = ap.parse_args(argv)
    shape = Shape(a.slots, a.slow, a.batch_slowdown, tuple(a.work), a.prefill, a.seconds)
    seeds = range(a.seed, a.seed + a.schedules)
    for load in (float(x) for x in a.loads.split(",")):
        runs = {r.name: [figures(simulate(r, shape, schedule(shape, load, s))) for s in seeds] for r in rules()}
        base = runs["least_inflight"]
        print(f"\nload {load:.2f} of capacity ({load * shape.capacity():.2f} calls/s), {a.schedules} schedules "
              f"of {a.seconds:.0f} s; medians of per-schedule ratios to least_inflight")
        print(f"{'rule':28s} {'p50 E2E':>8s} {'p99 E2E':>8s} {'p99 TTFT':>9s} {'mean E2E':>9s} "
              f"{'p50 lost':>9s} {'quick':>6s}")
        rows = []
        for name, figs in runs.items():
            ratio = {k: statistics.median(getattr(f, k) / getattr(b, k) for f, b in zip(figs, base))
                     for k in ("p50_e2e", "p99_e2e", "p99_ttft", "mean_e2e")}
            lost = sum(f.p50_e2e > b.p50_e2e for f, b in zip(figs, base)) / len(figs)
            quick = statistics.fmean(f.quick_share for f in figs)
            rows.append((name, ratio, lost, quick))
        shown = [r for r in rows if r[0] in ("least_inflight", "predicted_end") or not r[0].startswith("weighted")]
        shown += sorted((r for r in rows if r[0].startswith("weighted")), key=lambda r: r[1]["p99_e2e"])[:3]
        for name, ratio, lost, quick in shown[:a.top]:
            print(f"{name:28s} {ratio['p50_e2e']:7.2f}x {ratio['p99_e2e']:7.2f}x {ratio['p99_ttft']:8.2f}x "
                  f"{ratio['mean_e2e']:8.2f}x {lost:8.0%} {quick:6.0%}")
        level = [r for r in rows if r[1]["p50_e2e"] <= 1.0]
        best = min(level, key=lambda r: r[1]["p99_e2e"])
        print(f"frontier: of {len(level)} rules level with least_inflight or better at p50 E2E, the lowest p99 E2E "
              f"is {best[1]['p99_e2e']:.2f}x ({best[0]}, p99 TTFT {best[1]['p99_ttft']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
