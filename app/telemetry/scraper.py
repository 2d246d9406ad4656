"""Background scraping of vLLM's /metrics: the backend's own queue depth, running requests, KV-cache use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp

from app.telemetry.timing import VllmLoad, parse_vllm_metrics
from app.upstream.client import Backend

log = logging.getLogger("slipstream.scraper")


def metrics_url(backend: Backend) -> str:
    """vLLM serves /metrics at the server root, beside /v1."""
    base = backend.base
    path = base.path.rstrip("/")
    root = base.with_path(path[: -len("/v1")] if path.endswith("/v1") else path)
    return str(root).rstrip("/") + "/metrics"


async def scrape_forever(backends: list[Backend], into: dict[str, VllmLoad], interval_s: float,
                         on_update: Callable[[str, VllmLoad | None], None] | None = None) -> None:
    """Every interval, refresh `into[name]` for each backend; a failed scrape drops the stale figure."""
    while True:
        results = await asyncio.gather(*(_scrape(b) for b in backends))
        for backend, load in zip(backends, results):
            if load is None:
                into.pop(backend.name, None)
            else:
                into[backend.name] = load
            if on_update is not None:
                on_update(backend.name, load)
        await asyncio.sleep(interval_s)


async def _scrape(backend: Backend) -> VllmLoad | None:
    try:
        async with asyncio.timeout(2.0):
            async with backend.session.get(metrics_url(backend), headers=backend.headers) as r:
                if r.status != 200:
                    return None
                return parse_vllm_metrics(await r.text())
    except (aiohttp.ClientError, OSError, TimeoutError, UnicodeDecodeError):
        return None
