"""Choose a backend for a model alias and hold one of its concurrency slots until the call ends."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from app.admission.context import CURRENT as QUEUE_CONTEXT
from app.admission.wait_queue import Waiter, WaitQueue
from app.config import BackendConfig, BreakerConfig, ModelAlias
from app.deadline import NO_DEADLINE, Deadline
from app.dispatch.decide import counts_against_backend, retry_after_s
from app.errors import GatewayError, NoBackendAvailable, Overloaded, UpstreamStatus, UpstreamTimeout
from app.record import RouteDecision
from app.routing.health import Breaker, BreakerState
from app.routing.latency_model import LatencyModel
from app.routing.learning import Learner
from app.routing.predict import Estimate, InflightBook, estimate, predict
from app.routing.prefix_index import BackendPrefixes
from app.routing.prefix_routing import PrefixMatch, burst_wait_s
from app.routing.prefix_routing import match as prefix_match
from app.routing.slo import best_fit
from app.routing.strategies import RouteContext, Strategy, make_strategy
from app.upstream.client import Backend


@dataclass(slots=True)
class BackendState:
    """Live per-backend state the router decides on."""

    backend: Backend
    capacity: int
    breaker: Breaker
    model: LatencyModel
    weight: float = 1.0
    inflight: int = 0
    # Set from a 429's Retry-After: other backends are preferred until then.
    limited_until: float = 0.0
    # The backend's own waiting count, from its /metrics (vLLM), when scraped.
    scraped_waiting: float | None = None
    wrr_current: float = 0.0
    # When each request in flight here is predicted to finish: the queue a new one would wait in.
    book: InflightBook = field(default_factory=InflightBook)
    # What the backend is believed to hold in its prompt cache, and the estimated prompt tokens it
    # still has to prefill for requests in flight (released at their first token).
    prefixes: BackendPrefixes = field(default_factory=BackendPrefixes)
    uncached_inflight: float = 0.0
    prefilling: int = 0  # requests in flight here not yet at their first token (each pays the fixed part)
    # When the prefill now under way began: the backend went busy, or the one before it reached its
    # first token. Time since then is work already done off the backlog.
    prefill_busy_since: float = 0.0

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def has_slot(self) -> bool:
        return self.inflight < self.capacity


@dataclass(slots=True)
class _Alias:
    states: tuple[BackendState, ...]
    strategy: Strategy
    turn: int = 0


class Lease:
    """One held slot on a backend; release it exactly once when the upstream call is over."""

    __slots__ = (
        "_keys",
        "_prefilled",
        "_prefilling",
        "_released",
        "_router",
        "_ticket",
        "_uncached",
        "burst_wait_s",
        "estimate",
        "prefix",
        "scores",
        "state",
    )

    def __init__(self, router: Router, state: BackendState, ctx: RouteContext, ahead: int,
                 scores: dict[str, float] | None = None) -> None:
        self._router, self.state, self._released = router, state, False
        self.scores = scores or {}  # what the strategy scored each candidate, for the record
        # What the prefix index believed this backend holds of the prompt when it was chosen.
        self.prefix: PrefixMatch | None = None
        self.burst_wait_s = 0.0
        self._keys: list[bytes] = []
        self._uncached = 0.0
        self._prefilled: asyncio.Event | None = None
        self._prefilling = False
        if ctx.prefix is not None and ctx.prefix.keys:
            self.prefix = prefix_match(state, ctx)
            if ctx.cached is not None:
                ctx.cached[state.name] = self.prefix
        # What the model predicted for this request on this backend, with the requests ahead of it.
        self.estimate: Estimate = estimate(state, ctx, ahead)
        self._ticket = state.book.add(ctx.now, self.estimate.ttft_s, self.estimate.decode_tokens)
        if self.prefix is not None:
            # Record the decision (the approximate index learns from routing); the blocks count as
            # computed from the predicted first token, or as soon as it really comes.
            self.burst_wait_s = burst_wait_s(self.prefix, ctx, state)
            assert ctx.prefix is not None  # a prefix match needs the prompt's blocks
            self._keys, self._prefilled = ctx.prefix.keys, asyncio.Event()
            # llama.cpp keeps a prompt's cache in the slot that ran it: a sibling reuses it only once
            # that slot is free again, so there the prefix is ready at the end, not the first token.
            ready = self.estimate.e2e_s if slot_scoped_cache(state) else self.estimate.ttft_s
            state.prefixes.record(self._keys, ctx.now, ctx.now + self.burst_wait_s + ready, self._prefilled)
            self._uncached = max(0.0, ctx.prompt_tokens - self.prefix.tokens)
            state.uncached_inflight += self._uncached
            if not state.prefilling:
                state.prefill_busy_since = ctx.now
            state.prefilling += 1
            self._prefilling = True

    @property
    def backend(self) -> Backend:
        return self.state.backend

    async def wait_for_prefix(self, limit_s: float) -> float:
        """Hold back (at most `limit_s`) while a sibling prefills this request's prefix here; returns
        the seconds waited."""
        leader = self.prefix.leader if self.prefix else None
        if leader is None or limit_s <= 0:
            return 0.0
        start = time.monotonic()
        try:
            await asyncio.wait_for(leader.wait(), limit_s)
        except TimeoutError:
            pass
        return time.monotonic() - start

    def prefilled(self, done: bool = False) -> None:
        """The first token came (or, with `done`, the call ended): the prompt is computed and no longer
        load, and siblings waiting for its prefix may go."""
        if self._prefilled is None or self._prefilled.is_set():
            return
        if self._uncached:
            self.state.uncached_inflight = max(0.0, self.state.uncached_inflight - self._uncached)
            self._uncached = 0.0
        if self._prefilling:
            self._prefilling = False
            self.state.prefilling = max(0, self.state.prefilling - 1)
            self.state.prefill_busy_since = time.monotonic()
        if done or not slot_scoped_cache(self.state):
            self._prefilled.set()
            self.state.prefixes.settle(self._keys, time.monotonic(), self._prefilled)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.prefilled(done=True)
            self.state.book.remove(self._ticket)
            self._router._release(self.state)


@dataclass(slots=True)
class RouteChoice:
    """One routing decision: the backend the alias's strategy picks now, every candidate's score, and
    what is predicted for the pick. Dispatch, the deadline check, hedging and /admin/route/explain all
    take this one decision, so none of them can explain or promise what the router would not do."""

    alias: str
    ctx: RouteContext
    state: BackendState | None  # None: no usable backend
    scores: dict[str, float]
    waits: bool  # every usable backend is at its concurrency limit: the request would wait for a slot
    meets_target: bool = True  # the pick is predicted to meet the request's latency target (if it has one)

    def estimate(self, state: BackendState | None = None) -> Estimate | None:
        """The latency model's estimate for the pick (or another candidate) now."""
        state = state or self.state
        return None if state is None else estimate(state, self.ctx)

    @property
    def predicted_s(self) -> float | None:
        """The pick's predicted TTFT (streams ranked by it) or end-to-end time, failures priced in."""
        return None if self.state is None else predict(self.state, self.ctx)


SCORE_MEANING = {
    "round_robin": "turn", "weighted": "weighted turn", "least_inflight": "in-flight count",
    "lowest_latency": "observed latency (s)", "predicted_latency": "predicted latency (s)",
    "prefix_aware": "predicted latency with the cached prefix (s), warmest within the sticky margin",
    "latency_aware": "predicted latency counting only uncached prompt tokens and the prompt tokens in flight (s)",
}


def slot_scoped_cache(state: BackendState) -> bool:
    """Whether the backend's prompt cache belongs to the slot that computed it (llama.cpp), rather than
    being shared by every running request (vLLM's, SGLang's and TGI's block caches)."""
    return state.backend.adapter.prompt_cache_per_slot


def prefixes_for(config: BackendConfig) -> BackendPrefixes:
    """A backend's prefix index, bounded by its configured cache size (else a default, then learned)."""
    size, ttl = config.prefix_cache_tokens, config.prefix_ttl_s
    return BackendPrefixes(float(size), ttl, fixed_capacity=True) if size else BackendPrefixes(ttl_s=ttl)


def _is_429(err: GatewayError) -> bool:
    return isinstance(err, UpstreamStatus) and err.status == 429


class Router:
    def __init__(
        self, backends: dict[str, Backend], models: dict[str, ModelAlias], queue_timeout_s: float,
        breaker: BreakerConfig | None = None, latency: dict[str, LatencyModel] | None = None,
        queue: WaitQueue | None = None,
        prefixes: dict[str, BackendPrefixes] | None = None,
    ) -> None:
        breaker = breaker or BreakerConfig()
        latency = latency if latency is not None else {name: LatencyModel() for name in backends}
        prefixes = prefixes if prefixes is not None else {name: prefixes_for(b.config) for name, b in backends.items()}
        self.states = {
            name: BackendState(b, b.config.max_concurrency, Breaker(breaker), latency[name], b.config.weight,
                               prefixes=prefixes[name])
            for name, b in backends.items()
        }
        self._aliases = {
            alias: _Alias(tuple(self.states[n] for n in spec.backends), make_strategy(spec.strategy))
            for alias, spec in models.items()
        }
        # Ordered by priority, then fair share across tenants, then deadline: app/admission/wait_queue.py.
        self.queue = queue if queue is not None else WaitQueue()
        # Routing owns what it learns: attempts' outcomes and the load backends publish feed the models.
        self.learner = Learner(self.states)
        self._queue_timeout_s = queue_timeout_s

    @property
    def queued(self) -> int:
        return sum(1 for w in self.queue if not w.future.done())

    def candidates(self, alias: str, avoid: frozenset[str] | set[str] = frozenset()) -> list[BackendState]:
        """The backends a call to `alias` may go to now, preferred ones first filtered in."""
        now = time.monotonic()
        usable = [s for s in self._aliases[alias].states if s.breaker.available(now)]
        usable = [s for s in usable if s.name not in avoid] or usable
        return [s for s in usable if s.limited_until <= now] or usable

    def decide(self, alias: str, ctx: RouteContext, avoid: frozenset[str] | set[str] = frozenset(),
               usable: list[BackendState] | None = None, take_turn: bool = False) -> RouteChoice:
        """The one routing decision: the strategy ranks the usable backends with a free slot (all usable
        ones when every one is full, for where the request would go once it waited). `take_turn` is set
        by acquire alone: asking what would be chosen never moves a round robin nor explores."""
        entry = self._aliases[alias]
        cands = usable if usable is not None else self.candidates(alias, avoid)
        if not cands:
            return RouteChoice(alias, ctx, None, {}, False, not ctx.target)
        free = [s for s in cands if s.has_slot]
        pool = free or cands
        ctx.now = time.monotonic()
        if take_turn:
            entry.turn += 1
            i, scores = entry.strategy.choose(pool, ctx, entry.turn)
        else:
            explore, ctx.explore = ctx.explore, False
            try:
                i, scores = entry.strategy.choose(pool, ctx, entry.turn + 1)
            finally:
                ctx.explore = explore
        i, met = best_fit(pool, ctx, i)
        return RouteChoice(alias, ctx, pool[i], {c.name: s for c, s in zip(pool, scores)}, not free, met)

    def score(self, alias: str, ctx: RouteContext, avoid: frozenset[str] | set[str] = frozenset()) -> tuple[str, dict[str, float]]:
        """What the alias's strategy would choose now and every candidate's score, without taking a slot."""
        choice = self.decide(alias, ctx, avoid)
        return (choice.state.name if choice.state else ""), choice.scores

    def strategy_name(self, alias: str) -> str:
        return self._aliases[alias].strategy.name

    async def acquire(self, alias: str, avoid: frozenset[str] | set[str] = frozenset(), ctx: RouteContext | None = None,
                      deadline: Deadline = NO_DEADLINE) -> Lease:
        """A lease on the alias's chosen backend; waits in the wait queue when every backend is full,
        bounded by the queue timeout and the request's deadline.

        Backends in `avoid` (already failed for this request) and rate-limited ones are passed over
        while others remain; ejected ones always are.
        """
        entry = self._aliases[alias]
        now = time.monotonic()
        usable = self.candidates(alias, avoid)
        if not usable:
            wait = min(s.breaker.seconds_until_available(now) for s in entry.states)
            raise NoBackendAvailable(
                f"every backend of model {alias!r} is ejected after failures",
                headers={"retry-after": str(max(1, math.ceil(wait)))},
            )
        free = [s for s in usable if s.has_slot]
        if free and not self.queue:
            ctx = ctx or RouteContext()
            choice = self.decide(alias, ctx, usable=free, take_turn=True)
            state = choice.state
            assert state is not None  # decide over a non-empty pool always picks one
            lease = Lease(self, state, ctx, state.inflight, choice.scores)
            state.inflight += 1
            state.breaker.on_chosen(now)
            return lease
        qc = QUEUE_CONTEXT.get()
        waiter = Waiter(frozenset(s.name for s in usable), asyncio.get_running_loop().create_future())
        if qc is not None:
            waiter.tenant, waiter.level, waiter.weight, waiter.deadline = qc.tenant, qc.priority.level, qc.weight, qc.deadline
        shed = self.queue.push(waiter)
        if shed is not None:
            shed.future.set_exception(_shed_error(alias))
        if free:
            self._hand_off_free()
        queued_at = time.monotonic()
        wait_s = deadline.cap(self._queue_timeout_s)
        try:
            handed: BackendState = await asyncio.wait_for(waiter.future, wait_s)
        except BaseException as exc:
            # A slot handed over in the same instant as a timeout or a client disconnect is given back.
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self._release(waiter.future.result())
            waiter.future.cancel()
            self.queue.discard(waiter)
            if qc is not None and qc.note is not None:
                qc.note("shed" if isinstance(exc, Overloaded) else "queued", time.monotonic() - queued_at,
                        {"slipstream.queue.outcome": "shed" if isinstance(exc, Overloaded) else "timeout"})
            if isinstance(exc, TimeoutError):
                if wait_s < self._queue_timeout_s:
                    raise UpstreamTimeout(
                        f"the request's deadline passed while waiting for a backend of model {alias!r}",
                        code="deadline_exceeded",
                    ) from None
                raise Overloaded(
                    f"every backend of model {alias!r} is at its concurrency limit",
                    headers={"retry-after": "1"},
                ) from None
            raise
        if qc is not None and qc.note is not None:
            qc.note("queued", time.monotonic() - queued_at, {"slipstream.backend": handed.name})
        ctx = ctx or RouteContext()
        ctx.now = time.monotonic()
        # The slot was handed over with this request already counted in flight.
        return Lease(self, handed, ctx, handed.inflight - 1)

    def report(self, state: BackendState, err: GatewayError | None) -> BreakerState | None:
        """Feed an attempt's outcome to the backend's health; returns the breaker's new state if it changed."""
        before = state.breaker.state
        state.model.observe_outcome(err is None or not (counts_against_backend(err) or _is_429(err)))
        if isinstance(err, UpstreamStatus) and err.status == 429:
            # A backend that answers fast 429s must not look healthy, nor be ejected for being busy.
            state.limited_until = time.monotonic() + (retry_after_s(err) or 1.0)
        elif err is None or not counts_against_backend(err):
            state.breaker.record(True)
        else:
            state.breaker.record(False)
        return state.breaker.state if state.breaker.state is not before else None

    def decision(self, alias: str, lease: Lease, at: float, end: float, avoided: set[str]) -> RouteDecision:
        """What this routing choice saw: each candidate's score or why it was passed over, and the choice."""
        entry = self._aliases[alias]
        now = time.monotonic()
        candidates: dict[str, float | str] = {}
        for s in entry.states:
            if s.name in lease.scores:
                candidates[s.name] = round(lease.scores[s.name], 6)
            elif not s.breaker.available(now):
                candidates[s.name] = "ejected"
            elif s.limited_until > now:
                candidates[s.name] = "rate_limited"
            elif s.name in avoided:
                candidates[s.name] = "failed_this_request"
            else:
                candidates[s.name] = "full"
        name = entry.strategy.name
        reason = f"lowest {SCORE_MEANING.get(name, 'score')}" + (f", avoiding {sorted(avoided)}" if avoided else "")
        return RouteDecision(alias, name, lease.state.name, at, end, candidates, reason)

    def all_limited(self, alias: str) -> bool:
        """Whether every usable backend of the alias is cooling down after a 429."""
        now = time.monotonic()
        return all(s.limited_until > now for s in self._aliases[alias].states if s.breaker.available(now))

    def _release(self, state: BackendState) -> None:
        # A freed slot goes straight to the waiter the queue puts first, still counted in flight.
        w = self.queue.pop_for(state.name)
        if w is not None:
            w.future.set_result(state)
            return
        state.inflight -= 1

    def _hand_off_free(self) -> None:
        for s in self.states.values():
            while s.has_slot:
                w = self.queue.pop_for(s.name)
                if w is None:
                    break
                s.inflight += 1
                w.future.set_result(s)


def _shed_error(alias: str) -> Overloaded:
    """For a waiter pushed out of a full wait queue by a more important request."""
    return Overloaded(
        f"every backend of model {alias!r} is busy and the wait queue is full: this request's priority was shed",
        code="shed", headers={"retry-after": "1", "x-should-retry": "true"},
    )
