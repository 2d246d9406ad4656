"""What the gateway learned about one request, as plain data for the record stage (logs, metrics, spans)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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
    usage: Usage | None = None

    @property
    def duration_s(self) -> float:
        return self.finished - self.received if self.finished else 0.0

    @property
    def ttft_s(self) -> float | None:
        return self.first_token - self.received if self.first_token else None
