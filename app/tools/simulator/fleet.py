"""Start a fleet of simulated backends, one port each, in the current event loop."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from app.config import SimulatorConfig
from app.tools.simulator.server import create_app

log = logging.getLogger("slipstream.simulator")


async def start_fleet(config: SimulatorConfig) -> list[web.AppRunner]:
    """Bind every simulated backend; returns the runners to clean up."""
    runners = []
    for name, backend in config.backends.items():
        # handler_cancellation: a client that hangs up cancels its request at once, freeing the slot,
        # as a real continuous-batching server aborts a disconnected request.
        runner = web.AppRunner(create_app(name, backend, config.seed), handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, config.host, backend.port, backlog=1024).start()
        runners.append(runner)
        log.info("simulated backend %s (model %s) on http://%s:%d/v1", name, backend.model, config.host, backend.port)
    return runners


async def run_fleet(config: SimulatorConfig) -> None:
    """Serve the fleet until cancelled."""
    runners = await start_fleet(config)
    try:
        await asyncio.Event().wait()
    finally:
        for runner in runners:
            await runner.cleanup()
