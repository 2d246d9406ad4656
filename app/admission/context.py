"""What the wait queue needs of the request it holds, without threading it through every stage.

Admission sets it once per request; the router reads it only when the request must wait for a slot.
A context variable follows the request into every task it spawns (hedges included) and no further.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from app.admission.priority import INTERACTIVE, Priority


@dataclass(slots=True)
class QueueContext:
    tenant: str = ""
    priority: Priority = INTERACTIVE
    weight: float = 1.0
    deadline: float = float("inf")  # monotonic seconds
    # Called with ("queued" | "shed", seconds waited, extra span attributes): the admitted request's own
    # note (app.admission.service.Admitted.queue_note: its metrics and span events), never the record.
    note: Callable[[str, float, dict], None] | None = field(default=None, repr=False)


CURRENT: ContextVar[QueueContext | None] = ContextVar("slipstream_queue_context", default=None)
