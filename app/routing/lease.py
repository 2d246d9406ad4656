"""A lease: one held concurrency slot on a backend, and what routing predicted and booked for it."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from app.record import Estimate
from app.routing.context import RouteContext
from app.routing.output_length import Shape
from app.routing.predict import estimate, forecast
from app.routing.prefix_routing import PrefixMatch, burst_margin_s, burst_wait_s
from app.routing.prefix_routing import match as prefix_match
from app.routing.state import BackendState, slot_scoped_cache
from app.upstream.client import Backend

if TYPE_CHECKING:
    from app.routing.router import Router


class PrefixCopy(asyncio.Event):
    """A request's copy of its prompt's prefix on its backend: set when siblings may reuse it (at the first
    token, or, where the cache belongs to a slot, when the request ends). `computed`, for a call that reports
    its first token (a stream, or a JSON call its backend serves from an upstream stream), is set at that
    token: its prefill is done. Any other JSON call says nothing before it ends (None).

    `first_token_at` is when its request was predicted to reach its first token (monotonic), `ttft_s` that
    prediction's length; `sent_at` when its request was placed, `computed_at` when the copy was computed.
    `lost` says the request ended before it computed the copy: "backend" when its backend failed it (a
    timeout, a refused connection, a 5xx), "ended" otherwise (its client left, a hedge won): a sibling
    waiting for it then has nothing to wait for."""

    def __init__(self, reports_first_token: bool, first_token_at: float = math.inf, ttft_s: float = math.inf,
                 sent_at: float = math.nan) -> None:
        super().__init__()
        self.computed: asyncio.Event | None = asyncio.Event() if reports_first_token else None
        self.first_token_at, self.ttft_s = first_token_at, ttft_s
        self.sent_at, self.computed_at = sent_at, math.nan
        self.lost: Literal["backend", "ended"] | None = None

    @property
    def took_s(self) -> float:
        """How long its request took to compute the copy, from its placement (nan: not computed yet, or not
        known): what a request placed on that backend then took to reach its first token."""
        return self.computed_at - self.sent_at

    def mark_computed(self, now: float) -> None:
        """Its prefill is done (once: the first token, or the end of a call that reports none). A lost copy
        was never computed: its waiters are woken, with no time to hold by (took_s stays nan)."""
        if self.computed is not None and not self.computed.is_set():
            if self.lost is None:
                self.computed_at = now
            self.computed.set()

    @property
    def computed_yet(self) -> bool:
        """Its prefill is done: free for siblings, or (a stream) past its first token."""
        return self.is_set() or (self.computed is not None and self.computed.is_set())


@dataclass(frozen=True, slots=True)
class PrefixWait:
    """How a wait for a sibling's copy of the prefix ended. `outcome`: "ready" (computed, and free or
    reusable), "limit" (computed but still busy at the limit, or a JSON sibling's limit), "lost" (the
    sibling ended without computing it; `backend_failed` when its backend failed it) or "overdue" (a
    timed backend is far past the sibling's predicted first token: it may be stuck)."""

    waited_s: float
    outcome: Literal["ready", "limit", "lost", "overdue"]
    backend_failed: bool = False

    @property
    def reroute(self) -> bool:
        """The copy will not come soon (lost, or overdue): route again rather than compute it here."""
        return self.outcome in ("lost", "overdue")


NO_WAIT = PrefixWait(0.0, "ready")


class Lease:
    """One held slot on a backend; release it exactly once when the upstream call is over."""

    __slots__ = (
        "_copy_id",
        "_held",
        "_keys",
        "_margin_s",
        "_placed",
        "_prefilled",
        "_prefilling",
        "_released",
        "_router",
        "_ticket",
        "_uncached",
        "_waiting",
        "beside_s",
        "burst_wait_s",
        "estimate",
        "forecast",
        "held_s",
        "prefix",
        "queued_s",
        "ranked_as",
        "scores",
        "shape",
        "state",
    )

    def __init__(self, router: Router, state: BackendState, ctx: RouteContext, ahead: int,
                 scores: dict[str, float] | None = None, queued_s: float = 0.0) -> None:
        self._router, self.state, self._released = router, state, False
        state.note_sent(time.monotonic())
        # (alias, shape) the answer's length is learned under, set by the router that leased it.
        self.shape: tuple[str, Shape] | None = None
        self.scores = scores or {}  # what the strategy scored each candidate, for the record
        # What the prefix index believed this backend holds of the prompt when it was chosen.
        self.prefix: PrefixMatch | None = None
        self.burst_wait_s = 0.0
        # The seconds the request waited in the router's wait queue for this slot (every backend of the
        # alias was full): measured, and neither the backend's time nor the gateway's own.
        self.queued_s = queued_s
        self._margin_s = 0.0
        # Set at release: the seconds other requests on the backend decoded while this one did (summed
        # over them; None: it reported no first token), the batch its answer decoded in.
        self.beside_s: float | None = None
        self._keys: list[bytes] = []
        self._copy_id = 0  # its copy of the prefix as the placement feed names it to other replicas (0: not told)
        self._uncached = 0.0
        self._prefilled: PrefixCopy | None = None
        self._prefilling = False
        self._waiting = False  # counted in the backend's copy_waiters
        self._held = False  # counted in the backend's held_back: held at the gateway, not sent yet
        # When it was placed (the decision's instant), and how long it was then held at the gateway before
        # its request was sent (set when the hold ends): of the wait `estimate` predicts, the part before the send.
        self._placed = ctx.now
        self.held_s = 0.0
        # What the ranking predicted for this backend, with every request in flight there ahead of this
        # one: nothing has changed since (the decision and the lease are one synchronous step).
        ranked = ctx.estimates.get(state.name) if ctx.estimates is not None and ahead == state.inflight else None
        if ctx.prefix is not None and ctx.prefix.keys:
            # The ranking's match for this backend, when it made one (the index has not changed since).
            held = ctx.cached.get(state.name) if ctx.cached is not None else None
            if held is None:
                held = prefix_match(state, ctx)
                if ctx.cached is not None:
                    ctx.cached[state.name] = held
                    ranked = None  # predicted without this match: predict again with it
            self.prefix = held
        # What the model predicted for this request on this backend, with the requests ahead of it. A
        # prefix-blind strategy's pick (its context counts no cached prefix) is sent at once, so it reuses
        # what the backend holds settled now: priced as if cold, least_inflight's predictions on eight shared
        # prompts over two real llama.cpp servers read TTFT 2.6-9.6x the measured (issue 24), and with them
        # the backend's error on /admin/backends, its spans and the deadline check.
        settled = self.prefix if ctx.cached is None and self.prefix is not None and self.prefix.ready_at <= ctx.now else None
        self.estimate: Estimate = ranked if ranked is not None else estimate(state, ctx, ahead, settled=settled)
        # What the request records as its prediction (see predict.forecast): the estimate is what it books.
        # Its floor, a sibling's copy still being prefilled, only where the estimate waited for one: a
        # prefix-blind context's (ctx.cached None) counts no copy but a settled one.
        ready_s = self.prefix.ready_at - ctx.now if self.prefix is not None and ctx.cached is not None else 0.0
        self.forecast: Estimate = forecast(self.estimate, state, ctx.now, ready_s)
        # A traced decision's every candidate as the ranking saw it: its predicted first token and the
        # prompt tokens it was believed to hold (for the route span, beside the scores). Untraced, nothing.
        self.ranked_as: dict[str, tuple[float, float]] = {}
        if router.scores_read and ctx.estimates:
            cached = ctx.cached or {}
            self.ranked_as = {name: (e.ttft_s, cached[name].tokens if name in cached else 0.0)
                              for name, e in ctx.estimates.items()}
        # A stream, or a JSON call this backend serves from an upstream stream: its first token is seen.
        reports = state.reports_first_token(ctx.stream, ctx.assembles)
        self._ticket = state.book_request(ctx.now, self.estimate, reports)
        if self.prefix is not None:
            # Record the decision (the approximate index learns from routing); the blocks count as
            # computed from the predicted first token, or as soon as it really comes.
            self.burst_wait_s = burst_wait_s(self.prefix, ctx, state)
            self._margin_s = burst_margin_s(ctx)
            if self.burst_wait_s:
                # Held back (the dispatch loop waits for the copy before it sends anything) until
                # wait_for_prefix ends.
                self._waiting = self._held = True
                state.copy_waiters += 1
                state.held_back += 1
            assert ctx.prefix is not None  # a prefix match needs the prompt's blocks
            self._keys = ctx.prefix.keys
            self._prefilled = PrefixCopy(reports, ctx.now + self.estimate.ttft_s, self.estimate.ttft_s, ctx.now)
            # llama.cpp keeps a prompt's cache in the slot that ran it: a sibling reuses it only once
            # that slot is free again, so there the prefix is ready at the end, not the first token.
            # The estimate already waits for a sibling's copy (its queue is at least the match's
            # ready_at): the burst wait, a limit on that wait of at least a cold prefill, is not added
            # again. Added, each sibling waiting for a busy copy on a real llama.cpp server read as
            # releasing it a cold prefill plus its own wait later than predicted, and a chain of two
            # put the copy 5.9 s away where it freed in about 1 s (issue 24, one server 3x slower: the
            # next sibling went cold to the slow one, 6.4 s).
            # The slot frees at the answer's stall-free end (see Estimate.stall_s); set at the end there
            # (prefilled). One that waits for a busy copy takes that copy over rather than computing another.
            ready = state.place_copy(self._keys, ctx.now, self.estimate.ttft_s, self.estimate.stall_free_e2e_s,
                                     self._prefilled, computes=not self.burst_wait_s)
            self._uncached = max(0.0, ctx.prompt_tokens - self.prefix.tokens)
            state.start_prefill(self._uncached, ctx.now)
            self._prefilling = True
            if (feed := router.placements) is not None:
                # The other gateway replicas hold this copy as this index does (app/routing/remote_copies.py).
                self._copy_id = feed.placed(state.name, self._keys, self.estimate.ttft_s, ready,
                                            computes=not self.burst_wait_s)

    @property
    def backend(self) -> Backend:
        return self.state.backend

    async def wait_for_prefix(self, limit_s: float, cap_s: float = math.inf) -> PrefixWait:
        """Hold back while a sibling prefills this request's prefix here; says how long and how it ended.
        While the sibling's stream has not reached its first token, the wait is bounded by `cap_s` (the
        request's deadline) and, on a backend whose prefill is timed, by the sibling running far past
        its predicted first token (twice its predicted time, and at least `limit_s` past it): a copy
        computed now on the same backend shares the compute of the one under way and is ready no
        sooner, unless that one is stuck. Once it is computed (or for a sibling that will not say so),
        at most `limit_s` more for it to be free, or as long as the copy took to compute (hold_limit). A
        sibling that ends without computing the copy ends the wait at once ("lost"), as does an overdue
        one: the caller routes the request again.

        Seen on two llama.cpp servers (issue 24, closed-loop burst of 6 clients on 4 shared prompts): before
        either server was timed, the limit was priced at the prior's cold prefill (~0.1 s) plus the 2 s
        margin, so a sibling stopped waiting while the copy was still being prefilled (its first token
        at 3.4 s), prefilled the same prompt cold in the other slot beside it (first token at 5.8 s,
        stalling the first request's decode for 3 s), and the third request, which was still waiting,
        was served from the cache at 6.5 s. With the wait kept, no prompt was prefilled twice on one
        server in three bursts; siblings were served from the cache 0.4-1.0 s after the copy's first token.
        Without the lost and overdue ends, siblings behind a copy stuck on a hung backend waited for its
        first-token timeout (60 s by default) and were then sent to the same backend."""
        try:
            return await self._wait_for_prefix(limit_s, cap_s)
        finally:
            self.sent_on()

    @property
    def predicted_wait_s(self) -> float:
        """The wait for the first token predicted from the request's send: the estimate's, from the
        placement, less the time it was held at the gateway since (a request held for a sibling's copy of
        its prefix was predicted to wait for it)."""
        return max(0.0, self.estimate.ttft_s - self.held_s)

    def sent_on(self) -> None:
        """The hold at the gateway is over (once): the request goes to its backend, or is routed again."""
        if self._held:
            self._held = False
            self.held_s = max(0.0, time.monotonic() - self._placed)
            self.state.held_back = max(0, self.state.held_back - 1)

    async def _wait_for_prefix(self, limit_s: float, cap_s: float) -> PrefixWait:
        leader = self.prefix.leader if self.prefix else None
        if leader is None:
            return NO_WAIT
        if limit_s <= 0:  # no time to wait (a deadline spent): sent at once, the copy free or not
            return NO_WAIT if leader.is_set() else PrefixWait(0.0, "limit")
        start = time.monotonic()
        copy = leader if isinstance(leader, PrefixCopy) else None
        computed = copy.computed if copy is not None else None
        try:
            if computed is not None and not computed.is_set():
                bound = cap_s
                if copy is not None and self.state.model.prefill.samples and math.isfinite(copy.first_token_at):
                    overdue_at = copy.first_token_at + max(copy.ttft_s, limit_s)
                    bound = min(cap_s, max(0.0, overdue_at - start))
                # Set before the copy is (the lease sets it first, on its end too, whatever the outcome).
                try:
                    await asyncio.wait_for(computed.wait(), None if math.isinf(bound) else bound)
                except TimeoutError:
                    if bound < cap_s:
                        return PrefixWait(time.monotonic() - start, "overdue")
                    raise
            # A lost copy is set when its request ends: the wait below returns at once, and says so.
            left = min(self.hold_limit(limit_s), cap_s - (time.monotonic() - start))
            if left > 0:
                await asyncio.wait_for(leader.wait(), left)
        except TimeoutError:
            return PrefixWait(time.monotonic() - start, "limit")
        if copy is not None and copy.lost is not None:
            return PrefixWait(time.monotonic() - start, "lost", copy.lost == "backend")
        # The deadline can run out with no time left for the wait above: the copy is still busy.
        return PrefixWait(time.monotonic() - start, "ready" if leader.is_set() else "limit")

    def hold_limit(self, limit_s: float) -> float:
        """How long, once the sibling's copy is computed, to wait more for it to be free: `limit_s` (the
        burst wait, priced when the request was placed), or the time the copy took to compute plus the
        burst margin if longer. The copy's own first token says what computing the prompt again on this
        backend costs now; the placement priced it at the backend's model, which before the backend is
        timed is the prior's (a GPU's rate: ~0.12 s for a ~370-token prompt on a CPU llama.cpp server that
        took 3.7 s). Past the limit the request is sent, and on a server whose cache belongs to a slot it
        is computed cold in whichever slot frees first, pushing out the prompt there.

        The time runs from the copy's placement, so a copy whose request was itself held for an earlier
        one (and then served warm) counts that hold too: along a chain of siblings each waiting for the
        last one's copy, the limit grows by each hold (scripted, one backend, a 0.3 s prefill, 0.7 s
        answers, a 0.15 s placement limit: 0.40, 0.85, 1.60, 2.34 s), not at what computing it costs."""
        copy = self.prefix.leader if self.prefix is not None else None
        took = copy.took_s if isinstance(copy, PrefixCopy) else math.nan
        return max(limit_s, took + self._margin_s) if took > 0 else limit_s

    def prefilled(self, done: bool = False) -> None:
        """The first token came (or, with `done`, the call ended): the prompt is computed and no longer
        load, and siblings waiting for its prefix may go."""
        if self._prefilled is None or self._prefilled.is_set():
            return
        copy = self._prefilled
        # Once: on a slot-scoped cache this runs again at the end, which must not move when the copy was
        # computed (hold_limit reads it).
        copy.mark_computed(time.monotonic())
        if self._uncached:
            self.state.uncached_inflight = max(0.0, self.state.uncached_inflight - self._uncached)
            self._uncached = 0.0
        if self._waiting:
            self._waiting = False
            self.state.copy_waiters = max(0, self.state.copy_waiters - 1)
        if self._prefilling:
            self._prefilling = False
            self.state.prefilling = max(0, self.state.prefilling - 1)
            self.state.prefill_busy_since = time.monotonic()
            if self._copy_id and copy.lost is None and (feed := self._router.placements) is not None:
                feed.computed(self._copy_id)
        if done or not slot_scoped_cache(self.state):
            self.state.free_copy(self._keys, copy, time.monotonic())

    def first_token(self) -> None:
        """The stream's first token came: the request holds a slot and decodes from now (in the book)."""
        if not self._released:
            self.state.book.first_token(self._ticket, time.monotonic())

    def progress(self, events: int) -> None:
        """`events` of the stream's events are out: how far its decode has got (in the book)."""
        if not self._released:
            self.state.book.progress(self._ticket, max(0, events - 1), time.monotonic())

    def release(self, backend_failed: bool = False, failed: bool = False) -> None:
        """Give the slot back (once). `failed`: the request ended in an error, `backend_failed` one its
        backend caused; a copy of the prefix it never computed is then lost to the siblings waiting."""
        if not self._released:
            self._released = True
            self.sent_on()
            copy = self._prefilled
            if (failed or backend_failed) and copy is not None and not copy.computed_yet:
                copy.lost = "backend" if backend_failed else "ended"
            self.prefilled(done=True)
            if self._copy_id and copy is not None and (feed := self._router.placements) is not None:
                feed.freed(self._copy_id, copy.lost)
            self.beside_s = self.state.book.remove(self._ticket, time.monotonic())
            self._router._release(self.state)

