"""What the gateway learned about one request, as plain data for the record stage (logs, metrics, spans).

A RequestRecord is written by the pipeline alone (from the values the stages return: admission's
Admitted, dispatch's DispatchLog, the relay's RelayResult) and closed by telemetry. An AttemptRecord is
written by its attempt's owner alone (app.dispatch.attempt).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from app.upstream.adapters import NO_REPORT, BackendReport

# Where a timing figure came from: timed by the gateway, reported by the backend, or estimated (the
# latency model's, or inferred from other figures). Every figure that says so uses these words.
MEASURED, REPORTED, ESTIMATED = "measured", "reported", "estimated"


class Outcome(Enum):
    OK = "ok"
    CLIENT_ERROR = "client_error"
    UPSTREAM_ERROR = "upstream_error"
    STREAM_BROKEN = "stream_broken"
    CLIENT_GONE = "client_disconnected"


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = "reported"  # usage always comes from the backend; the gateway never guesses it


@dataclass(slots=True)
class Estimate:
    """What the latency model predicts for one request on one backend (seconds; always an estimate)."""

    queue_s: float
    ttft_s: float
    e2e_s: float
    decode_tokens: float  # tokens after the first, as predicted
    # Of e2e_s, the time the answer is expected to stand still for neighbours' prefills (see
    # AnswerDecode.stall): part of when it ends, not of how long it holds its slot's prompt cache.
    stall_s: float = 0.0

    @property
    def stall_free_e2e_s(self) -> float:
        """When the answer is predicted to end were it not to stand still: what routing ranks by (the
        arrivals that stall it are charged for that where they are placed) and how long a llama.cpp slot
        holds its prompt's copy."""
        return self.e2e_s - self.stall_s


@dataclass(slots=True)
class AttemptRecord:
    """One upstream call: gateway-measured instants (perf_counter), the backend's own report, outcome."""

    number: int
    alias: str
    backend: str
    flavor: str
    server_address: str
    server_port: int
    request_model: str
    stream: bool
    start: float
    load: int = 0  # requests in flight at this backend when it was chosen (this one included)
    # The backend's count of requests leased there when this one was sent (BackendState.sent, this one
    # included); None: not known.
    sent: int | None = None
    # What the latency model forecast for this attempt (an estimate): what it reports, and its error.
    predicted: Estimate | None = None
    # The estimate its lease booked and routing ranked it by (`predicted` reads the residual queue as
    # the typical wait, this as the mean: app/routing/predict.forecast): what the learner judges its
    # waits against, so that what a request reports never changes what routing learns.
    booked: Estimate | None = None
    headers: float = 0.0
    first_event: float = 0.0
    progress: tuple[int, float] = (0, 0.0)  # (events, instant) of the last decode-speed sample
    end: float = 0.0
    status: int = 0
    error_type: str | None = None
    report: BackendReport = NO_REPORT
    response_model: str | None = None
    span: Any = None  # the live CLIENT span, when tracing
    # What the prefix index believed the backend held of this prompt when it was chosen (an estimate),
    # the time spent waiting for a sibling to prefill it, and the cached tokens the backend reported.
    prefix: Any = None  # app.routing.prefix_routing.PrefixMatch
    burst_wait_s: float = 0.0
    # Before it was sent: the seconds it waited at the gateway for a free slot (every backend full).
    slot_wait_s: float = 0.0
    cached_reported: int | None = None

    @property
    def routed(self) -> float:
        """When it began to wait for its backend (a free slot, a sibling's prefix): its start less those waits."""
        return self.start - self.slot_wait_s - self.burst_wait_s


@dataclass(slots=True)
class Event:
    at: float
    name: str
    attributes: dict


@dataclass(slots=True)
class RouteDecision:
    alias: str
    strategy: str
    chosen: str
    at: float
    end: float
    candidates: dict[str, float | int | str] = field(default_factory=dict)  # backend -> its figure (predicted s, or load)
    reason: str = ""
    # Traced decisions: each ranked candidate's predicted TTFT (s, estimated) and the prompt tokens it was
    # believed to hold cached (the prefix index's estimate): why a score is what it is.
    predicted_ttft_s: dict[str, float] = field(default_factory=dict)
    believed_cached_tokens: dict[str, float] = field(default_factory=dict)


class RequestIds:
    """Random request ids (32 hex digits, as uuid4().hex was), drawn from the OS 256 at a time: one
    getrandom call per 256 requests instead of one per request plus a UUID object."""

    __slots__ = ("_at", "_pool")

    def __init__(self) -> None:
        self._pool, self._at = b"", 0

    def next(self) -> str:
        at = self._at
        if at >= len(self._pool):
            self._pool, at = os.urandom(16 * 256), 0
        self._at = at + 16
        return self._pool[at:at + 16].hex()


@dataclass(slots=True)
class RequestRecord:
    """Gateway-measured times are time.perf_counter() instants; zero means "did not happen"."""

    request_id: str
    endpoint: str
    received: float
    tenant: str = ""
    alias: str = ""
    backend: str = ""
    stream: bool = False
    status: int = 200
    outcome: Outcome = Outcome.OK
    error_type: str | None = None
    first_token: float = 0.0
    finished: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)
    attempts: int = 0
    retries: int = 0
    fallback: str | None = None
    cache: str = "bypass"
    cache_category: str | None = None  # the question's category (app/cache/category.py); None when bypassed
    cache_start: float = 0.0
    cache_end: float = 0.0
    embed_s: float = 0.0
    similarity: float | None = None
    response_model: str | None = None
    prompt_tokens_hint: int = 0  # an estimate for the latency model; never reported as usage
    attempt_log: list[AttemptRecord] = field(default_factory=list)
    answered_by: AttemptRecord | None = None  # the attempt whose answer the client got (set once, by the pipeline)
    routes: list[RouteDecision] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    params: dict | None = None  # max_tokens, temperature, top_p, seed: span attributes
    body: dict | None = None  # the request body, kept only while content capture is on
    output_text: str | None = None
    span: Any = None  # the live SERVER span, when tracing
    usage: Usage | None = None
    prefix: Any = None  # the prompt's block keys (app.routing.prefix_index.PromptBlocks)
    # With a latency target: "met" (predicted), "unmeetable" (served degraded or by a fallback), "shed".
    target_result: str | None = None

    @property
    def duration_s(self) -> float:
        return self.finished - self.received if self.finished else 0.0

    @property
    def ttft_s(self) -> float | None:
        return self.first_token - self.received if self.first_token else None
