"""A continuous-batching backend in miniature: slots, a FIFO queue, prefill and per-step decode costs."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field

from app.config import FaultConfig, SimBackendConfig
from app.tools.simulator.kv_cache import PrefixCache


@dataclass(slots=True)
class Stats:
    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    errors: int = 0
    last_traceparent: str | None = None  # what the caller forwarded, so tests can follow a trace across

    def as_dict(self) -> dict:
        return {"requests": self.requests, "completed": self.completed, "cancelled": self.cancelled,
                "errors": self.errors, "last_traceparent": self.last_traceparent}


@dataclass(slots=True)
class Plan:
    """What will happen to one request, decided when it arrives (seeded, so runs are reproducible)."""

    output_tokens: int
    finish_reason: str
    fault: str | None = None  # "error" | "rate_limit" | "hang" | "stall" | "disconnect"
    fault_at: int = 0  # token index where a mid-stream fault strikes


@dataclass(slots=True)
class Timings:
    """The backend's own view of a request, in seconds (what llama.cpp and TGI report)."""

    arrived: float
    cached_tokens: int = 0  # prompt tokens found in the prefix cache: not prefilled again
    admitted: float = 0.0
    prefilled: float = 0.0
    finished: float = 0.0

    @property
    def queue_s(self) -> float:
        return self.admitted - self.arrived

    @property
    def prefill_s(self) -> float:
        return self.prefilled - self.admitted

    @property
    def decode_s(self) -> float:
        return self.finished - self.prefilled


@dataclass
class Engine:
    name: str
    config: SimBackendConfig
    seed: int
    faults: FaultConfig = field(init=False)
    cache: PrefixCache = field(init=False)
    stats: Stats = field(default_factory=Stats)
    running: int = 0
    queued: int = 0

    def __post_init__(self) -> None:
        self.faults = self.config.faults
        self.cache = PrefixCache(self.config.prefix_cache_tokens)
        self._prefill_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.config.slots)
        # Text depends on the seed alone (replicas of one model answer alike); faults differ per backend.
        self._fault_rng = random.Random(f"{self.seed}:{self.name}:faults")

    def plan(self, rng: random.Random, max_tokens: int | None, ignore_eos: bool) -> Plan:
        out = self.config.output
        natural = min(out.max, max(1, round(out.median * math.exp(rng.gauss(0.0, out.sigma)))))
        if max_tokens is not None and (ignore_eos or natural >= max_tokens):
            n, reason = max_tokens, "length"
        else:
            n, reason = natural, "stop"
        plan = Plan(n, reason)
        f, r = self.faults, self._fault_rng.random()
        for name, rate in (
            ("error", f.error_rate),
            ("rate_limit", f.rate_limit_rate),
            ("hang", f.hang_rate),
            ("stall", f.stall_rate),
            ("disconnect", f.disconnect_rate),
        ):
            if r < rate:
                plan.fault = name
                plan.fault_at = self._fault_rng.randrange(max(1, n))
                break
            r -= rate
        return plan

    async def admit(self) -> None:
        """Wait for a free slot (FIFO); pair with `leave()`."""
        self.queued += 1
        try:
            await self._slots.acquire()
        finally:
            self.queued -= 1
        self.running += 1

    def leave(self) -> None:
        self.running -= 1
        self._slots.release()

    async def network(self) -> None:
        if self.config.network_ms:
            await asyncio.sleep(self.config.network_ms / 1000)

    def prefill_s(self, prompt_tokens: int) -> float:
        return prompt_tokens / self.config.prefill_tokens_per_s

    def step_s(self) -> float:
        """One decode step's time: slower as more requests share the batch."""
        return self.config.tpot_ms / 1000 * (1 + self.config.tpot_growth * max(0, self.running - 1))

    async def prefill(self, prompt_tokens: int) -> None:
        if self.config.prefill_tokens_per_s and prompt_tokens:
            if self.config.prefill_shared:
                async with self._prefill_lock:
                    await _sleep(self.prefill_s(prompt_tokens))
            else:
                await _sleep(self.prefill_s(prompt_tokens))

    async def step(self) -> None:
        if self.config.tpot_ms:
            await _sleep(self.step_s())


async def _sleep(seconds: float) -> None:
    # Below a timer tick a sleep only costs a loop turn; keep zero-latency runs free of timers.
    if seconds >= 0.0005:
        await asyncio.sleep(seconds)


def now() -> float:
    return time.perf_counter()
