"""The transport seam: one upstream call in, a whole JSON reply or an open event stream out.

Retries, fallback, hedging and the relay only ever see this interface, so their tests run from a
script of upstream events (app.upstream.scripted) instead of a live server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.config import Timeouts
from app.deadline import Deadline
from app.upstream.attempt import EventStream, JsonReply, call_json, open_stream
from app.upstream.client import Backend


@dataclass(slots=True)
class UpstreamCall:
    """What one attempt sends: the endpoint path, the body for this backend, and its time limits."""

    path: str
    body: bytes
    stream: bool
    timeouts: Timeouts
    deadline: Deadline
    headers: dict[str, str] | None = None  # extra headers (trace context)


class Transport(Protocol):
    async def send(self, backend: Backend, call: UpstreamCall) -> JsonReply | EventStream:
        """The backend's answer, or a GatewayError for anything that is not a usable one."""
        ...


class HttpTransport:
    """The real transport: aiohttp, one pooled session per backend (app.upstream.client)."""

    async def send(self, backend: Backend, call: UpstreamCall) -> JsonReply | EventStream:
        if call.stream:
            return await open_stream(backend, call.path, call.body, call.timeouts, call.deadline, call.headers)
        return await call_json(backend, call.path, call.body, call.timeouts, call.deadline, call.headers)
