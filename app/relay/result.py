"""What a relayed stream came to, as one value: the relay's answer to the pipeline (app.relay.loop.Relay)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.record import Outcome, Usage


@dataclass(slots=True)
class RelayResult:
    """Each field has one writer: the loop its outcome and instants, one filter each of the others
    (app.relay.filters: ModelName, UsageFilter, FinishReasons). Read it once the relay has ended."""

    outcome: Outcome = Outcome.OK
    error_type: str | None = None
    status: int = 200  # the status a broken stream is recorded with (the client already got 200)
    first_token: float = 0.0  # perf_counter instant of the first data event relayed
    finished: float = 0.0
    response_model: str | None = None  # as the backend named it, before the alias rename
    usage: Usage | None = None
    finish_reasons: list[str] = field(default_factory=list)
    complete: bool = False  # ended with [DONE] (or every choice finished), not broken and not abandoned
