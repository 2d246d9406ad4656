"""Routing decisions pinned: a seeded script of requests (shared and unique prompts, streams and JSON,
targets, avoided backends), their answers (first tokens, progress, backend reports, errors and 429s),
releases and published load, replayed through a router of every strategy on a fake clock. Each
decision's pick, every candidate's score, the lease's prediction and prefix match, each question's
answer and the models learned at the end must equal what the router did before its per-request work was
cut (issue 24: the router must not add to the gateway's overhead; recorded from main at 628582b).

Re-record only for a change meant to alter decisions, and say so in its commit:

    .venv/bin/python -m tests.routing.test_pinned_decisions --record
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.config import BackendConfig, ModelAlias, PrefixPolicy
from app.dispatch.loop import route_context, with_policy
from app.errors import UpstreamStatus
from app.protocols.chat import CHAT
from app.record import AttemptRecord
from app.routing.latency_model import LatencyModel, Prior
from app.routing.router import Router
from app.routing.slo import LatencyTarget
from app.upstream.adapters import Adapter, BackendReport, ServerLoad, adapter_for

FIXTURE = Path(__file__).with_name("pinned_decisions.json")
STRATEGIES = ("latency_aware", "prefix_aware", "predicted_latency", "least_inflight", "round_robin")
STEPS = 700
# Every float agrees to this relative error (the same arithmetic, possibly regrouped); kept to 12 digits.
REL = 1e-9


def _short(x):
    if isinstance(x, float):
        return float(f"{x:.12g}")
    if isinstance(x, list):
        return [_short(v) for v in x]
    if isinstance(x, dict):
        return {k: _short(v) for k, v in x.items()}
    return x


@dataclass
class Backend:
    # The router reads the name, the configuration and the adapter: no network needed to decide.
    name: str
    config: BackendConfig
    adapter: Adapter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# name: (flavor, max_concurrency, weight, cost, prior)
BACKENDS = {
    "a": ("llamacpp", 4, 1.0, 1.0, Prior(slots=2, tpot_s=0.02, prefill_tokens_per_s=800.0)),
    "b": ("vllm", 64, 2.0, 2.0, Prior(prefill_tokens_per_s=8000.0)),
    "c": ("llamacpp", 64, 1.0, 0.5, Prior(slots=4, tpot_s=0.05, prefill_tokens_per_s=300.0, output_tokens=80.0)),
    "d": ("openai", 6, 0.5, 1.0, Prior()),
}
# What each backend really does, per request (seconds): the script's answers are drawn around these.
TRUE_TPOT = {"a": 0.015, "b": 0.01, "c": 0.06, "d": 0.03}
TRUE_PREFILL_PER_TOKEN = {"a": 0.001, "b": 0.0002, "c": 0.004, "d": 0.0005}


def _aliases(strategy: str) -> dict[str, ModelAlias]:
    return {
        "m": ModelAlias(backends=("a", "b", "c", "d"), strategy=strategy),
        "pair": ModelAlias(backends=("a", "c"), strategy=strategy, stream_objective="e2e",
                           prefix=PrefixPolicy(consistent_hashing=False, burst_wait_ms=500.0)),
        "slo": ModelAlias(backends=("b", "c", "d"), strategy=strategy, ttft_slo_ms=900.0, ttft_tolerance_ratio=0.2),
    }


def _router(strategy: str) -> Router:
    backends = {n: Backend(n, BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor=f, max_concurrency=cap,
                                            weight=w, cost=cost, prefix_cache_tokens=4096 if n == "b" else None),
                           adapter_for(f))
                for n, (f, cap, w, cost, _) in BACKENDS.items()}
    latency = {n: LatencyModel(prior) for n, (*_, prior) in BACKENDS.items()}
    router = Router(backends, _aliases(strategy), 1.0, latency=latency)  # type: ignore[arg-type]
    for k, entry in enumerate(router._aliases.values()):
        if hasattr(entry.strategy, "_rng"):
            entry.strategy._rng = random.Random(100 + k)  # exploration, seeded
    return router


def _bodies(rng: random.Random) -> list[str]:
    words = "account balance refund policy invoice customer payment schedule review escalate ticket".split()
    return ["", "You are terse.", *(" ".join(rng.choice(words) for _ in range(n)) for n in (40, 150, 400, 900))]


def _ctx(rng: random.Random, systems: list[str], alias: str):
    system = rng.choice(systems) if rng.random() < 0.8 else f"unique {rng.random()} " * rng.randrange(1, 60)
    body: dict = {"model": alias, "stream": rng.random() < 0.6,
                  "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"q{rng.randrange(50)}"}]}
    if rng.random() < 0.7:
        body["max_tokens"] = rng.choice((8, 16, 64, 200, 500))
    if rng.random() < 0.2:
        body["stop"] = ["\n"]
    req = CHAT.parse(orjson.dumps(body))
    target = LatencyTarget(ttft_s=rng.choice((0.05, 0.3, 2.0))) if rng.random() < 0.1 else None
    return route_context(req, target), body


def _f(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)


def _estimate(e) -> list | None:
    return None if e is None else [_f(e.queue_s), _f(e.ttft_s), _f(e.e2e_s), _f(e.decode_tokens)]


def _prefix(p) -> list | None:
    return None if p is None else [p.blocks, p.matched_tokens, p.tokens, p.ready_at, p.leader is not None, p.turnover]


def _drive(coro):
    """Run a coroutine that must not wait (the router's fast path: a free slot and no queue)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the script must never make a request wait for a slot")


class _Held:
    def __init__(self, alias, lease, record, ctx, body) -> None:
        self.alias, self.lease, self.record, self.ctx, self.body = alias, lease, record, ctx, body
        self.stage, self.events = "sent", 0


def replay(strategy: str, clock: Clock, seed: int = 24) -> list:
    """The script, run on a router of `strategy`: what it decided, predicted and learned, step by step."""
    rng = random.Random(seed)
    systems = _bodies(random.Random(seed + 1))
    router = _router(strategy)
    config = _aliases(strategy)
    out: list = []
    held: list[_Held] = []
    number = 0
    for step in range(STEPS):
        clock.t += rng.choice((0.0, 0.001, 0.01, 0.05, 0.2, 1.0, 5.0))
        roll = rng.random()
        if roll < 0.4 and len(held) < 20:
            alias = rng.choice(("m", "m", "m", "pair", "slo"))
            base, body = _ctx(rng, systems, alias)
            ctx = with_policy(base, config[alias])
            avoid = {rng.choice(config[alias].backends)} if rng.random() < 0.1 else set()
            if not any(s.has_slot for s in router.candidates(alias, avoid)):
                avoid = set()
            if not any(s.has_slot for s in router.candidates(alias, avoid)):
                out.append([step, "full", alias])
                continue
            lease = _drive(router.acquire(alias, avoid, ctx))
            lease.sent_on()  # the script sends every request at once: none is held back for a sibling's copy
            number += 1
            record = AttemptRecord(number, alias, lease.state.name, lease.state.backend.config.flavor, "h", 1, "m",
                                   bool(body["stream"]), clock.t, load=lease.state.inflight, predicted=lease.forecast,
                                   booked=lease.estimate, prefix=lease.prefix)
            held.append(_Held(alias, lease, record, ctx, body))
            out.append([step, "acquire", alias, lease.state.name, sorted(lease.scores.items()),
                        _estimate(lease.estimate), _prefix(lease.prefix), lease.burst_wait_s])
        elif roll < 0.75 and held:
            h = rng.choice(held)
            state, a = h.lease.state, h.record
            name = state.name
            if h.stage == "sent":
                # The answer begins: headers, then the first event, after a queue and a prefill.
                uncached = h.ctx.prompt_tokens - (h.lease.prefix.tokens if h.lease.prefix else 0.0)
                a.headers = clock.t - rng.uniform(0.0, 0.05)
                a.first_event = clock.t
                a.start = min(a.start, a.headers - 0.001)
                # Streamed upstream as dispatch streams it: a stream, or a JSON chat call that llama.cpp
                # and vLLM serve from an upstream stream.
                a.stream = state.reports_first_token(bool(h.body["stream"]), h.ctx.assembles)
                rng.random()  # the draw that chose the mode before it followed dispatch: the script's sequence stays
                if rng.random() < 0.15:
                    err = UpstreamStatus(f"{name} failed", status=rng.choice((500, 502, 429)))
                    if err.status == 429:
                        err.headers = {"retry-after": "2"}
                    a.end, a.error_type = clock.t, "upstream_error"
                    h.lease.release()
                    router.report(h.lease, err)
                    held.remove(h)
                    out.append([step, "failed", name, err.status])
                    continue
                if a.stream:
                    h.lease.prefilled()
                    h.lease.first_token()
                    router.learner.first_token(a, h.ctx.prompt_tokens)
                h.stage = "first"
                out.append([step, "first", name, round(uncached, 6)])
            elif h.stage == "first" and rng.random() < 0.5 and a.stream:
                h.events += rng.randrange(1, 20)
                a.progress = (h.events, clock.t)
                h.lease.progress(h.events)
                last = a.progress if a.progress[1] else (1, a.first_event)
                router.learner.progress(a, state, last, h.events, clock.t + 0.01)
                out.append([step, "progress", name, h.events])
            else:
                output = max(1, int((h.ctx.max_tokens or 120) * rng.uniform(0.3, 1.0)))
                a.end = max(clock.t, a.first_event + output * TRUE_TPOT[name] * rng.uniform(0.8, 1.3))
                prompt = max(1, h.ctx.prompt_tokens)
                cached = min(prompt, round(h.lease.prefix.tokens)) if h.lease.prefix and rng.random() < 0.7 else None
                if rng.random() < 0.5:
                    a.report = BackendReport(prefill_s=prompt * TRUE_PREFILL_PER_TOKEN[name],
                                             decode_s=(output - 1) * TRUE_TPOT[name], prompt_tokens=prompt,
                                             output_tokens=output, prompt_cached=cached, source="llamacpp")
                elif cached is not None:
                    a.report = BackendReport(prompt_tokens=prompt, prompt_cached=cached)
                h.lease.release()
                router.report(h.lease, None)
                got = router.learner.learn(a, h.ctx.prompt_tokens, output, h.ctx.prefix, h.lease.shape, h.lease.beside_s)
                held.remove(h)
                out.append([step, "done", name, output, got])
        elif roll < 0.85:
            name = rng.choice(tuple(BACKENDS))
            load = ServerLoad(slots=rng.choice((None, 2, 4)), waiting=rng.choice((None, 0.0, 1.0, 3.0)),
                              rtt_s=rng.choice((None, 0.002, 0.01)), prefix_cache_queries=float(step * 100),
                              prefix_cache_hits=float(step * rng.randrange(0, 100)))
            router.learner.server_load(name, load if rng.random() < 0.8 else None)
            out.append([step, "load", name, router.states[name].others_waiting])
        else:
            # A question, not a placement: what would be chosen, and what it predicts.
            alias = rng.choice(("m", "pair", "slo"))
            base, _ = _ctx(rng, systems, alias)
            ctx = with_policy(base, config[alias])
            choice = router.decide(alias, ctx)
            out.append([step, "ask", alias, choice.state.name if choice.state else None, sorted(choice.scores.items()),
                        choice.waits, choice.meets_target, _estimate(choice.estimate()), choice.predicted_s])
    now = clock.t
    learned = {}
    for name, s in router.states.items():
        learned[name] = {"model": s.model.snapshot(now), "booked": len(s.book), "inflight": s.inflight,
                         "uncached_inflight": s.uncached_inflight, "prefilling": s.prefilling,
                         "prefixes": s.prefixes.snapshot(), "others_waiting": s.others_waiting,
                         "breaker": s.breaker.state.value, "accuracy": router.learner.accuracy[name].snapshot(),
                         "errors": [sum(router.learner.accuracy[name].ttft), sum(router.learner.accuracy[name].e2e)]}
    reuse = {alias: [t.expected_share(now), t.expected_tokens(now)] for alias, t in sorted(router.learner.reuse.items())}
    out.append(["learned", learned, router.outputs.snapshot(now), reuse])
    return out


def _run_all(patch) -> dict:
    clock = Clock()
    patch(clock)
    return {s: _short(json.loads(json.dumps(replay(s, clock)))) for s in STRATEGIES}


def _same(got, want, where: str) -> None:
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, (int, float)) and isinstance(want, (int, float)), f"{where}: {got!r} != {want!r}"
        assert math.isclose(got, want, rel_tol=REL, abs_tol=1e-12), f"{where}: {got!r} != {want!r}"
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{k}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def test_every_decision_prediction_and_learned_figure_is_as_pinned(monkeypatch):
    got = _run_all(lambda clock: monkeypatch.setattr(time, "monotonic", clock))
    want = json.loads(FIXTURE.read_text())
    for strategy in STRATEGIES:
        assert len(got[strategy]) == len(want[strategy]), strategy
        for k, (g, w) in enumerate(zip(got[strategy], want[strategy])):
            _same(g, w, f"{strategy} step {w[0]}")


def test_the_script_makes_real_choices():
    # The pinned script is worth something only if it covers what the router decides on.
    want = json.loads(FIXTURE.read_text())
    picks = {r[3] for r in want["latency_aware"] if r[1] == "acquire"}
    kinds = {r[1] for r in want["latency_aware"] if isinstance(r[0], int)}
    warm = [r for r in want["latency_aware"] if r[1] == "acquire" and r[6] and r[6][0] > 0]
    waits = [r for r in want["latency_aware"] if r[1] == "acquire" and r[7] > 0]
    queued = [r for r in want["latency_aware"] if r[1] == "acquire" and r[5][0] > 0]
    assert picks == set(BACKENDS) and kinds >= {"acquire", "first", "progress", "done", "failed", "load", "ask"}
    # (48 warm placements since busy llama.cpp slot copies stopped counting as warm, 50+ before; 38 since
    # JSON calls report first tokens where dispatch streams them upstream, which changed the script's
    # sequence of events.)
    assert len(warm) > 30 and waits and len(queued) > 20


def _record() -> None:
    real = time.monotonic

    def patch(clock):
        time.monotonic = clock  # type: ignore[assignment]

    try:
        runs = _run_all(patch)
    finally:
        time.monotonic = real  # type: ignore[assignment]
    FIXTURE.write_text(json.dumps(runs, separators=(",", ":")) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")


if __name__ == "__main__" and "--record" in sys.argv:
    _record()
