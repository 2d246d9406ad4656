"""The gateway's long-lived state, built once from config at start-up and closed at shutdown."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field

import orjson

from app.admission.auth import Authenticator
from app.admission.service import Admission
from app.admission.wait_queue import WaitQueue
from app.cache.redis_store import connect
from app.cache.service import Cache, build_cache
from app.config import GatewayConfig, RetryBudget, Timeouts
from app.conversations.service import Conversations, build_conversations
from app.dispatch.ask import ask_alias
from app.dispatch.decide import PoisonBook, RetryBudgetTracker
from app.routing.active_health import run_health_checks
from app.routing.discovery import discover_forever
from app.routing.health import BreakerState
from app.routing.latency_model import LatencyModel, load_prior
from app.routing.memory import RoutingMemory
from app.routing.placement_feed import PlacementFeed, fingerprint
from app.routing.remote_copies import RemoteCopies
from app.routing.router import Router
from app.telemetry.metrics import Metrics
from app.telemetry.recorder import Telemetry
from app.upstream.adapters import ServerLoad
from app.upstream.client import Backend, build_backend
from app.upstream.transport import HttpTransport, Transport

# Readiness is probed with a plain TCP connect (never a billed call) and cached this long.
_READY_TTL_S = 2.0
_PROBE_TIMEOUT_S = 1.0


@dataclass
class Gateway:
    config: GatewayConfig
    auth: Authenticator
    backends: dict[str, Backend]
    router: Router
    budget: RetryBudgetTracker
    hedge_budgets: dict[str, RetryBudgetTracker]
    cache: Cache
    telemetry: Telemetry
    # Per-backend latency models (routing learns and reads them) and the load backends publish.
    models: dict[str, LatencyModel]
    backend_load: dict[str, ServerLoad]
    # Effective timeouts per alias and backend: the backend's, overridden by the alias's.
    timeouts: dict[str, dict[str, Timeouts]]
    admission: Admission
    # Stored Responses turns (previous_response_id); a reload with the same store settings keeps them.
    conversations: Conversations
    # The upstream seam (app.upstream.transport): aiohttp in service, a scripted fake in unit tests.
    transport: Transport = field(default_factory=HttpTransport)
    # 5xx signatures found to be caused by requests, not backends (app.dispatch.decide.is_poison).
    poison: PoisonBook = field(default_factory=PoisonBook)
    _ready_at: float = 0.0
    _reachable: dict[str, bool] = field(default_factory=dict)
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _models_bodies: dict[frozenset[str] | None, bytes] = field(default_factory=dict)
    # False once a reloaded gateway adopted the store (app.reload): then it is that gateway's to close.
    owns_conversations: bool = True

    @classmethod
    def start(cls, config: GatewayConfig, span_exporter=None, transport: Transport | None = None,
              metrics: Metrics | None = None, memory: RoutingMemory | None = None) -> Gateway:
        """Build clients, auth and router; call from inside the serving event loop.

        `metrics`, when given, are the process's (kept across reloads, their live gauges registered by
        the caller); without, the gateway gets metrics of its own. `memory`: what routing learned in the
        gateway a config reload replaces (Router.memory).
        """
        backends = {name: build_backend(name, b) for name, b in config.backends.items()}
        memory = memory or RoutingMemory()
        models = {name: memory.latency_model(name, load_prior(b.latency_prior)) for name, b in config.backends.items()}
        placements = build_placement_feed(config)
        telemetry = Telemetry(config.telemetry, models, span_exporter, metrics=metrics)
        # Route spans are the only reader of a placement's every score (app/dispatch/loop.py).
        router = Router(backends, config.models, config.server.queue_timeout_s, config.reliability.breaker, models,
                        WaitQueue(config.limits.queue.max_waiting, config.limits.queue.fair),
                        scores_read=telemetry.tracing.enabled, memory=memory, placements=placements)
        timeouts = {
            alias: {b: spec.timeouts.apply(config.backends[b].timeouts) for b in spec.backends}
            for alias, spec in config.models.items()
        }
        budget = RetryBudgetTracker(config.reliability.retry_budget)
        gw: Gateway  # assigned below, before any request can run

        async def ask(alias: str, body: dict, timeout_s: float) -> dict | None:
            # The semantic cache's judge asks a model alias of this same gateway: the cache gets this
            # callable at construction, and it reaches the gateway only when a request runs.
            return await ask_alias(gw, alias, body, timeout_s)

        cache = build_cache(config.cache, any(m.cache.semantic.enabled for m in config.models.values()), ask)
        hedge_budgets = {
            alias: RetryBudgetTracker(RetryBudget(ratio=spec.hedge.budget_ratio, min_per_s=0.0))
            for alias, spec in config.models.items() if spec.hedge.enabled
        }
        gw = cls(config, Authenticator(config.auth), backends, router, budget, hedge_budgets, cache, telemetry, models, {},
                 timeouts, Admission.from_config(config), build_conversations(config.responses, config.cache),
                 transport or HttpTransport())
        if telemetry.metrics is not None and metrics is None:
            telemetry.metrics.register_live(lambda: gw)
        loop = asyncio.get_running_loop()
        publishing = [b for b in backends.values() if b.adapter.publishes_load]
        if publishing and config.telemetry.scrape_interval_s > 0:
            gw._tasks.append(loop.create_task(
                discover_forever(publishing, config.telemetry.scrape_interval_s, gw._on_load)))
        if config.reliability.health_check.enabled:
            gw._tasks.append(loop.create_task(run_health_checks(router.states, config.reliability.health_check)))
        if placements is not None:
            gw._tasks.append(loop.create_task(placements.publish_forever()))
            remote = RemoteCopies(router.states)
            gw._tasks.append(loop.create_task(placements.listen_forever(remote)))
            gw._tasks.append(loop.create_task(remote.expire_forever()))
        return gw

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.router.placements is not None:
            await self.router.placements.aclose()
        await self.cache.aclose()
        await self.admission.aclose()
        if self.owns_conversations:
            await self.conversations.aclose()
        self.telemetry.shutdown()
        await asyncio.gather(*(b.aclose() for b in self.backends.values()), return_exceptions=True)

    @functools.cached_property
    def model_objects(self) -> list[dict]:
        """The aliases as OpenAI's Models API describes them, `created` when this gateway was built."""
        created = int(time.time())
        return [{"id": a, "object": "model", "created": created, "owned_by": "slipstream"} for a in self.config.models]

    @functools.cached_property
    def models_body(self) -> bytes:
        """The /v1/models answer: the configured aliases."""
        return self.models_body_for(None)

    def models_body_for(self, allowed: frozenset[str] | None) -> bytes:
        """The /v1/models answer for a key: only the aliases it may use (one body per model list in config)."""
        body = self._models_bodies.get(allowed)
        if body is None:
            data = [m for m in self.model_objects if allowed is None or m["id"] in allowed]
            body = self._models_bodies[allowed] = orjson.dumps({"object": "list", "data": data})
        return body

    @functools.cached_property
    def model_bodies(self) -> dict[str, bytes]:
        """The /v1/models/{id} answers, one per alias."""
        return {m["id"]: orjson.dumps(m) for m in self.model_objects}

    def _on_load(self, name: str, load: ServerLoad | None) -> None:
        if load is None:
            self.backend_load.pop(name, None)
        else:
            self.backend_load[name] = load
        self.router.learner.server_load(name, load)

    def ejected_backends(self) -> list[str]:
        """Backends whose circuit breaker is not closed."""
        return [name for name, s in self.router.states.items() if s.breaker.state is not BreakerState.CLOSED]

    async def reachable_backends(self) -> dict[str, bool]:
        """Which backends accept a TCP connection, probed concurrently and cached briefly."""
        now = time.monotonic()
        if now - self._ready_at > _READY_TTL_S:
            names = list(self.backends)
            results = await asyncio.gather(*(_probe(self.backends[n]) for n in names))
            self._reachable = dict(zip(names, results))
            self._ready_at = now
        return self._reachable


def build_placement_feed(config: GatewayConfig) -> PlacementFeed | None:
    """The feed that shares prefix placements between gateway replicas (routing.share_prefixes), else None."""
    routing = config.routing
    url = routing.redis_url or config.cache.redis_url
    if not routing.share_prefixes or url is None:
        return None
    timeout_s = routing.publish_timeout_ms / 1000
    # The listener's client has no read timeout: a channel quiet for a while is not a lost connection.
    return PlacementFeed(connect(url, timeout_s), connect(url, timeout_s, idle_ok=True), routing.channel,
                         {name: fingerprint(b.base_url, b.model) for name, b in config.backends.items()}, timeout_s)


async def _probe(backend: Backend) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*backend.first_hop), _PROBE_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True
