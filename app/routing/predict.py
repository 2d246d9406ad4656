"""Predicted latency of one request on one backend, now: the latency model plus what is in flight.

The router keeps, per backend, when each request it sent there is predicted to finish (the in-flight
book). A backend running all its slots starts the next request when one of them frees, so a request
with k requests ahead and S slots waits for the (k - S + 1)-th earliest finish: queueing follows from
the work actually ahead of it, not from an average wait per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.record import Estimate

if TYPE_CHECKING:
    from app.routing.context import RouteContext
    from app.routing.latency_model import LatencyModel
    from app.routing.state import BackendState


def estimate(c: BackendState, ctx: RouteContext, ahead: int | None = None, known_at: float | None = None) -> Estimate:
    """Queue wait, time to first token and end-to-end time for this request on backend `c` at `ctx.now`,
    with `ahead` requests in flight there before it (by default, all that are). `known_at` (default
    `ctx.now`) is when the in-flight book is simulated from: for an arrival expected later, the requests
    ahead finish when they are predicted to, not all at once at that later instant (a request overdue
    now is about to finish, but one due before the arrival has finished by then)."""
    now = ctx.now
    ahead = c.inflight if ahead is None else ahead
    queue, ttft = _first_token(c, ctx, now, ahead, now if known_at is None else known_at)
    decode_tokens = _decode_tokens(c.model, ctx, now)
    return Estimate(queue, ttft, ttft + decode_tokens * c.model.answer_tpot(ahead + 1, now), decode_tokens)


def figure_at(c: BackendState, ctx: RouteContext, now: float, known_at: float) -> float:
    """`predict`'s figure for this request on `c` were it placed at `now` (the in-flight book simulated
    from `known_at`), with all that is in flight there ahead of it: the look-ahead's question, asked for
    every candidate at every decision without deriving a context for that instant. A stream ranked by
    its first token skips the decode, which that figure does not read."""
    ahead = c.inflight
    figure = _first_token(c, ctx, now, ahead, known_at)[1]
    if not by_first_token(ctx):
        m = c.model
        figure += _decode_tokens(m, ctx, now) * m.answer_tpot(ahead + 1, now)
    return figure * failure_penalty(c, now)


def _first_token(c: BackendState, ctx: RouteContext, now: float, ahead: int, known_at: float) -> tuple[float, float]:
    """(queue wait, time to first token) of `estimate`, at `now`."""
    m = c.model
    residual = m.queue.get(now)
    # LatencyModel.residual_queue's max(0.0, ...), as a plain comparison (the same result; see below).
    queue = residual = residual if residual > 0.0 else 0.0  # noqa: FURB136
    slots = m.slots
    if slots is not None and ahead >= slots:
        at = c.book.nth_finish(ahead - slots, m.tpot(slots, now), known_at, slots)
        if at is not None:
            queue += max(0.0, at - now)
        else:
            # More in flight than booked (a slot handed on before its lease was booked): a turnover each.
            queue += (ahead - slots + 1 - len(c.book)) * _turnover_s(c, slots, now)
    if c.others_waiting:
        # The backend's own waiting count (its /metrics) beyond what this gateway queued there.
        queue += c.others_waiting * _turnover_s(c, slots or max(1, ahead), now)
    prompt = ctx.prompt_tokens
    # The prefill line, read once: the backlog below and this prompt's own prefill both price with it.
    line = fixed, per_token = m.prefill.coefficients(now)
    held = ctx.cached
    if held is not None:
        # Prefix-aware: only the uncached tokens are prefilled, after the prefill work already in
        # flight here (load as uncached prompt tokens, not requests), and not before a sibling still
        # prefilling the same prefix has finished it. A request that waits for a slot finds most of
        # that backlog done when it gets one: the longer of the two waits counts, not their sum.
        # (Plain comparisons for min() and max() here, with the same results: every candidate of every
        # decision, and of its look-ahead, passes through.)
        prefilling = c.prefilling
        backlog = prefilling * fixed + c.uncached_inflight * per_token
        if backlog:
            # The prefill under way has been running since the backend went busy or the one before it
            # reached its first token; at most its own share of the backlog is done.
            share = backlog / (prefilling if prefilling > 1 else 1)  # noqa: FURB136
            done = now - c.prefill_busy_since
            backlog -= share if share < done else done  # noqa: FURB136
            if not backlog > 0.0:
                backlog = 0.0
        slot_wait = queue - residual
        queue = residual + (backlog if backlog > slot_wait else slot_wait)  # noqa: FURB136
        cached = held.get(c.name) if held else None
        if cached is not None and cached.tokens > 0:
            prompt = max(1, round(prompt - cached.tokens))
            ready = cached.ready_at - now
            if ready > queue:  # noqa: PLR1730
                queue = ready
    return queue, m.ttft(prompt, now, queue, line)


def _decode_tokens(m: LatencyModel, ctx: RouteContext, now: float) -> float:
    """The answer's tokens after the first: the expected length, capped by (or exactly) max_tokens."""
    n = m.output_tokens.get(now) if ctx.expected_output is None else ctx.expected_output
    if ctx.max_tokens:
        n = ctx.max_tokens if ctx.exact_output else min(n, ctx.max_tokens)
    return max(0.0, n - 1)


def _turnover_s(c: BackendState, slots: int, now: float) -> float:
    """Mean time between slots freeing on a full backend: a typical request's decode over the slots."""
    m = c.model
    return m.output_tokens.get(now) * m.tpot(slots, now) / max(1, slots)


def objective(est: Estimate, ctx: RouteContext) -> float:
    """The figure routing ranks by: TTFT for streams (unless their objective is e2e), E2E otherwise."""
    return est.ttft_s if by_first_token(ctx) else est.e2e_s


def by_first_token(ctx: RouteContext) -> bool:
    """Whether the request is ranked by its first token (a stream, unless its objective is e2e)."""
    return ctx.stream and ctx.stream_objective == "ttft"


def failure_penalty(c: BackendState, now: float) -> float:
    """A backend answering fast errors costs a retry elsewhere and must not look fast (Linkerd)."""
    return 1.0 + 4.0 * c.model.failure_rate.get(now)


def ranked(candidates: Sequence[BackendState], ctx: RouteContext) -> tuple[list[Estimate], list[float]]:
    """Every candidate's estimate and predicted figure (`predict`'s), in one pass; the estimates stay on
    the decision's context, so the chosen one's lease books them rather than predicting again."""
    estimates: list[Estimate] = []
    figures: list[float] = []
    kept: dict[str, Estimate] = {}
    now, first = ctx.now, by_first_token(ctx)
    for c in candidates:
        e = kept[c.name] = estimate(c, ctx)
        estimates.append(e)
        figures.append((e.ttft_s if first else e.e2e_s) * failure_penalty(c, now))  # objective's
    ctx.estimates = kept
    return estimates, figures


def decided(c: BackendState, ctx: RouteContext) -> Estimate:
    """`estimate(c, ctx)` as the decision's ranking made it, where it made one (`ctx.estimates`): the
    decision and whatever reads it (the target check, its explanation, the deadline check) are one
    synchronous step, so nothing has changed since. Otherwise predicted now."""
    kept = ctx.estimates.get(c.name) if ctx.estimates is not None else None
    return kept if kept is not None else estimate(c, ctx)


def predict(c: BackendState, ctx: RouteContext) -> float:
    """Predicted seconds to the first token (streams) or to the last (otherwise), failures priced in."""
    return objective(estimate(c, ctx), ctx) * failure_penalty(c, ctx.now)
