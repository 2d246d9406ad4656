"""Cache writes off the request's path: queued, batched into one pipelined round trip, retried.

A response never waits for its cache write. The writer drains its queue in batches (one Redis
pipeline per batch), retries a failed batch with a short backoff, and counts every write it finally
gives up on (`lost`), so a loaded store shows up in metrics instead of silently dropping entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("slipstream.cache")


@dataclass(frozen=True, slots=True)
class WriteOp:
    """One entry to store: exact (`key`) or semantic (`scope`, `vector`, `query`)."""

    value: bytes
    ttl_s: float
    key: str | None = None
    scope: str | None = None
    vector: np.ndarray | None = None
    query: str | None = None


@dataclass(slots=True)
class WriterStats:
    written: int = 0
    lost: int = 0
    batches: int = 0
    retries: int = 0


class StoreWriter:
    def __init__(self, store, timeout_s: float, max_queue: int, batch_max: int = 256, attempts: int = 3,
                 on_result=None) -> None:
        self._store = store
        self._timeout_s = timeout_s
        self._queue: asyncio.Queue[WriteOp] = asyncio.Queue(max_queue)
        self._batch_max = batch_max
        self._attempts = attempts
        self._on_result = on_result or (lambda ok, exc: None)  # the cache's health bookkeeping
        self._worker: asyncio.Task | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.stats = WriterStats()

    def submit(self, op: WriteOp) -> None:
        """Queue a write; when the queue is full the write is lost (and counted), the request goes on."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())
        try:
            self._queue.put_nowait(op)
            self._idle.clear()
        except asyncio.QueueFull:
            self.stats.lost += 1

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._batch_max and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write(batch)
            if self._queue.empty():
                self._idle.set()

    async def _write(self, batch: list[WriteOp]) -> None:
        for attempt in range(self._attempts):
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._store.write_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any store failure is retried, then counted as dropped
                self._on_result(False, exc)
                if attempt + 1 < self._attempts:
                    self.stats.retries += 1
                    await asyncio.sleep(min(0.05 * 2**attempt, max(0.0, self._timeout_s - (time.monotonic() - t0))))
                    continue
                self.stats.lost += len(batch)
                return
            self._on_result(True, None)
            self.stats.batches += 1
            self.stats.written += len(batch)
            return

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) until everything queued so far is written or given up."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            pass

    async def aclose(self, timeout_s: float = 2.0) -> None:
        await self.drain(timeout_s)
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self.stats.lost += self._queue.qsize()
