"""Config hot reload: on SIGHUP, a changed file, or POST /admin/reload.

A new Gateway is built from the new file and swapped in; requests already running keep the old one,
which is closed once they have all finished. A bad file changes nothing and says why in the log.
Routing keeps what it learned (app/routing/memory.py): of backends whose name, URL and served model are
unchanged, and of every alias and served model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from app.config import ConfigError, GatewayConfig, load_config
from app.gateway import Gateway
from app.telemetry.metrics import Metrics

log = logging.getLogger("slipstream.reload")
_POLL_S = 2.0
_DRAIN_LIMIT_S = 900.0


class Reloader:
    def __init__(self, app_state, path: str | os.PathLike[str], span_exporter=None, metrics: Metrics | None = None) -> None:
        self.state = app_state
        self.path = Path(path)
        self.span_exporter = span_exporter
        self.metrics = metrics
        self._mtime = self._stat()
        # What the process was started with: the settings below take effect only on a restart, so a
        # reload is compared with these, not with the last reloaded file.
        self._started: GatewayConfig = app_state.gateway.config
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def _stat(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    def install(self) -> None:
        """Watch the file and SIGHUP; call from the serving event loop."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload()))
        except (NotImplementedError, RuntimeError):  # not the main thread (tests), or no signals here
            pass
        self._spawn(self._watch())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(_POLL_S)
            mtime = self._stat()
            if mtime and mtime != self._mtime:
                self._mtime = mtime
                await self.reload()

    async def reload(self) -> tuple[bool, str]:
        async with self._lock:
            self._mtime = self._stat()
            try:
                config = load_config(self.path)
            except ConfigError as exc:
                return self._refused(str(exc))
            pending = restart_only_changes(self._started, config)
            if pending:
                log.warning("%s take effect only on restart", ", ".join(pending))
            old: Gateway = self.state.gateway
            # The same server, serving the same model, where the name, URL and model are unchanged: routing
            # goes on from what it knew. (Another model on the same server prefills and decodes at its own
            # rates, and counts tokens with its own tokenizer.)
            same = {name for name, b in config.backends.items()
                    if name in old.backends and (old.backends[name].config.base_url, old.backends[name].config.model)
                    == (b.base_url, b.model)}
            memory = old.router.memory(same)
            # The process's metrics carry over: counters and histograms go on from where they were.
            # (A reload that switches telemetry.metrics on or off takes effect on restart.)
            # A file that validates can still fail to build (the semantic cache's model cannot load, a
            # file it names changed since): that is a refused reload too, never an exception that ends
            # the file watcher (every later change would then go unseen) or answers /admin/reload with a 500.
            try:
                new = Gateway.start(config, self.span_exporter, metrics=self.metrics, memory=memory)
            except Exception as exc:  # noqa: BLE001 - any failure keeps the running config
                memory.give_back()
                return self._refused(f"{self.path}: the gateway it describes cannot start: {exc!r}")
            try:
                await new.cache.start()
            except Exception as exc:  # noqa: BLE001
                memory.give_back()
                await new.aclose()
                return self._refused(f"{self.path}: the gateway it describes cannot start its cache: {exc!r}")
            new.admission.adopt(old.admission)
            if (config.responses, config.cache.store, config.cache.redis_url) == (
                    old.config.responses, old.config.cache.store, old.config.cache.redis_url):
                # Stored Responses turns outlive a reload (the in-process store would otherwise be emptied).
                spare, new.conversations = new.conversations, old.conversations
                old.owns_conversations = False
                await spare.aclose()
            if new.telemetry.recent.size == old.telemetry.recent.size:
                new.telemetry.recent = old.telemetry.recent  # the console's history outlives a reload
            self.state.gateway = new
            if self.metrics is not None:
                self.metrics.draining(old)
            self._spawn(_close_when_drained(old, self.metrics))
            log.info("config reloaded from %s: %d backends, %d models", self.path, len(config.backends), len(config.models))
            return True, "reloaded" + (f"; restart to apply {', '.join(pending)}" if pending else "")

    @staticmethod
    def _refused(message: str) -> tuple[bool, str]:
        log.error("config reload refused, keeping the running config: %s", message)
        return False, message

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def restart_only_changes(running: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The settings `new` changes that a reload cannot apply: the listener and its limits, the log level,
    the grace period (uvicorn's, set at start) and whether /metrics exists. queue_timeout_s is read by
    each gateway, so it reloads."""
    changed = [f"server.{key}" for key in type(new.server).model_fields
               if key != "queue_timeout_s" and getattr(running.server, key) != getattr(new.server, key)]
    if running.telemetry.metrics != new.telemetry.metrics:
        changed.append("telemetry.metrics")
    return changed


async def _close_when_drained(old: Gateway, metrics: Metrics | None) -> None:
    """Close the replaced gateway once no request is using it any more."""
    waited = 0.0
    while waited < _DRAIN_LIMIT_S and (old.router.queued or any(s.inflight for s in old.router.states.values())):
        await asyncio.sleep(0.5)
        waited += 0.5
    await old.aclose()
    if metrics is not None:
        metrics.retired(old)
