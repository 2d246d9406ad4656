"""One owner per upstream attempt: the backend slot (lease), the attempt's record and its upstream reply.

The dispatcher creates the owner the moment a slot is leased; from then on exactly one `close()` gives
everything back (the connection, the slot, the outcome to the backend's health), whatever path the
request takes: an exception, a stream that never started, the client gone, a hedge that lost, shutdown.
"""

from __future__ import annotations

import time

from app.errors import UPSTREAM_FAILURES, GatewayError
from app.record import AttemptRecord, Event, RequestRecord
from app.routing.router import Lease, Router


class AttemptOwner:
    __slots__ = ("lease", "attempt", "result", "_router", "_record", "closed")

    def __init__(self, router: Router, lease: Lease, attempt: AttemptRecord, record: RequestRecord) -> None:
        self.lease, self.attempt, self._router, self._record = lease, attempt, router, record
        self.result = None  # the transport's JsonReply or event stream, once it answered
        self.closed = False

    def close(self, err: BaseException | None = None, report: bool = True) -> None:
        """Give back the connection and the slot, and report the outcome; only the first call acts.

        `err` is why the attempt ended early: a GatewayError counts toward the backend's health as
        the router judges it; anything else (cancellation, a bug) reports nothing against the backend.
        With `report=False` the caller reports later (a 5xx whose blame depends on the other backends).
        """
        if self.closed:
            return
        self.closed = True
        a = self.attempt
        try:
            if self.result is not None:
                self.result.close()
        finally:
            self.lease.release()
            if not a.end:
                a.end = time.perf_counter()
            if isinstance(err, GatewayError):
                a.status, a.error_type = err.status, err.code or err.type
            elif err is not None:
                a.error_type = "cancelled"
            if report and (err is None or isinstance(err, UPSTREAM_FAILURES)):
                changed = self._router.report(self.lease.state, err)
                if changed is not None:
                    self._record.events.append(Event(time.perf_counter(), f"breaker.{changed.value}",
                                                     {"slipstream.backend": a.backend}))
