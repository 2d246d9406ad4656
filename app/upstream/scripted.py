"""A scripted transport: each upstream call plays the next step of a script, as httpx's MockTransport.

Shipped with the code so retry, fallback, relay and hedging tests run in milliseconds from scripts of
upstream events, with the same timeouts, status shaping and stream framing as the real transport.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import orjson

from app.errors import FirstTokenTimeout, GatewayError, UpstreamProtocolError, UpstreamTimeout
from app.upstream.attempt import (
    AttemptTiming,
    JsonReply,
    _total_timeout,
    json_object,
    redact,
    redact_events,
    status_error,
)
from app.upstream.client import Backend
from app.upstream.transport import UpstreamCall


def completion(text: str = "ok", model: str = "m") -> dict:
    """A minimal chat completion body."""
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def chunks(text: str = "ok", model: str = "m") -> list[dict]:
    """The chat chunks of a short streamed answer, one per character, the last with its finish reason."""
    out = [{"id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": {"content": ch}, "finish_reason": None}]} for ch in text]
    out.append({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


@dataclass
class Reply:
    """A whole (non-streamed) answer after `delay_s`; any status, any body."""

    body: dict | bytes = field(default_factory=completion)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Stream:
    """An event stream: first event after `delay_s`, then one every `gap_s`; `cut` breaks it after its
    chunks (no [DONE]); `done=False` ends it cleanly without [DONE]."""

    events: list[dict | bytes] = field(default_factory=lambda: list[dict | bytes](chunks()))
    delay_s: float = 0.0
    gap_s: float = 0.0
    done: bool = True
    cut: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Fail:
    """The attempt fails with `error` after `delay_s` (a refused connection, a reset...)."""

    error: GatewayError
    delay_s: float = 0.0


@dataclass
class Hang:
    """The backend accepts and never answers: only the attempt's timeouts or the deadline end it."""


Step = Reply | Stream | Fail | Hang


@dataclass
class Call:
    backend: str
    body: dict
    stream: bool
    path: str = ""  # the endpoint path the attempt called (chat/completions, messages, ...)
    headers: dict[str, str] = field(default_factory=dict)  # the extra headers it sent (trace, anthropic-*)


class ScriptedTransport:
    """Plays `script`: a list of steps in call order, a dict of per-backend lists, or a function
    (backend name, call number) -> step. `calls` records what was sent; `open_streams` what is not closed."""

    def __init__(self, script: Iterable[Step] | dict[str, Iterable[Step]] | Callable[[str, int], Step]) -> None:
        if callable(script):
            self._pick = script
        elif isinstance(script, dict):
            steps = {name: iter(s) for name, s in script.items()}
            self._pick = lambda name, n: next(steps[name])
        else:
            it = iter(script)
            self._pick = lambda name, n: next(it)
        self._count = itertools.count()
        self.calls: list[Call] = []
        self.open_streams = 0
        self.in_flight = 0
        self.max_in_flight = 0

    async def send(self, backend: Backend, call: UpstreamCall) -> JsonReply | ScriptedStream:
        self.calls.append(Call(backend.name, orjson.loads(call.body), call.stream, call.path, dict(call.headers or {})))  # before the pick: it may look
        step = self._pick(backend.name, next(self._count))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._play(step, backend, call)
        finally:
            self.in_flight -= 1

    async def _play(self, step: Step, backend: Backend, call: UpstreamCall) -> JsonReply | ScriptedStream:
        t = call.timeouts
        total = call.deadline.cap(t.total_s)
        limit = min(total, t.first_token_s) if call.stream else total
        timing = AttemptTiming(time.perf_counter())
        delay = float("inf") if isinstance(step, Hang) else step.delay_s
        if delay > limit:
            await asyncio.sleep(limit)
            if call.stream and limit < total:
                raise FirstTokenTimeout(backend.name, t.first_token_s)
            raise _total_timeout(backend.name, total < t.total_s)
        if delay:
            await asyncio.sleep(delay)
        timing.headers = time.perf_counter()
        if isinstance(step, Fail):
            raise step.error
        if isinstance(step, Reply):
            body = redact(step.body if isinstance(step.body, bytes) else orjson.dumps(step.body), backend)
            timing.end = time.perf_counter()
            if step.status != 200:
                raise status_error(step.status, step.headers.get("retry-after"), body, backend)
            return JsonReply(backend, 200, body, dict(step.headers), timing, data=json_object(body, backend))
        if not call.stream:
            raise UpstreamProtocolError(f"backend {backend.name} streamed an answer that was not asked for")
        assert isinstance(step, Stream)  # a Hang never gets past its delay
        timing.first_event = time.perf_counter()
        self.open_streams += 1
        return ScriptedStream(backend, dict(step.headers), timing, step, self, time.monotonic() + total, t.idle_s)


class ScriptedStream:
    """The EventStream interface (batches, close) over a Stream step."""

    usage_reported = True  # what the script's events say is the backend's count (EventStream.usage_reported)

    def __init__(self, backend: Backend, headers: dict[str, str], timing: AttemptTiming, step: Stream,
                 owner: ScriptedTransport, end: float, idle_s: float) -> None:
        self.backend, self.headers, self.timing = backend, headers, timing
        self._step, self._owner, self._end, self._idle_s = step, owner, end, idle_s
        self._closed = False

    async def batches(self) -> AsyncIterator[list[bytes]]:
        step = self._step
        events = [b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) for e in step.events]
        if self.backend.secret:  # as the real transport: every event redacted before anyone sees it
            events = redact_events(events, self.backend.secret)
        for i, event in enumerate(events):
            if i and step.gap_s:
                wait = min(step.gap_s, self._idle_s, max(0.0, self._end - time.monotonic()))
                await asyncio.sleep(wait)
                if wait < step.gap_s:
                    if time.monotonic() >= self._end - 0.001:
                        raise _total_timeout(self.backend.name, False)
                    raise UpstreamTimeout(f"backend {self.backend.name} sent nothing for {self._idle_s:g}s mid-stream",
                                          code="stream_idle_timeout")
            yield [event]
        if step.cut:
            raise UpstreamProtocolError(f"backend {self.backend.name} closed the connection mid-response")
        if step.done:
            yield [b"data: [DONE]"]
        self.timing.end = time.perf_counter()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner.open_streams -= 1

    async def aclose(self) -> None:
        self.close()
