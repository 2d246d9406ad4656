"""Optional active health checks: probe ejected backends so they are readmitted without client traffic.

Only ejected backends are probed, with a GET that is never a billed call (`/models` by default), so a
fleet of replicas does not multiply load on healthy backends.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from app.config import HealthCheckConfig
from app.routing.health import BreakerState
from app.routing.state import BackendState

log = logging.getLogger("slipstream.health")


async def probe(state: BackendState, config: HealthCheckConfig) -> bool:
    backend = state.backend
    try:
        async with asyncio.timeout(config.timeout_s):
            async with backend.session.get(backend.url(config.path), headers=backend.headers) as r:
                await r.read()
                return r.status < 500
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


async def run_health_checks(states: dict[str, BackendState], config: HealthCheckConfig) -> None:
    """Forever: every interval, probe each ejected backend whose cooldown has elapsed."""
    while True:
        await asyncio.sleep(config.interval_s)
        now = time.monotonic()
        due = [s for s in states.values() if s.breaker.state is BreakerState.OPEN and s.breaker.available(now)]
        for state, ok in zip(due, await asyncio.gather(*(probe(s, config) for s in due))):
            state.breaker.on_chosen(time.monotonic())
            state.breaker.record(ok)
            log.info("health check of %s: %s", state.name, "passed, readmitted" if ok else "failed, still ejected")
