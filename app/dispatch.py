"""Route, attempt, retry, fall back: get an answer started, or fail naming every cause.

Per alias, attempts run under tenacity (full-jitter backoff, a retry budget, the request's deadline,
Retry-After when no other backend can take the retry); when an alias gives up, the fallback chain
takes over. Nothing here runs after the first byte reached the client: a stream that fails later is
the relay's to report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)

from app.config import ModelAlias, RetryPolicy
from app.deadline import Deadline
from app.errors import AllAttemptsFailed, GatewayError
from app.hedge import hedged
from app.record import AttemptRecord, Event, RequestRecord
from app.request import ParsedRequest
from app.retry import (
    fallback_reason,
    is_context_length,
    is_retryable,
    retry_after_s,
    warrants_fallback,
)
from app.routing.predict import predict
from app.routing.router import Lease
from app.routing.strategies import RouteContext
from app.upstream.attempt import EventStream, JsonReply, call_json, open_stream


@dataclass(slots=True)
class Dispatched:
    """An answer under way: a whole JSON reply, or a stream whose first event has arrived."""

    result: JsonReply | EventStream
    lease: Lease
    alias: str
    fallback: str | None = None  # why an alias other than the requested one answered
    attempt: AttemptRecord | None = None


async def dispatch(gw, req: ParsedRequest, deadline: Deadline, record: RequestRecord) -> Dispatched:
    """Try the requested alias, then its fallback chain; raise the cause(s) if none answers."""
    gw.budget.on_request()
    ctx = route_context(req)  # once per request: every alias and attempt below reuses it
    record.prompt_tokens_hint = ctx.prompt_tokens
    chain = [req.alias, *gw.config.models[req.alias].fallbacks]
    errors: list[tuple[str, GatewayError]] = []
    reason: str | None = None
    i = 0
    while i < len(chain):
        alias = chain[i]
        i += 1
        if i < len(chain) and not _can_meet(gw, ctx, alias, deadline):
            # No backend of this alias is predicted to answer in time: take the next model now, rather
            # than after spending the time.
            reason = "deadline"
            record.events.append(Event(time.perf_counter(), "fallback", {
                "slipstream.fallback.from": alias, "slipstream.fallback.to": chain[i], "slipstream.fallback.reason": reason}))
            continue
        try:
            dispatched = await _on_alias(gw, req, ctx, alias, deadline, record)
        except GatewayError as err:
            errors.append((alias, err))
            target = gw.config.models[alias].context_fallback
            if is_context_length(err) and target and target not in chain[:i]:
                chain.insert(i, target)
                reason = "context_length"
                record.events.append(Event(time.perf_counter(), "fallback", {
                    "slipstream.fallback.from": alias, "slipstream.fallback.to": target, "slipstream.fallback.reason": reason}))
                continue
            if not warrants_fallback(err) or deadline.expired:
                break
            reason = fallback_reason(err)
            if i < len(chain):
                record.events.append(Event(time.perf_counter(), "fallback", {
                    "slipstream.fallback.from": alias, "slipstream.fallback.to": chain[i], "slipstream.fallback.reason": reason}))
            continue
        if alias != req.alias:
            dispatched.fallback = reason
            record.fallback = reason
        return dispatched
    raise _final_error(errors)


def _can_meet(gw, ctx: RouteContext, alias: str, deadline: Deadline) -> bool:
    """Whether some backend of the alias is predicted to answer within the deadline (or the alias's SLO)."""
    slo = gw.config.models[alias].slo_ms
    budget = deadline.remaining()
    if budget == float("inf"):
        if slo is None:
            return True
        budget = slo / 1000
    ctx.now = time.monotonic()
    with_policy(ctx, gw.config.models[alias])
    predictions = [predict(s, ctx) for s in gw.router.candidates(alias)]
    return bool(predictions) and min(predictions) <= budget


async def _close(dispatched: Dispatched) -> None:
    """Give back a hedge that answered too late to be used."""
    if isinstance(dispatched.result, EventStream):
        await dispatched.result.aclose()
    dispatched.lease.release()


async def _on_alias(gw, req: ParsedRequest, ctx: RouteContext, alias: str, deadline: Deadline,
                    record: RequestRecord) -> Dispatched:
    spec = gw.config.models[alias]
    policy = spec.retry
    failed: set[str] = set()
    with_policy(ctx, spec)

    async def run() -> Dispatched:
        if not spec.hedge.enabled:
            return await attempt()
        ctx.now = time.monotonic()
        best = min((predict(s, ctx) for s in gw.router.candidates(alias)), default=0.0)
        delay = max(spec.hedge.min_delay_ms / 1000, spec.hedge.after_factor * best)
        budget = gw.hedge_budgets[alias]
        budget.on_request()
        return await hedged(attempt, deadline.cap(delay), budget, record, _close)

    async def attempt(also_avoid: frozenset[str] = frozenset()) -> Dispatched:
        record.attempts += 1
        routed_at = time.perf_counter()
        lease = await gw.router.acquire(alias, failed | also_avoid, ctx)
        backend = lease.backend
        now = time.perf_counter()
        if gw.telemetry.tracing.enabled:  # route spans are the decision's only reader
            record.routes.append(gw.router.decision(alias, lease, routed_at, now, failed))
        a = AttemptRecord(record.attempts, alias, backend.name, backend.config.flavor, backend.host, backend.port,
                          backend.config.model, req.stream, now, load=lease.state.inflight, predicted=lease.estimate)
        record.attempt_log.append(a)
        extra = gw.telemetry.start_attempt(record, a)
        timeouts = gw.timeouts[alias][backend.name]
        body = req.upstream_body(backend.config.model, backend.config.stream_usage)
        try:
            if req.stream:
                result = await open_stream(backend, req.endpoint.value, body, timeouts, deadline, extra)
            else:
                result = await call_json(backend, req.endpoint.value, body, timeouts, deadline, extra)
        except GatewayError as err:
            lease.release()
            failed.add(backend.name)
            a.end, a.status, a.error_type = time.perf_counter(), err.status, err.code or err.type
            _note_breaker(record, backend.name, gw.router.report(lease.state, err))
            raise
        except BaseException:
            lease.release()
            a.end, a.error_type = time.perf_counter(), "cancelled"
            raise
        t = result.timing
        a.headers, a.first_event, a.status = t.headers, t.first_event, 200
        if req.stream:
            gw.telemetry.learn_first_token(a, ctx.prompt_tokens)
        else:
            a.end, a.status, a.report = t.end, result.status, result.report
            lease.release()
            gw.router.report(lease.state, None)
        return Dispatched(result, lease, alias, attempt=a)

    # The first attempt runs outside tenacity: the common case (it succeeds) pays nothing for retrying.
    try:
        return await run()
    except GatewayError as err:
        if policy.max_attempts == 1 or not is_retryable(err, policy):
            raise
        first_failure: GatewayError | None = err
    retrying = AsyncRetrying(
        stop=_Stop(gw, alias, policy, deadline),
        wait=_Wait(gw, alias, policy, deadline),
        retry=retry_if_exception(lambda e: isinstance(e, GatewayError) and is_retryable(e, policy)),
        before_sleep=lambda state: _count_retry(record, state),
        reraise=True,
    )
    async for try_ in retrying:
        with try_:
            if first_failure is not None:
                # Hand tenacity the first attempt's failure, so it decides, waits and counts from there.
                failure, first_failure = first_failure, None
                raise failure
            return await run()
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


def route_context(req: ParsedRequest) -> RouteContext:
    """What the router needs of a request; the prompt's token count is estimated from its length."""
    body = req.body
    chars = 0
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        chars += len(prompt)
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    max_tokens = max_tokens if isinstance(max_tokens, int) else None
    exact = bool(max_tokens) and (body.get("ignore_eos") is True or body.get("min_tokens") == max_tokens)
    return RouteContext(req.stream, max(1, chars // 4), max_tokens, exact_output=exact)


def with_policy(ctx: RouteContext, spec: ModelAlias) -> RouteContext:
    """The context as the alias's policy ranks it (what a stream is ranked by)."""
    ctx.stream_objective = spec.stream_objective
    ctx.ttft_tolerance_s = spec.ttft_tolerance_ms / 1000
    ctx.ttft_tolerance_ratio = spec.ttft_tolerance_ratio
    return ctx


def _count_retry(record: RequestRecord, state: RetryCallState) -> None:
    record.retries += 1
    err = state.outcome.exception() if state.outcome else None
    last = record.attempt_log[-1] if record.attempt_log else None
    record.events.append(Event(time.perf_counter(), "retry", {
        "slipstream.attempt": state.attempt_number,
        "slipstream.backend": last.backend if last else "",
        "error.type": getattr(err, "code", None) or type(err).__name__,
        "slipstream.retry.wait_s": round(state.upcoming_sleep, 4),
    }))


def _note_breaker(record: RequestRecord, backend: str, new_state) -> None:
    if new_state is not None:
        record.events.append(Event(time.perf_counter(), f"breaker.{new_state.value}", {"slipstream.backend": backend}))


class _Stop:
    """Stop on the attempt limit, a spent deadline, a Retry-After past the deadline, or no budget left."""

    def __init__(self, gw, alias: str, policy: RetryPolicy, deadline: Deadline) -> None:
        self.gw, self.alias, self.policy, self.deadline = gw, alias, policy, deadline

    def __call__(self, state: RetryCallState) -> bool:
        if state.attempt_number >= self.policy.max_attempts or self.deadline.expired:
            return True
        wait = _forced_wait(self.gw, self.alias, state)
        if wait is not None and wait >= self.deadline.remaining():
            return True
        return not self.gw.budget.try_spend()  # last: it spends a retry


class _Wait:
    def __init__(self, gw, alias: str, policy: RetryPolicy, deadline: Deadline) -> None:
        self.gw, self.alias, self.deadline = gw, alias, deadline
        self.jitter = wait_random_exponential(multiplier=policy.backoff_base_s, max=policy.backoff_max_s)

    def __call__(self, state: RetryCallState) -> float:
        wait = self.jitter(state)
        forced = _forced_wait(self.gw, self.alias, state)
        if forced is not None:
            wait = max(wait, forced)
        return self.deadline.cap(wait)


def _forced_wait(gw, alias: str, state: RetryCallState) -> float | None:
    """A Retry-After the next attempt must honour: only when no other backend of the alias can take it."""
    err = state.outcome.exception() if state.outcome else None
    if not isinstance(err, GatewayError):
        return None
    seconds = retry_after_s(err)
    if seconds is None or not gw.router.all_limited(alias):
        return None
    return seconds


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
