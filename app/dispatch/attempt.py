"""One upstream attempt, owned: the backend slot (lease), the attempt's record and its upstream reply.

The dispatcher creates the `Attempt` the moment a slot is leased and, if it answers, hands it back to the
pipeline as the winner (app.dispatch.loop.Dispatched). From then on it is the only writer of its
AttemptRecord, through its methods: `answered` (headers and first event), `add_report` (the backend's own
timings), `progress` (decode-speed samples) and `end`. `end` runs its work exactly once, whatever path
the request takes (a JSON answer, a stream's end, the client gone, a hedge that lost, the deadline, an
exception, shutdown): it gives back the connection and the slot, reports the outcome to the backend's
health and, for an answer delivered whole, feeds the learner once. Routing reads the record; it never
writes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from app.errors import UPSTREAM_FAILURES, GatewayError
from app.record import AttemptRecord, Event
from app.upstream.adapters import BackendReport

if TYPE_CHECKING:
    from app.routing.lease import Lease
    from app.routing.prefix_index import PromptBlocks
    from app.routing.router import Router
    from app.upstream.attempt import AttemptTiming, EventStream, JsonReply


class Attempt:
    """The owner of one upstream attempt (was AttemptOwner): see the module docstring."""

    __slots__ = ("_blocks", "_events", "_prompt_hint", "_router", "ended", "lease", "record", "result")

    def __init__(self, router: Router, lease: Lease, record: AttemptRecord, events: list[Event],
                 prompt_hint: int = 0, blocks: PromptBlocks | None = None) -> None:
        self.lease, self.record, self._router, self._events = lease, record, router, events
        # What the learner needs of the request: the prompt's estimated size and its block keys.
        self._prompt_hint, self._blocks = prompt_hint, blocks
        self.result: JsonReply | EventStream | None = None  # the transport's reply, once it answered
        self.ended = False

    def traced(self, span: object) -> None:
        """The attempt's live CLIENT span (None: not traced), ended by telemetry with the request."""
        self.record.span = span

    def answered(self, timing: AttemptTiming, streamed: bool, prompt_tokens: int) -> None:
        """The backend answered (its whole JSON body, or a stream's first event): note its instants, and
        let routing learn a stream's network and queue now rather than when its decode ends."""
        a = self.record
        a.headers, a.first_event, a.status, a.stream = timing.headers, timing.first_event, 200, streamed
        if streamed:
            self.lease.prefilled()
            self.lease.first_token()
            self._router.learner.first_token(a, prompt_tokens)

    def add_report(self, report: BackendReport) -> None:
        """The backend's own report (llama.cpp timings, cached tokens), completing what it said before."""
        self.record.report = report.merged(self.record.report)

    def progress(self, events: int, now: float) -> None:
        """A stream is `events` data events into its decode: an early decode-speed sample for routing."""
        a = self.record
        last = a.progress if a.progress[1] else (1, a.first_event)
        a.progress = (events, now)
        self.lease.progress(events)
        self._router.learner.progress(a, self.lease.state, last, events, now)

    def end(self, err: BaseException | None = None, *, complete: bool = False, output_tokens: int = 0,
            report: bool = True, at: float = 0.0) -> None:
        """Give back the connection and the slot, report the outcome, learn; only the first call acts.

        `err` is why the attempt ended early: a GatewayError counts toward the backend's health as the
        router judges it; anything else (cancellation, a bug) reports nothing against the backend.
        `complete`: the answer reached the client whole (only then do its timings teach the latency
        model), with `output_tokens` from its usage. With `report=False` the caller reports to health
        later (a 5xx whose blame depends on the other backends' answers). `at`: when the answer ended, if
        the transport did not note it (a relay that stopped at [DONE] before the stream's own end).
        """
        if self.ended:
            return
        self.ended = True
        a = self.record
        try:
            if self.result is not None:
                self.result.close()
        finally:
            self.lease.release(backend_failed=isinstance(err, UPSTREAM_FAILURES), failed=err is not None)
            result_end = self.result.timing.end if self.result is not None else 0.0
            a.end = result_end or at or time.perf_counter()
            if isinstance(err, GatewayError):
                a.status, a.error_type = err.status, err.code or err.type
            elif err is not None:
                a.error_type = "cancelled"
            if report and (err is None or isinstance(err, UPSTREAM_FAILURES)):
                changed = self._router.report(self.lease, err)
                if changed is not None:
                    self._events.append(Event(time.perf_counter(), f"breaker.{changed.value}",
                                              {"slipstream.backend": a.backend}))
            if complete and err is None:
                cached = self._router.learner.learn(a, self._prompt_hint, output_tokens, self._blocks, self.lease.shape,
                                                    self.lease.beside_s)
                if cached is not None:
                    a.cached_reported = cached
