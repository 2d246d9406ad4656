"""Ask each backend that publishes its load (llama.cpp /props + /metrics, vLLM /metrics, TGI /info)
for its slots and queue, every interval, and hand the figures to routing.

Slots a server publishes replace learned ones; its waiting count is queue beyond this gateway's own
requests; a round trip that never waits for a slot (llama.cpp /health) is the network.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.upstream.adapters import ServerLoad
from app.upstream.adapters.base import server_root
from app.upstream.client import Backend

log = logging.getLogger("slipstream.discovery")


async def discover_once(backend: Backend) -> ServerLoad | None:
    """One look at a backend's published load; None when it publishes none or did not answer."""
    try:
        return await backend.adapter.discover(backend.session, server_root(backend.base), backend.headers)
    except Exception:  # best effort: a malformed answer must never stop the loop
        log.debug("discovery of %s failed", backend.name, exc_info=True)
        return None


async def discover_forever(backends: list[Backend], interval_s: float,
                           on_update: Callable[[str, ServerLoad | None], None]) -> None:
    """Every interval, report each backend's load (None: not known now, so stale figures are dropped)."""
    while True:
        results = await asyncio.gather(*(discover_once(b) for b in backends))
        for backend, load in zip(backends, results):
            on_update(backend.name, load)
        await asyncio.sleep(interval_s)
