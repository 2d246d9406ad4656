"""Route, attempt, retry, fall back: get an answer started, or fail naming every cause.

One loop acts on `app.dispatch.decide.decide`: after each failed attempt it retries on this alias (elsewhere if
it can, after the decided wait), falls back to the next alias the key may use, or gives up. Every
attempt has one owner (app.dispatch.attempt) from the moment its slot is leased. Nothing here runs after the
first byte reached the client: a stream that fails later is the relay's to report.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.admission.context import QueueContext
from app.admission.priority import PRIORITY_HEADER
from app.config import ModelAlias
from app.deadline import NO_DEADLINE, Deadline
from app.dispatch.attempt import Attempt
from app.dispatch.decide import Action, Situation, decide, is_poison
from app.dispatch.hedge import hedged
from app.dispatch.log import DispatchLog
from app.errors import (
    AllAttemptsFailed,
    GatewayError,
    TargetUnmeetable,
    UpstreamStatus,
    UpstreamTimeout,
    retry_after_s,
)
from app.protocols import ParsedRequest
from app.record import AttemptRecord, Event
from app.routing.context import RouteContext
from app.routing.output_length import shape_of
from app.routing.prefix_index import prompt_blocks
from app.routing.slo import NO_TARGET, LatencyTarget, for_alias
from app.routing.strategies import PREFIX_STRATEGIES
from app.upstream.attempt import EventStream, JsonReply
from app.upstream.client import streams_json

if TYPE_CHECKING:
    from app.gateway import Gateway
    from app.routing.lease import Lease
from app.upstream.collect import collect_json
from app.upstream.transport import UpstreamCall

# How many times a request whose sibling's copy of the prefix will not come is routed again before it is
# sent wherever it then lands: once covers a failed or stuck backend; more would chase a failing fleet.
_PREFIX_REROUTES = 1


@dataclass(slots=True)
class Dispatched:
    """An answer under way: a whole JSON reply, or a stream whose first event has arrived."""

    result: JsonReply | EventStream
    owner: Attempt  # the winning attempt: the pipeline ends it (app.dispatch.attempt)
    alias: str
    fallback: str | None = None  # why an alias other than the requested one answered

    @property
    def attempt(self) -> AttemptRecord:
        return self.owner.record


async def dispatch(gw: Gateway, req: ParsedRequest, deadline: Deadline, log: DispatchLog,
                   allowed: frozenset[str] | None = None, target: LatencyTarget = NO_TARGET,
                   queue: QueueContext | None = None) -> Dispatched:
    """Try the requested alias, then its fallback chain; raise the cause(s) if none answers.

    `log` is dispatch's own log (app.dispatch.log), never the request's record.
    `allowed` is the key's model list (None: any): no fallback ever takes a client to another alias.
    `target` is the request's own latency target (headers); aliases add their defaults.
    `queue` is admission's word on how the request waits for a slot (None: an unlimited, interactive wait).
    """
    gw.budget.on_request()
    base = route_context(req, target)  # once per request; each alias derives its own from it, once
    ctxs = PolicyContexts(base, gw.config.models)
    log.prompt_tokens_hint = base.prompt_tokens
    log.prefix = base.prefix
    models = gw.config.models
    chain = [a for a in [req.alias, *models[req.alias].fallbacks] if a == req.alias or _may(allowed, a, models)]
    try:
        _shed_if_unmeetable(gw, ctxs, chain, queue)
    except TargetUnmeetable:
        log.target_result = "shed"
        raise
    queue = _wait_by_target(queue, ctxs, chain[0])
    if ctxs(chain[0]).target:
        log.target_result = "met" if _can_meet(gw, ctxs, chain[0], NO_DEADLINE) else "unmeetable"
    errors: dict[str, GatewayError] = {}
    held: list[tuple[Attempt, GatewayError]] = []  # 5xx whose blame waits for the other backends' answers
    i, attempts, reason = 0, 0, None
    failed: set[str] = set()
    tried: list[str] = []  # the backends leased so far, in order (retry events name the one that failed)
    try:
        while True:
            alias = chain[i]
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            if attempts == 0 and nxt is not None and not _can_meet(gw, ctxs, alias, deadline):
                # No backend of this alias is predicted to answer in time: take the next model now, rather
                # than after spending the time.
                reason = "deadline"
                _note_fallback(log, alias, nxt, reason)
                i += 1
                continue
            attempts += 1
            try:
                dispatched = await _attempt_alias(gw, req, ctxs, alias, deadline, log, failed, held, tried, queue)
            except GatewayError as err:
                errors[alias] = err
                spec = models[alias]
                # Not `target` (the latency target above): the alias a context overflow falls back to.
                context_fallback = spec.context_fallback
                if context_fallback is not None and (context_fallback in chain[: i + 1]
                                                     or not _may(allowed, context_fallback, models)):
                    context_fallback = None
                situation = Situation(
                    attempts, spec.retry, deadline.remaining(), gw.budget.can_spend(),
                    any(s.name not in failed for s in gw.router.candidates(alias)), gw.router.all_limited(alias),
                    nxt, context_fallback, random.random(),
                )
                d = decide(err, situation)
                if d.action in (Action.RETRY_SAME, Action.RETRY_OTHER):
                    if gw.budget.try_spend():
                        _note_retry(log, attempts, err, d.wait_s, tried[-1] if tried else "")
                        if d.wait_s > 0:
                            await asyncio.sleep(d.wait_s)
                        continue
                    d = decide(err, replace(situation, budget_left=False))
                if d.action is not Action.FALL_BACK:
                    raise _final_error(list(errors.items())) from None
                reason = d.reason
                assert d.target is not None  # decide names the alias of every fall-back
                _note_fallback(log, alias, d.target, reason)
                if d.target != nxt:
                    chain.insert(i + 1, d.target)
                i, attempts = i + 1, 0
                failed = set()
                continue
            if alias != req.alias:
                dispatched.fallback = reason
                log.fallback = reason
            return dispatched
    finally:
        if held:
            _settle(gw, held, log)


def _may(allowed: frozenset[str] | None, alias: str, models) -> bool:
    return alias in models and (allowed is None or alias in allowed)


def _settle(gw: Gateway, held: list[tuple[Attempt, GatewayError]], log: DispatchLog) -> None:
    """Report held 5xx failures to backend health, unless the request itself caused them (app.dispatch.decide.is_poison,
    or the same error was found to be a request's own before)."""
    if is_poison([(o.record.backend, e) for o, e in held]):
        for _, err in held:
            gw.poison.learn(err)
        log.events.append(Event(time.perf_counter(), "poison", {"slipstream.status": held[0][1].status}))
        return
    for owner, err in held:
        if gw.poison.known(err):
            continue
        changed = gw.router.report(owner.lease, err)
        if changed is not None:
            log.events.append(Event(time.perf_counter(), f"breaker.{changed.value}", {"slipstream.backend": owner.record.backend}))


def _note_fallback(log: DispatchLog, frm: str, to: str, reason: str | None) -> None:
    log.events.append(Event(time.perf_counter(), "fallback", {
        "slipstream.fallback.from": frm, "slipstream.fallback.to": to, "slipstream.fallback.reason": reason or ""}))


def _note_retry(log: DispatchLog, attempt: int, err: GatewayError, wait_s: float, backend: str) -> None:
    log.retries += 1
    log.events.append(Event(time.perf_counter(), "retry", {
        "slipstream.attempt": attempt,
        "slipstream.backend": backend,
        "error.type": err.code or type(err).__name__,
        "slipstream.retry.wait_s": round(wait_s, 4),
    }))


def time_budget(gw: Gateway, alias: str, deadline: Deadline) -> float | None:
    """The seconds an answer from `alias` may take: the request's deadline, else the alias's SLO, else None."""
    if deadline.at is not None:
        return deadline.remaining()
    slo = gw.config.models[alias].slo_ms
    return None if slo is None else slo / 1000


def _can_meet(gw: Gateway, ctxs: PolicyContexts, alias: str, deadline: Deadline) -> bool:
    """Whether the backend the router would choose is predicted to answer within the budget: the same
    decision dispatch takes and /admin/route/explain shows (Router.decide)."""
    budget = time_budget(gw, alias, deadline)
    ctx = ctxs(alias)
    if budget is None and not ctx.target:
        return True
    choice = gw.router.decide(alias, ctx)
    if not choice.meets_target:
        return False
    predicted = choice.predicted_s
    return budget is None or (predicted is not None and predicted <= budget)


def _wait_by_target(queue: QueueContext | None, ctxs: PolicyContexts, alias: str) -> QueueContext | None:
    """A TTFT target is a deadline for the first token: the wait queue orders slot waits by it (within
    a priority level) like an x-slipstream-timeout-ms deadline."""
    if queue is None:
        return None
    target = ctxs(alias).target
    ttft = target.ttft_s if target is not None else None
    if ttft is None:
        return queue
    return replace(queue, deadline=min(queue.deadline, time.monotonic() + ttft))


def _shed_if_unmeetable(gw: Gateway, ctxs: PolicyContexts, chain: list[str], qc: QueueContext | None) -> None:
    """A sheddable request (priority batch or lower) whose latency target no alias of its chain is
    predicted to meet is refused now, with a Retry-After of the predicted excess: serving it late
    would take capacity from requests that must be served."""
    if qc is None or not qc.priority.sheddable:
        return
    excess = []
    for alias in chain:
        ctx = ctxs(alias)
        if not ctx.target:
            return
        choice = gw.router.decide(alias, ctx)
        if choice.state is None:
            continue
        if choice.meets_target:
            return
        est = choice.estimate()
        assert est is not None  # the choice has a backend (checked above)
        over = est.ttft_s - ctx.target.ttft_s if ctx.target.ttft_s is not None else 1.0
        excess.append(max(over, 0.0))
    if not excess:
        return
    wait = max(1, math.ceil(min(excess)))
    raise TargetUnmeetable(
        f"no backend of {chain[0]!r} is predicted to meet this request's latency target, and the request "
        f"is sheddable ({PRIORITY_HEADER}); retry later or raise the target", headers={"retry-after": str(wait)})


def _close(dispatched: Dispatched) -> None:
    """Give back a hedge that answered too late to be used."""
    dispatched.owner.end()


async def _wait_for_prefix(gw: Gateway, alias: str, lease: Lease, avoid: set[str] | frozenset[str], ctx: RouteContext,
                           deadline: Deadline, queue: QueueContext | None, log: DispatchLog) -> tuple[Lease, float, float]:
    """Hold the lease back while a sibling computes the prompt's prefix on its backend; returns the lease to
    send on, the seconds waited, and the seconds its re-routes waited for a free slot. A copy that will not come (its request ended without it, or it is far
    overdue on a timed backend) is not waited for again: the request is routed once more with what is
    known now, away from a backend that failed the copy or is stuck on it, and sent where that lands."""
    waited = queued = 0.0
    for rerouted in range(_PREFIX_REROUTES + 1):
        if not lease.burst_wait_s:
            break
        try:
            wait = await lease.wait_for_prefix(deadline.cap(lease.burst_wait_s), deadline.remaining())
        except BaseException:
            lease.release(failed=True)  # never sent: its own copy of the prefix is not coming either
            raise
        waited += wait.waited_s
        if not wait.reroute or rerouted == _PREFIX_REROUTES:
            break
        stuck = wait.backend_failed or wait.outcome == "overdue"
        log.events.append(Event(time.perf_counter(), f"prefix.{wait.outcome}", {"slipstream.backend": lease.backend.name}))
        again = avoid | {lease.backend.name} if stuck else avoid
        lease.release(failed=True)
        lease = await gw.router.acquire(alias, again, ctx, deadline, queue)
        queued += lease.queued_s
    return lease, waited, queued


async def _attempt_alias(gw: Gateway, req: ParsedRequest, ctxs: PolicyContexts, alias: str, deadline: Deadline,
                         log: DispatchLog, failed: set[str],
                         held: list[tuple[Attempt, GatewayError]], tried: list[str],
                         queue: QueueContext | None = None) -> Dispatched:
    """One attempt on the alias, or two racing ones when hedging is on and the first is late."""
    spec = gw.config.models[alias]
    ctx = ctxs(alias)

    async def attempt(also_avoid: frozenset[str] = frozenset()) -> Dispatched:
        if deadline.expired:  # spent before this attempt began (a slow cache lookup, a long wait): take no slot
            raise UpstreamTimeout("the request's deadline passed before a backend was tried", code="deadline_exceeded")
        log.attempts += 1
        routed_at = time.perf_counter()
        lease = await gw.router.acquire(alias, failed | also_avoid, ctx, deadline, queue)
        waited, queued = 0.0, lease.queued_s
        if lease.burst_wait_s:
            # A sibling is prefilling this prompt's prefix on the chosen backend: sent now, it would
            # compute the prefix a second time.
            lease, waited, requeued = await _wait_for_prefix(gw, alias, lease, failed | also_avoid, ctx, deadline, queue, log)
            queued += requeued
        backend = lease.backend
        tried.append(backend.name)
        now = time.perf_counter()
        a = AttemptRecord(log.attempts, alias, backend.name, backend.config.flavor, backend.host, backend.port,
                          backend.config.model, req.stream, now, load=lease.state.inflight, predicted=lease.forecast,
                          booked=lease.estimate, prefix=lease.prefix, burst_wait_s=waited, slot_wait_s=queued, sent=lease.state.sent)
        log.attempt_log.append(a)
        owner = Attempt(gw.router, lease, a, log.events, ctx.prompt_tokens, ctx.prefix)
        try:
            if gw.telemetry.tracing.enabled:  # route spans are the decision's only reader
                log.routes.append(gw.router.decision(alias, lease, routed_at, now, failed))
            span, extra = gw.telemetry.start_attempt(log.parent_span, log.endpoint, a)
            owner.traced(span)
            streamed = req.stream or streams_upstream(backend, req)
            # The client protocol says how: natively, or translated to an API this backend speaks.
            up = req.protocol.upstream(req, backend.config, streamed)
            if up.headers:
                extra = {**extra, **up.headers} if extra else up.headers
            call = UpstreamCall(up.path, up.body, streamed, gw.timeouts[alias][backend.name], deadline, extra)
            owner.result = result = await gw.transport.send(backend, call)
            if up.adapt is not None:
                owner.result = result = up.adapt(result)
            owner.answered(result.timing, streamed, uncached_tokens(ctx, lease))
            if not req.stream:
                if streamed:
                    # A JSON client served from a stream: read it whole (a client that leaves cancels
                    # this, and closing the stream frees the backend's slot at once).
                    assert not isinstance(result, JsonReply)  # asked to stream, the transport streams
                    reply = await collect_json(result, req.protocol.assembler())
                    result.close()
                    owner.result = result = reply
                # The header report; the body's follows when the pipeline reads it, and then ends the
                # attempt (at once: the slot is free for the next request).
                assert isinstance(result, JsonReply)  # read whole above, or asked as JSON
                owner.add_report(result.report)
            return Dispatched(result, owner, alias)
        except GatewayError as err:
            failed.add(backend.name)
            if _blame_later(err):
                owner.end(err, report=False)
                held.append((owner, err))
            else:
                owner.end(err)
            raise
        except BaseException as exc:
            owner.end(exc)
            raise

    if not spec.hedge.enabled:
        return await attempt()
    # The hedge races what an attempt returns: a stream's first event, a JSON call's whole answer. So a
    # stream's delay is a factor of its predicted first token, whatever its ranking reads: latency_aware
    # ranks streams by their end, and a first token still missing at twice a long answer's end is no
    # longer a hedge, it is a timeout.
    best = gw.router.decide(alias, ctx).predicted(req.stream) or 0.0
    delay = max(spec.hedge.min_delay_ms / 1000, spec.hedge.after_factor * best)
    budget = gw.hedge_budgets[alias]
    budget.on_request()
    return await hedged(attempt, deadline.cap(delay), budget, log.events, _close, tried)


def streams_upstream(backend, req: ParsedRequest) -> bool:
    """Whether a JSON client's call to this backend is streamed upstream and assembled (chat and text
    completions only, and only where the stream's usage is asked for, so the answer keeps it)."""
    return req.protocol.assembles and streams_json(backend)


def _blame_later(err: GatewayError) -> bool:
    """A backend 5xx of unknown cause: whether it counts against the backend is known only once the
    request's other attempts have answered (the same 5xx everywhere is the request's fault)."""
    return isinstance(err, UpstreamStatus) and err.status in (500, 501) and err.request_caused is None


def route_context(req: ParsedRequest, target: LatencyTarget | None = None) -> RouteContext:
    """What the router needs of a request: the protocol's one size estimate (app.protocols.PromptSize, as
    admission reads it), the prompt's block keys for prefix affinity, and the request's shape (answer lengths
    are learned per shape)."""
    size = req.size
    text = req.protocol.prefix_text(req.body)
    prefix = prompt_blocks(text) if text is not None else None
    if not size.generates:
        # An embedding is a prefill with no decode: exactly one "output" step (no decode tokens), never the
        # alias's learned answer length (chat's, a few hundred tokens: seconds of decode that never happen).
        return RouteContext(req.stream, size.prompt_tokens, 1, exact_output=True, prefix=prefix, requested_target=target,
                            assembles=req.protocol.assembles)
    return RouteContext(req.stream, size.prompt_tokens, size.output_cap, exact_output=size.exact_output, prefix=prefix,
                        requested_target=target, shape=shape_of(req.protocol.value, size.output_cap, req.protocol.stops(req.body)),
                        assembles=req.protocol.assembles)


def with_policy(base: RouteContext, spec: ModelAlias) -> RouteContext:
    """A new context: `base` as the alias's policy ranks it (what a stream is ranked by, whether cached
    prefixes count, its latency target)."""
    ctx = base.copy()
    ctx.stream_objective = spec.ranks_streams_by()
    ctx.ttft_tolerance_s = spec.ttft_tolerance_ms / 1000
    ctx.ttft_tolerance_ratio = spec.ttft_tolerance_ratio
    ctx.prefix_policy = spec.prefix
    ctx.cached = {} if spec.strategy in PREFIX_STRATEGIES else None
    ctx.target = for_alias(ctx.requested_target or NO_TARGET, spec)
    return ctx


class PolicyContexts:
    """The request's route context as each alias's policy ranks it: derived once per alias (`ctxs(alias)`),
    then only read."""

    __slots__ = ("_base", "_by_alias", "_models")

    def __init__(self, base: RouteContext, models: dict[str, ModelAlias]) -> None:
        self._base, self._models = base, models
        self._by_alias: dict[str, RouteContext] = {}

    def __call__(self, alias: str) -> RouteContext:
        ctx = self._by_alias.get(alias)
        if ctx is None:
            ctx = self._by_alias[alias] = with_policy(self._base, self._models[alias])
        return ctx


def uncached_tokens(ctx: RouteContext, lease) -> int:
    """The request's prompt tokens the chosen backend was predicted to prefill (not reuse)."""
    return max(1, round(ctx.prompt_tokens - lease.prefix.tokens)) if lease.prefix is not None else ctx.prompt_tokens


def _final_error(errors: list[tuple[str, GatewayError]]) -> GatewayError:
    if len(errors) == 1:
        err = errors[0][1]
    else:
        causes = "; ".join(f"{alias}: {err.message}" for alias, err in errors)
        err = AllAttemptsFailed(f"no model in the fallback chain could answer ({causes})")
        hints = [retry_after_s(e) for _, e in errors]
        err.headers["retry-after"] = str(max(1, round(max((h for h in hints if h is not None), default=1))))
    if err.status >= 500 and "retry-after" not in err.headers:
        err.headers["retry-after"] = "1"
    return err
