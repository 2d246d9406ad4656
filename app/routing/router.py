"""Choose a backend for a model alias and hold one of its concurrency slots until the call ends."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from app.admission.context import QueueContext
from app.admission.wait_queue import Waiter, WaitQueue
from app.config import BreakerConfig, ModelAlias
from app.deadline import NO_DEADLINE, Deadline
from app.errors import (
    GatewayError,
    NoBackendAvailable,
    Overloaded,
    UpstreamTimeout,
    retry_after_s,
)
from app.record import RouteDecision
from app.routing.choice import SCORE_MEANING, RouteChoice
from app.routing.context import RouteContext
from app.routing.health import Breaker, BreakerState, Verdict, verdict
from app.routing.latency_aware import LatencyAware
from app.routing.latency_model import LatencyModel
from app.routing.learning import Learner
from app.routing.lease import Lease
from app.routing.memory import AliasMemory, RoutingMemory
from app.routing.output_length import OutputLengths
from app.routing.placement_feed import PlacementFeed
from app.routing.prefix_index import BackendPrefixes
from app.routing.prefix_routing import PrefixAware
from app.routing.slo import best_fit
from app.routing.state import BackendState, prefixes_for
from app.routing.strategies import LeastInflight, LowestLatency, PredictedLatency, RoundRobin, Strategy, Weighted
from app.upstream.client import Backend


@dataclass(slots=True)
class _Alias:
    states: tuple[BackendState, ...]
    strategy: Strategy
    turn: int = 0


def make_strategy(name: str, exploration: float | None = None, learned: AliasMemory | None = None) -> Strategy:
    """The alias's strategy; `exploration` (a share of placements) replaces the default of the strategies
    that explore (latency_aware, predicted_latency) and is ignored by the others. `learned`: what the
    alias's latency_aware strategy learned of its traffic before a config reload."""
    made = _STRATEGIES[name]
    kwargs = {"learned": learned} if made is LatencyAware else {}
    return made(exploration, **kwargs) if exploration is not None and name in _EXPLORING else made(**kwargs)


_STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "latency_aware": LatencyAware, "prefix_aware": PrefixAware,
    "round_robin": RoundRobin, "weighted": Weighted, "least_inflight": LeastInflight,
    "lowest_latency": LowestLatency, "predicted_latency": PredictedLatency}
_EXPLORING = frozenset({"latency_aware", "predicted_latency"})


class Router:
    def __init__(
        self, backends: dict[str, Backend], models: dict[str, ModelAlias], queue_timeout_s: float,
        breaker: BreakerConfig | None = None, latency: dict[str, LatencyModel] | None = None,
        queue: WaitQueue | None = None,
        prefixes: dict[str, BackendPrefixes] | None = None, scores_read: bool = True,
        memory: RoutingMemory | None = None, placements: PlacementFeed | None = None,
    ) -> None:
        """`memory`: what the router before a config reload learned (Router.memory); its backends' latency
        models and prefix indexes are taken where `latency` and `prefixes` do not name one. `placements`:
        where a lease tells the other gateway replicas the prefix its request computed (routing.share_prefixes)."""
        breaker = breaker or BreakerConfig()
        memory = memory or RoutingMemory()
        kept = memory.backends
        latency = latency if latency is not None else {name: memory.latency_model(name) for name in backends}
        if prefixes is None:
            prefixes = {name: prefixes_for(b.config) for name, b in backends.items()}
            for name in prefixes.keys() & kept.keys():
                prefixes[name] = kept[name].prefixes.configured_like(prefixes[name])
        self.states = {
            name: BackendState(b, b.config.max_concurrency, Breaker(breaker), latency[name], b.config.weight,
                               prefixes=prefixes[name])
            for name, b in backends.items()
        }
        self._aliases = {
            alias: _Alias(tuple(self.states[n] for n in spec.backends),
                          make_strategy(spec.strategy, spec.exploration, memory.aliases.get(alias)))
            for alias, spec in models.items()
        }
        # Ordered by priority, then fair share across tenants, then deadline: app/admission/wait_queue.py.
        self.queue = queue if queue is not None else WaitQueue()
        # Routing owns what it learns: attempts' outcomes and the load backends publish feed the models.
        # Answer lengths per alias and request shape: predicted at each decision, learned at each answer.
        self.outputs = memory.outputs if memory.outputs is not None else OutputLengths()
        self.learner = Learner(self.states, self.outputs, memory)
        for alias, entry in self._aliases.items():
            if isinstance(entry.strategy, LatencyAware):
                self.learner.reuse[alias] = entry.strategy.reuse
        self._queue_timeout_s = queue_timeout_s
        # Whether a placement's scores are read (its decision's trace span): off in a gateway that does not
        # trace, and a strategy then computes only what its pick needs (RouteContext.scored).
        self.scores_read = scores_read
        self.placements = placements

    def memory(self, keep: Collection[str]) -> RoutingMemory:
        """What this router learned, for the one a config reload builds: of the backends in `keep` (those
        configured again under the same name, URL and model), and of every alias and served model."""
        memory = self.learner.memory(keep)
        memory.aliases = {alias: AliasMemory(e.strategy.reuse, e.strategy.arrivals)
                          for alias, e in self._aliases.items() if isinstance(e.strategy, LatencyAware)}
        return memory

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
        ctx = self._for_decision(alias, ctx)  # the caller's value stays as it was
        if take_turn:
            ctx.scored = self.scores_read
            entry.turn += 1
            i, scores = entry.strategy.choose(pool, ctx, entry.turn)
        else:
            ctx.explore = False
            i, scores = entry.strategy.choose(pool, ctx, entry.turn + 1)
        i, met = best_fit(pool, ctx, i)
        return RouteChoice(alias, ctx, pool[i], {c.name: s for c, s in zip(pool, scores)}, not free, met)

    def score(self, alias: str, ctx: RouteContext, avoid: frozenset[str] | set[str] = frozenset()) -> tuple[str, dict[str, float]]:
        """What the alias's strategy would choose now and every candidate's score, without taking a slot."""
        choice = self.decide(alias, ctx, avoid)
        return (choice.state.name if choice.state else ""), choice.scores

    def strategy_name(self, alias: str) -> str:
        return self._aliases[alias].strategy.name

    async def acquire(self, alias: str, avoid: frozenset[str] | set[str] = frozenset(), ctx: RouteContext | None = None,
                      deadline: Deadline = NO_DEADLINE, queue: QueueContext | None = None) -> Lease:
        """A lease on the alias's chosen backend; waits in the wait queue when every backend is full,
        bounded by the queue timeout and the request's deadline.

        Backends in `avoid` (already failed for this request) and rate-limited ones are passed over
        while others remain; ejected ones always are. `queue` orders the wait (tenant, priority,
        deadline) and notes it for the request; None waits as an interactive request with no deadline.
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
            lease = Lease(self, state, choice.ctx, state.inflight, choice.scores)
            lease.shape = (alias, ctx.shape) if ctx.shape is not None else None
            state.inflight += 1
            state.breaker.on_chosen(now)
            return lease
        qc = queue
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
        queued_s = time.monotonic() - queued_at
        if qc is not None and qc.note is not None:
            qc.note("queued", queued_s, {"slipstream.backend": handed.name})
        ctx = self._for_decision(alias, ctx or RouteContext())
        # The slot was handed over with this request already counted in flight.
        lease = Lease(self, handed, ctx, handed.inflight - 1, queued_s=queued_s)
        lease.shape = (alias, ctx.shape) if ctx.shape is not None else None
        return lease

    def _for_decision(self, alias: str, ctx: RouteContext) -> RouteContext:
        """The decision's own context: a copy with the instant, a fresh map of the candidates' cached prefixes
        (the strategy and the lease fill it) and the answer length this alias's requests of this shape have had
        (none needed for an exact one)."""
        d = ctx.copy()
        d.now = time.monotonic()
        if d.cached is not None:
            d.cached = {}
        if d.shape is not None:
            d.expected_output = None if d.exact_output else self.outputs.predict(alias, d.shape, d.now)
        return d

    def report(self, lease: Lease, err: GatewayError | None) -> BreakerState | None:
        """Feed an attempt's outcome to its backend's health (what `verdict` makes of it, against the wait
        the lease predicted); returns the breaker's new state if it changed."""
        state = lease.state
        before = state.breaker.state
        seen = verdict(err, lease.predicted_wait_s)
        if seen is Verdict.PRICED_WAIT:
            state.breaker.inconclusive()
            return None
        state.model.observe_outcome(seen is Verdict.SOUND)
        if seen is Verdict.BUSY:
            # A backend that answers fast 429s must not look healthy, nor be ejected for being busy.
            assert err is not None
            state.limited_until = time.monotonic() + (retry_after_s(err) or 1.0)
        else:
            state.breaker.record(seen is Verdict.SOUND)
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
        ranked = lease.ranked_as
        return RouteDecision(alias, name, lease.state.name, at, end, candidates, reason,
                             {k: round(v[0], 6) for k, v in ranked.items()}, {k: round(v[1], 1) for k, v in ranked.items()})

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
