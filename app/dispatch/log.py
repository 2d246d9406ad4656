"""What dispatch did for one request, as its own value: written by dispatch alone, read by the pipeline.

Dispatch never writes the request's record: its attempts, routing decisions, retries, fallback, latency
target verdict and span events collect here, and the pipeline copies them into the RequestRecord when
the request ends (on every path, a failed dispatch included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.record import AttemptRecord, Event, RouteDecision


@dataclass(slots=True)
class DispatchLog:
    endpoint: str  # the request's operation, for the attempt spans' names
    parent_span: Any = None  # the request's live SERVER span, when tracing: attempt spans hang under it
    # Span events of the request's stages up to its answer; admission's notes share the list.
    events: list[Event] = field(default_factory=list)
    attempts: int = 0  # attempts begun (a slot asked for), leased or not
    attempt_log: list[AttemptRecord] = field(default_factory=list)
    routes: list[RouteDecision] = field(default_factory=list)
    retries: int = 0
    fallback: str | None = None
    target_result: str | None = None  # "met" | "unmeetable" | "shed", with a latency target
    prompt_tokens_hint: int = 0  # the prompt-size estimate routing used (never reported as usage)
    prefix: Any = None  # the prompt's block keys (app.routing.prefix_index.PromptBlocks)
