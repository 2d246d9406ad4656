"""What the wait queue needs of the request it holds: who it is for, how urgent, until when.

Admission builds it (`Admitted.queue`); the pipeline hands it to dispatch, which gives the router the
alias's version of it (a TTFT target may bring the deadline forward) when it asks for a slot. Passed
by hand, never through a context variable: who may note a request's wait shows in the signatures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.admission.priority import INTERACTIVE, Priority


@dataclass(frozen=True, slots=True)
class QueueContext:
    tenant: str = ""
    priority: Priority = INTERACTIVE
    weight: float = 1.0
    deadline: float = float("inf")  # monotonic seconds
    # Called with ("queued" | "shed", seconds waited, extra span attributes): the admitted request's own
    # note (app.admission.service.Admitted.queue_note: its metrics and span events), never the record.
    note: Callable[[str, float, dict], None] | None = field(default=None, repr=False)
