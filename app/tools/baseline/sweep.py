"""Measure an OpenAI-compatible endpoint as the flat-latency method prescribes: sweep prompt length,
output length and concurrency; time each request's first token and last byte."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

# A word of about four characters is about one token for BPE tokenizers on English text.
_FILLER = "data "
# Distinct prompts are drawn from these words, a different sequence per request from its first word on:
# servers keep a prompt (KV) cache, and a repeated prefix would measure that cache, not prefill.
_WORDS = ["data", "time", "river", "stone", "cloud", "paper", "north", "green", "table", "light", "water", "night", "music", "field", "story", "glass", "horse", "metal", "plant", "board", "voice", "trade", "sound", "level", "watch", "image", "model", "value", "point", "space"]


@dataclass(frozen=True, slots=True)
class Cell:
    prompt_tokens: int
    output_tokens: int
    concurrency: int


@dataclass(slots=True)
class Sample:
    ok: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    prompt_tokens: int = 0  # as the server counted them (usage), else the requested length
    output_tokens: int = 0
    error: str = ""
    cached_tokens: int = 0  # of the prompt, read from the server's prompt cache (as it reported)

    @property
    def processed_tokens(self) -> int:
        """Prompt tokens the server actually processed: what prefill time grows with."""
        return max(0, self.prompt_tokens - self.cached_tokens)


@dataclass(slots=True)
class CellResult:
    cell: Cell
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class SweepPlan:
    prompt_lengths: list[int]
    output_lengths: list[int]
    concurrencies: list[int]
    requests_per_cell: int = 8
    max_seconds_per_cell: float = 30.0
    timeout_s: float = 120.0
    # Off (default): a distinct prompt per request, so every prefill is cold. On: one prompt per cell,
    # repeated, which measures the server's prefix (KV) cache reuse instead.
    warm: bool = False

    def cells(self) -> list[Cell]:
        """Prompt and output sweeps at concurrency 1, then a concurrency sweep at a middle cell."""
        mid_p = self.prompt_lengths[len(self.prompt_lengths) // 2]
        mid_n = self.output_lengths[len(self.output_lengths) // 2]
        cells = [Cell(p, mid_n, 1) for p in self.prompt_lengths]
        cells += [Cell(mid_p, n, 1) for n in self.output_lengths if n != mid_n]
        cells += [Cell(mid_p, mid_n, c) for c in self.concurrencies if c != 1]
        return cells


async def run_sweep(url: str, model: str, plan: SweepPlan, headers: dict[str, str] | None = None,
                    progress: bool = True) -> list[CellResult]:
    """Run every cell of the plan in turn; requests are bounded in count and time per cell."""
    cells = plan.cells()
    results = []
    timeout = aiohttp.ClientTimeout(total=plan.timeout_s)
    # A fresh connection per request: llama-server closes the connection after a stream while it
    # advertises keep-alive, and reusing it loses the next request ("cannot write request body").
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers or {}, connector=connector) as session:
        for k, cell in enumerate(cells):
            results.append(await _run_cell(session, url, model, cell, plan))
            if progress:
                _progress(k + 1, len(cells), cell)
    if progress:
        print(file=sys.stderr)
    return results


async def _run_cell(session, url: str, model: str, cell: Cell, plan: SweepPlan) -> CellResult:
    result = CellResult(cell)
    deadline = time.perf_counter() + plan.max_seconds_per_cell
    remaining = plan.requests_per_cell * max(1, cell.concurrency)
    lock = asyncio.Lock()

    async def worker() -> None:
        nonlocal remaining
        while time.perf_counter() < deadline:
            async with lock:
                if remaining <= 0:
                    return
                remaining -= 1
            result.samples.append(await _one(session, url, model, cell, _prompt(cell, plan.warm, rng)))

    rng = random.Random(f"{cell}")
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cell.concurrency)))
    result.seconds = time.perf_counter() - t0
    return result


def _prompt(cell: Cell, warm: bool, rng: random.Random) -> str:
    """About `cell.prompt_tokens` tokens: the same text for every request of a warm cell, else a new one."""
    n = max(1, cell.prompt_tokens - 4)
    if warm:
        return _FILLER * n
    return " ".join(rng.choice(_WORDS) for _ in range(n))


async def _one(session, url: str, model: str, cell: Cell, prompt: str) -> Sample:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": cell.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        # vLLM's and the simulator's way to produce exactly max_tokens; servers ignore unknown fields.
        "ignore_eos": True,
        "temperature": 0,
    }
    t0 = time.perf_counter()
    first = 0.0
    usage = None
    cached = None
    chunks = 0
    buf = b""
    try:
        async with session.post(f"{url.rstrip('/')}/chat/completions", data=orjson.dumps(body),
                                headers={"content-type": "application/json"}) as r:
            if r.status != 200:
                return Sample(False, error=f"HTTP {r.status}")
            async for data in r.content.iter_any():
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if not event.startswith(b"data:") or event.strip() == b"data: [DONE]":
                        continue
                    chunk = orjson.loads(event[5:])
                    if chunk.get("error"):
                        return Sample(False, error=str(chunk["error"])[:200])
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    if isinstance(chunk.get("timings"), dict):
                        cached = chunk["timings"].get("cache_n", cached)
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            chunks += 1
                            if not first:
                                first = time.perf_counter() - t0
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
        return Sample(False, error=type(exc).__name__)
    e2e = time.perf_counter() - t0
    if not first:
        return Sample(False, error="no content")
    prompt_tokens = int(usage["prompt_tokens"]) if usage else cell.prompt_tokens
    output = int(usage["completion_tokens"]) if usage else chunks
    if cached is None and usage and isinstance(usage.get("prompt_tokens_details"), dict):
        cached = usage["prompt_tokens_details"].get("cached_tokens")
    return Sample(True, first, e2e, prompt_tokens, output, cached_tokens=int(cached or 0))


def _progress(done: int, total: int, cell: Cell) -> None:
    width = 30
    filled = int(width * done / total)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells "
                     f"(prompt {cell.prompt_tokens}, output {cell.output_tokens}, concurrency {cell.concurrency})   ")
    sys.stderr.flush()
