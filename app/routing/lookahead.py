"""The delay a placement passes on: what the next arrival would be offered once this request is booked.

Each request taking the lowest predicted latency for itself is a selfish rule. On two real llama.cpp
servers of unequal speed (issue 24) it kept ~87 % of requests on the quick server, and 55 % of those
waited for a slot there: a request that takes the quick server's last free slot, or joins its queue,
saves itself a little and makes the next arrival wait or go to the slow server. The default then won at
p99 (0.60x least_inflight's TTFT) and lost at the median (1.24x).

So each candidate is priced as its own prediction plus the delay it passes on: how much later a like
request arriving one mean gap after it would be served, at the best backend it could then choose, than
if this one were placed nowhere (a one-step rollout; the next arrival may dodge the delay by going
elsewhere, at what that costs it). It needs only the alias's arrival rate. With no traffic to speak of,
the next arrival finds every backend as it would anyway, nothing is passed on, and the rule is the
plain lowest prediction. On a model of the bench's two servers (2 slots each, prefill before decode,
Poisson arrivals at 70 % of capacity, virtual time) this moved the median TTFT from level with
least_inflight to 0.88x and kept p99 at 0.56x; looking two to four arrivals ahead gained little more at
the median and gave back at p99. On the real servers (README): the median TTFT 0.81x least_inflight's
and p99 0.51x, where it was 1.24x and 0.60x.

A placement also delays the requests already running where it goes (`imposed`). llama.cpp runs a
newcomer's prompt in the same steps as the running decodes, so each of them stops for its whole prefill:
a short answer's 0.3-0.7 s decode took seconds when a long prompt took the slot beside it, which no
selfish rule prices (the newcomer's own figure is the same whoever it stalls). So on such a server each
candidate is also charged its prefill there once for every request still running when it starts (at
most the other slots). On two real llama.cpp servers with mixed prompt lengths (issue 24, one A/B run,
same arrivals, 3 repeats) this moved p99 E2E to 0.64x the rule without it, p50 E2E 0.88x, p50 TTFT 0.97x,
p99 TTFT 0.93x.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from math import isfinite
from typing import TYPE_CHECKING

from app.routing.predict import booked_figure_at, figure_at

if TYPE_CHECKING:
    from app.record import Estimate
    from app.routing.context import RouteContext
    from app.routing.state import BackendState

# A gap this many times the mean of the ones before it is a pause, not a slow spell of the same traffic
# (Poisson arrivals leave one that long about once in 3,000), if it is also over PAUSE_MIN_S: after a
# burst sent at once the mean is near zero, and a gap of a few seconds is still one the look-ahead can
# see across (queues then drain in seconds), where one of tens of seconds finds every queue gone.
PAUSE_GAPS = 8.0
PAUSE_MIN_S = 10.0


class ArrivalRate:
    """The mean gap between an alias's recent placements: its last `window` arrivals over the time since
    the first of them. A gap over PAUSE_GAPS times that mean (and PAUSE_MIN_S) is a pause, and the window
    starts again at the arrival that ends it: the rate before a pause says nothing of the rate after it.

    Kept across the pause, the window priced the next 16 arrivals as sparse as the pause made them look,
    which all but turns the look-ahead off for them (the passed-on delay is read one mean gap later, when
    every queue has drained). On the real unequal bench (issue 24) each strategy's alias idles ~60-90 s
    between its repeats while the others run: its later repeats started with a window whose mean gap read
    ~6 s for arrivals ~0.6 s apart. A gateway whose traffic pauses and resumes does the same."""

    __slots__ = ("_times",)

    def __init__(self, window: int = 16) -> None:
        self._times: deque[float] = deque(maxlen=window)

    def observe(self, now: float) -> None:
        if self._after_pause(now):
            self._times.clear()
        self._times.append(now)

    def gap(self, now: float) -> float | None:
        """Seconds to the next arrival expected at `now`; None before two arrivals are seen since the last
        pause, and for the arrival that ends one (nothing is known of the rate after it yet)."""
        times = self._times
        if len(times) < 2 or now <= times[0] or self._after_pause(now):
            return None
        return (now - times[0]) / len(times)

    def _after_pause(self, now: float) -> bool:
        times = self._times
        if len(times) < 2:
            return False
        gap = now - times[-1]
        return gap > PAUSE_MIN_S and gap > PAUSE_GAPS * (times[-1] - times[0]) / (len(times) - 1)


def passed_on(candidates: Sequence[BackendState], ctx: RouteContext, estimates: Sequence[Estimate],
              gap: float) -> list[float]:
    """For each candidate, the delay placing this request there passes on to a like request arriving
    `gap` seconds later: the lowest predicted latency (failures priced in) it would then get, less the
    lowest it gets with this one placed nowhere (0: it loses nothing, here or by going elsewhere)."""
    now = ctx.now
    later = now + gap
    # The in-flight book is simulated from now (what is known now), at the later instant.
    return _delays(candidates, ctx, estimates, [figure_at(c, ctx, later, now) for c in candidates], later)


def _delays(candidates: Sequence[BackendState], ctx: RouteContext, estimates: Sequence[Estimate],
            alone: list[float], later: float, known: tuple[int, float] | None = None) -> list[float]:
    """`passed_on`'s delays, from the next arrival's figures at `later` with this request placed nowhere
    (`alone`); `known`: a candidate's figure with this request booked there, where predicted already."""
    unhindered = min(alone)
    out = [0.0] * len(candidates)
    if alone.count(unhindered) == 1:
        # Only the one backend that alone offers the next arrival its best can pass a delay on: placed
        # anywhere else, this request leaves that best untouched (min(here, unhindered) - unhindered <= 0).
        # So one booking is simulated, not one per candidate.
        i = alone.index(unhindered)
        if known is not None and known[0] == i:
            here = known[1]
        else:
            here = _booked_at(candidates[i], ctx, estimates[i], later, ctx.now)
        others = [*alone[:i], *alone[i + 1:]]
        runner_up = min(others) if others else here
        out[i] = max(0.0, min(here, runner_up) - unhindered)
    return out


def _booked_at(c: BackendState, ctx: RouteContext, est: Estimate, later: float, now: float) -> float:
    """The next arrival's figure on `c` at `later` with this request (`est`) booked there."""
    slots = c.model.slots
    if slots is None or c.inflight + 1 < slots:
        # The prediction reads the in-flight book only past the slots: the booking's other fields,
        # given as they would be, predict the same without booking and unbooking.
        return booked_figure_at(c, ctx, later, now)
    saved = book(c, ctx, est)
    try:
        return figure_at(c, ctx, later, now)
    finally:
        unbook(c, saved)


def first_passed_on(candidates: Sequence[BackendState], ctx: RouteContext, estimates: Sequence[Estimate],
                    gap: float, raw: Sequence[float], order: Sequence[int]
                    ) -> tuple[int, list[float], Callable[[], list[float]]]:
    """Which candidate ranks first once `passed_on`'s delay and, where the server stalls its decodes,
    `imposed`'s charge are added to `raw` (latency_aware's scores, every candidate measured), where no
    one reads the scores: the first in `order` of the lowest, as every score computed would rank them,
    with fewer predictions.

    Neither charge is negative, so `raw` bounds each score from below, and a candidate that ranks first
    against the others' lower bounds ranks first against their scores: a stall is priced only for a
    candidate that ranks first while unpriced. The delay falls on one candidate at most, and only raises
    it. So the first without it, f, stays first unless the delay falls on f and outgrows f's lead: with
    f's own two look-ahead figures (the next arrival's alone and with this one booked there) the delay
    is at most their difference, and if f stays first charged that, the other candidates' look-ahead
    figures are not predicted. Otherwise they are, and the delay is `passed_on`'s (the same arithmetic,
    on figures predicted as it predicts them). Monotone rounding keeps each bound a bound in floats.

    Returns the first; bounds of the scores (the first's at least its score, every other's at most its
    own); and a function that completes every score, as latency_aware's `_scores` adds them up, from
    what was predicted so far."""
    n = len(candidates)
    # Each candidate's score without the delay, or, until its stall is priced, the lower bound `raw`.
    scores = list(raw)
    unpriced = [c.stalls_decodes for c in candidates]
    stalls = [0.0] * n

    def price(j: int) -> None:
        unpriced[j] = False
        stalls[j] = imposed(candidates[j], ctx, estimates[j])
        scores[j] = raw[j] + stalls[j]

    def first() -> int:
        while True:
            j = min(order, key=scores.__getitem__)
            if not unpriced[j]:
                return j
            price(j)

    if not isfinite(sum(raw)):
        # An infinite figure's stall may read NaN (inf x 0 requests running), which no bound orders: all priced.
        for j in range(n):
            if unpriced[j]:
                price(j)

    def charged(delay: float) -> float:  # f's score with `delay` passed on, as _scores adds them up
        r = raw[f] + delay
        return r + stalls[f] if candidates[f].stalls_decodes else r

    f = first()
    now = ctx.now
    later = now + gap
    c = candidates[f]
    alone_f = figure_at(c, ctx, later, now)
    here = _booked_at(c, ctx, estimates[f], later, now)
    alone: list[float] = []

    def every_alone() -> list[float]:  # the next arrival's figure on each candidate, predicted once
        if not alone:
            alone.extend(alone_f if j == f else figure_at(candidates[j], ctx, later, now) for j in range(n))
        return alone

    def complete() -> list[float]:
        delays = _delays(candidates, ctx, estimates, every_alone(), later, (f, here))
        for j in range(n):
            if unpriced[j]:
                price(j)
        return [r + d + s if x.stalls_decodes else r + d for r, d, s, x in zip(raw, delays, stalls, candidates)]

    scores[f] = charged(max(0.0, here - alone_f))
    if first() == f:
        return f, scores, complete
    unhindered = min(every_alone())
    if alone.count(unhindered) != 1 or alone.index(unhindered) != f:
        # The delay, if any, falls on another candidate: f stays first.
        return f, scores, complete
    runner_up = min([*alone[:f], *alone[f + 1:]])
    scores[f] = charged(max(0.0, min(here, runner_up) - unhindered))
    return first(), scores, complete


def imposed(c: BackendState, ctx: RouteContext, est: Estimate) -> float:
    """The delay placing this request on `c` imposes on the requests running there: its prefill (`est`'s
    first token less its queue) once for each booked request still running when that prefill starts,
    at most one for each other slot (0 with nothing booked). Only for a server whose running decodes
    stop for a newcomer's prefill (`BackendState.stalls_decodes`)."""
    book = c.book
    if not len(book):
        return 0.0
    m = c.model
    slots, now = m.slots, ctx.now
    start = now + est.queue_s
    running = sum(1 for t in book.finishes(m.tpot(slots or max(1, c.inflight), now), now, slots) if t > start)
    if slots:
        running = min(running, slots - 1)
    return max(0.0, est.ttft_s - est.queue_s) * running


_Saved = tuple[int, int, int, float, float]


def book(c: BackendState, ctx: RouteContext, est: Estimate) -> _Saved:
    """Book the request on `c` as its lease would book it (in flight, in the book, its uncached prompt
    tokens as prefill load); returns what `unbook` restores."""
    reports = c.reports_first_token(ctx.stream, ctx.assembles)
    saved = (c.book_request(ctx.now, est, reports), c.inflight, c.prefilling, c.uncached_inflight, c.prefill_busy_since)
    c.inflight += 1
    if ctx.prefix is not None and ctx.prefix.keys and ctx.cached is not None:
        held = ctx.cached.get(c.name)
        c.start_prefill(max(0.0, ctx.prompt_tokens - (held.tokens if held is not None else 0.0)), ctx.now)
    return saved


def unbook(c: BackendState, saved: _Saved) -> None:
    """Take a `book`ed request off `c` again: its fields restored as they were, not undone by arithmetic
    (float sums would leave residues)."""
    ticket, c.inflight, c.prefilling, c.uncached_inflight, c.prefill_busy_since = saved
    c.book.remove(ticket)


@contextmanager
def booked(c: BackendState, ctx: RouteContext, est: Estimate) -> Iterator[None]:
    """The request `book`ed on `c`, and taken off again on exit."""
    saved = book(c, ctx, est)
    try:
        yield
    finally:
        unbook(c, saved)
