"""Predicted latency of one request on one backend, now: the latency model plus what is in flight.

The router keeps, per backend, when each request it sent there is predicted to finish (the in-flight
book). A backend running all its slots starts the next request when one of them frees, so a request
with k requests ahead and S slots waits for the (k - S + 1)-th earliest finish: queueing follows from
the work actually ahead of it, not from an average wait per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import exp as _exp
from typing import TYPE_CHECKING

from app.record import Estimate

if TYPE_CHECKING:
    from app.routing.context import RouteContext
    from app.routing.prefix_routing import PrefixMatch
    from app.routing.state import BackendState


def estimate(c: BackendState, ctx: RouteContext, ahead: int | None = None, known_at: float | None = None,
             backlog: bool = True, settled: PrefixMatch | None = None) -> Estimate:
    """Queue wait, time to first token and end-to-end time for this request on backend `c` at `ctx.now`,
    with `ahead` requests in flight there before it (by default, all that are). `known_at` (default
    `ctx.now`) is when the in-flight book is simulated from: for an arrival expected later, the requests
    ahead finish when they are predicted to, not all at once at that later instant (a request overdue
    now is about to finish, but one due before the arrival has finished by then). Without `backlog`, the
    prefill work in flight there is not waited for: predicted_latency's ranking (PredictedLatency).
    `settled`: for a context that counts no cached prefix (a prefix-blind strategy's), what `c` holds of
    the prompt, settled now: only the rest is prefilled (see Lease)."""
    now = ctx.now
    queue, ttft, decode_tokens, e2e, _, stall = _predict(c, ctx, now, c.inflight if ahead is None else ahead,
                                                         now if known_at is None else known_at, True, stalls=True,
                                                         backlog=backlog, settled=settled)
    return Estimate(queue, ttft, e2e + stall, decode_tokens, stall)


def forecast(est: Estimate, c: BackendState, now: float, ready_s: float = 0.0) -> Estimate:
    """`est` (routing's estimate for a request placed on `c` at `now`) as the request's forecast: its
    residual queue read as the typical wait there (`LatencyModel.typical_residual_queue`), not the mean
    routing prices. What the request records, its headers, span, histograms and /admin/backends' error
    report; the in-flight book and the ranking keep the estimate. `ready_s`: the wait for a sibling's copy
    of the prefix the estimate already holds (its queue is at least that, whatever the residual)."""
    m = c.model
    shift = m.typical_residual_queue(now) - m.residual_queue(now)
    if shift == 0.0:
        return est
    queue = max(est.queue_s + shift, ready_s, 0.0)
    shift = queue - est.queue_s
    return Estimate(queue, est.ttft_s + shift, est.e2e_s + shift, est.decode_tokens, est.stall_s)


def figure_at(c: BackendState, ctx: RouteContext, now: float, known_at: float) -> float:
    """`predict`'s figure for this request on `c` were it placed at `now` (the in-flight book simulated
    from `known_at`), with all that is in flight there ahead of it: the look-ahead's question, asked for
    every candidate at every decision without deriving a context for that instant. A stream ranked by
    its first token skips the decode, which that figure does not read."""
    first = ctx.stream and ctx.stream_objective == "ttft"  # by_first_token(ctx)
    _, ttft, _, e2e, penalty, _ = _predict(c, ctx, now, c.inflight, known_at, not first)
    return (ttft if first else e2e) * penalty


def booked_figure_at(c: BackendState, ctx: RouteContext, now: float, known_at: float) -> float:
    """`figure_at` with this request booked on `c` as `lookahead.book` books it (one more in flight, and
    its uncached prompt tokens as prefill load there), where that prediction does not read the in-flight
    book (`c` has fewer requests than slots with it, or no known slots): c itself is left as it is."""
    first = ctx.stream and ctx.stream_objective == "ttft"  # by_first_token(ctx)
    booked = None
    if ctx.prefix is not None and ctx.prefix.keys and ctx.cached is not None:
        held = ctx.cached.get(c.name)
        # BackendState.start_prefill's fields after lookahead.book's call (the same arithmetic).
        own = max(0.0, ctx.prompt_tokens - (held.tokens if held is not None else 0.0))
        booked = (c.prefilling + 1, c.uncached_inflight + own, c.prefill_busy_since if c.prefilling else ctx.now)
    _, ttft, _, e2e, penalty, _ = _predict(c, ctx, now, c.inflight + 1, known_at, not first, booked)
    return (ttft if first else e2e) * penalty


def _predict(c: BackendState, ctx: RouteContext, now: float, ahead: int, known_at: float, decode: bool,
             booked: tuple[int, float, float] | None = None, stalls: bool = False, backlog: bool = True,
             settled: PrefixMatch | None = None) -> tuple[float, float, float, float, float, float]:
    """`estimate` at `now` with `ahead` requests ahead (the book simulated from `known_at`): (queue wait,
    time to first token, tokens to decode after the first, end-to-end time, failure penalty). Without
    `decode`, no decode is priced: 0.0 tokens, and the end-to-end time is the time to first token.
    `booked`: the backend's (prefilling, uncached_inflight, prefill_busy_since) as a booking would
    leave them (`booked_figure_at`), else its own. `stalls`: on a server whose decodes stop for a prefill
    (`BackendState.stalls_decodes`), the slot wait holds the stalls the prefills booked ahead put on the
    decodes beside them (`InflightBook.finishes`): a prediction now (`estimate`, `ranked`). Not the
    look-ahead's figures for the next arrival: how this request's own prefill stalls the decodes there
    is `lookahead.imposed`'s charge already. `backlog`: the prompt waits for the prefill work in flight
    there (`estimate`'s). `settled`: `estimate`'s.

    Every decision predicts seven times (each candidate now, and the look-ahead's later), so this is one
    function: the model's figures are read inline (`Decaying.get`, `DecayingLine.coefficients`,
    `LatencyModel.ttft`, the decode tokens, `failure_penalty`) with the same arithmetic, and min() and
    max() are plain comparisons with the same results. A `Decaying` figure only ever fed its prior's
    value reads as its prior at any instant (the drift moves it by 0.0): a failure rate fed only
    successes, a residual queue fed only no wait."""
    m = c.model
    x = m.queue
    residual = (x.value + (x.prior - x.value) * (1.0 - _exp(-(now - x.updated) / x.stale_tau_s))
                if x.samples and x.value != x.prior else x.prior)
    # LatencyModel.residual_queue's max(0.0, ...).
    queue = residual = residual if residual > 0.0 else 0.0  # noqa: FURB136
    slots = m.slots
    if slots is not None and ahead >= slots:
        # Requests held at the gateway for a sibling's copy of their prefix (BackendState.held_back) are not
        # at the server: one sent now queues ahead of them there and takes the first slot to free. Counted
        # ahead, four held siblings priced a new prompt's wait on a full llama.cpp server at 9.8 s for a
        # measured 3.9 s (issue 24). What taking that slot costs the held siblings is the placement's charge
        # (LatencyAware._evicting). Only once the backend is timed: before, its predictions are the prior's
        # and only break ties and bound the hash margin, which the charge does not reach, and a new prompt
        # went to a server whose every slot held a copy siblings waited for (llama_sim --per-slot, 8 prompts
        # on 8 closed-loop clients: mean TTFT +3 % counted so from the start).
        back = c.held_back
        queued = ahead - back if back and m.prefill.samples else ahead
        if queued >= slots:
            at = c.book.nth_finish(queued - slots, m.tpot(slots, now), known_at, slots, stalls and c.stalls_decodes)
            if at is not None:
                queue += max(0.0, at - now)
            else:
                # More in flight than booked (a slot handed on before its lease was booked): a turnover each.
                queue += (queued - slots + 1 - len(c.book)) * _turnover_s(c, slots, now)
    if c.others_waiting:
        # The backend's own waiting count (its /metrics) beyond what this gateway queued there.
        queue += c.others_waiting * _turnover_s(c, slots or max(1, ahead), now)
    prompt = ctx.prompt_tokens
    # The prefill line, read once: the backlog below and this prompt's own prefill both price with it.
    line = m.prefill
    fit = line.fit()
    if fit is None:
        fixed, per_token = line.prior_intercept, line.prior_slope
    else:
        drift = 1.0 - _exp(-(now - line.updated) / line.stale_tau_s)
        fixed, per_token = fit[0] + (line.prior_intercept - fit[0]) * drift, fit[1] + (line.prior_slope - fit[1]) * drift
    # The prompt is prefilled after the prefill work already in flight here (load as uncached prompt
    # tokens, not requests: every lease with the prompt's blocks books its own, whichever strategy placed
    # it). A request that waits for a slot finds most of that backlog done when it gets one: the longer
    # of the two waits counts, not their sum. Priced for every strategy's estimate, not only the
    # prefix-aware ones': without it, least_inflight's and round_robin's predictions behind a prefill
    # read 40-55 % low on real llama.cpp servers (issue 24), and with them the spans, /admin/backends and
    # the deadline check that read them.
    if backlog:
        prefilling, uncached, busy = booked or (c.prefilling, c.uncached_inflight, c.prefill_busy_since)
        work = prefilling * fixed + uncached * per_token
        if work:
            # The prefill under way has been running since the backend went busy or the one before it
            # reached its first token; at most its own share of the backlog is done.
            share = work / (prefilling if prefilling > 1 else 1)  # noqa: FURB136
            done = known_at - busy
            work -= share if share < done else done  # noqa: FURB136
            if now > known_at:
                # Predicted for a later instant (the look-ahead's next arrival): the backend works
                # through the rest of its backlog meanwhile, not only the prefill under way when known.
                work -= now - known_at
            if not work > 0.0:
                work = 0.0
        slot_wait = queue - residual
        queue = residual + (work if work > slot_wait else slot_wait)  # noqa: FURB136
    # Only the uncached tokens are prefilled (what the ranking matched, or for a prefix-blind context what
    # the lease found settled), and not before a sibling still prefilling the same prefix has finished it.
    held = ctx.cached
    cached = held.get(c.name) if held is not None else settled
    if cached is not None and cached.tokens > 0:
        prompt = round(prompt - cached.tokens)
        if not prompt > 1:
            prompt = 1
        ready = cached.ready_at - now
        if ready > queue:  # noqa: PLR1730
            queue = ready
    x = m.net
    net = (x.value + (x.prior - x.value) * (1.0 - _exp(-(now - x.updated) / x.stale_tau_s))
           if x.samples and x.value != x.prior else x.prior)
    ttft = net + queue + (fixed + per_token * prompt)
    x = m.failure_rate
    penalty = 1.0 + 4.0 * (x.value + (x.prior - x.value) * (1.0 - _exp(-(now - x.updated) / x.stale_tau_s))
                           if x.samples and x.value != x.prior else x.prior)
    if not decode:
        return queue, ttft, 0.0, ttft, penalty, 0.0
    # The answer's tokens after the first: the expected length, capped by (or exactly) max_tokens.
    n = m.output_tokens.get(now) if ctx.expected_output is None else ctx.expected_output
    cap = ctx.max_tokens
    if cap:
        n = cap if ctx.exact_output or cap < n else n  # min(n, cap) unless exact
    n -= 1
    if not n > 0.0:
        n = 0.0
    # The end-to-end time is returned without the stall: routing ranks by it, and the stall an answer
    # meets comes from the arrivals after it, which are charged for it where they are placed
    # (lookahead.imposed); ranked by it too, it was charged twice.
    # Its decode per token is read at its whole prompt's size (a cached prefix is context too).
    return (queue, ttft, n, ttft + n * m.answer_tpot(ahead + 1, now, ctx.prompt_tokens), penalty,
            n * m.answers.stall(ahead + 1, now))


def _turnover_s(c: BackendState, slots: int, now: float) -> float:
    """Mean time between slots freeing on a full backend: a typical request's decode over the slots."""
    m = c.model
    return m.output_tokens.get(now) * m.tpot(slots, now) / max(1, slots)


def objective(est: Estimate, ctx: RouteContext) -> float:
    """The figure routing ranks by: TTFT for streams (unless their objective is e2e), E2E otherwise (less
    the expected stall, see _predict)."""
    return est.ttft_s if by_first_token(ctx) else est.stall_free_e2e_s


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
        # estimate(c, ctx), keeping the failure penalty its reads brought.
        queue, ttft, decode_tokens, e2e, penalty, stall = _predict(c, ctx, now, c.inflight, now, True, stalls=True)
        e = kept[c.name] = Estimate(queue, ttft, e2e + stall, decode_tokens, stall)
        estimates.append(e)
        # Ranked without the stall (see _predict): objective's, failure_penalty's.
        figures.append((ttft if first else e2e) * penalty)
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
