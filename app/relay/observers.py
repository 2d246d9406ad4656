"""Relay observers: side jobs that watch a stream go by (app.relay.loop.Observer) and never call back into it."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.protocols.base import Assembler

# Every this many data events, a stream's recent decode speed is reported (an early TPOT sample).
PROGRESS_EVENTS = 8


class CacheFill:
    """Assembles the streamed answer; hands it to `save` only when the stream ended complete."""

    __slots__ = ("_save", "assembler")

    def __init__(self, assembler: Assembler, save: Callable[[dict], None]) -> None:
        self.assembler = assembler
        self._save = save

    def on_event(self, data: bytes) -> None:
        self.assembler.feed(data)

    def on_end(self, complete: bool) -> None:
        if complete and not self.assembler.broken:
            self._save(self.assembler.result())


class CaptureAnswer:
    """Content capture for a stream: the answer as the client got it, handed to `keep` at the end
    (complete or not). Only attached while content capture is on."""

    __slots__ = ("_keep", "assembler")

    def __init__(self, assembler: Assembler, keep: Callable[[dict], None]) -> None:
        self.assembler = assembler
        self._keep = keep

    def on_event(self, data: bytes) -> None:
        self.assembler.feed(data)

    def on_end(self, complete: bool) -> None:
        self._keep(self.assembler.result())


class Progress:
    """Reports (events so far, now) every PROGRESS_EVENTS data events: the latency model's early TPOT."""

    __slots__ = ("_report", "events")

    def __init__(self, report: Callable[[int, float], None]) -> None:
        self.events = 0
        self._report = report

    def on_event(self, data: bytes) -> None:
        self.events += 1
        if self.events % PROGRESS_EVENTS == 0:
            self._report(self.events, time.perf_counter())

    def on_end(self, complete: bool) -> None:
        pass
