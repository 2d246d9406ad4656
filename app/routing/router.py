"""Choose a backend for a model alias and hold one of its concurrency slots until the call ends."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from app.config import ModelAlias
from app.errors import Overloaded
from app.routing.strategies import STRATEGIES, Strategy
from app.upstream.client import Backend


@dataclass(slots=True)
class BackendState:
    """Live per-backend state the router decides on."""

    backend: Backend
    capacity: int
    inflight: int = 0

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def has_slot(self) -> bool:
        return self.inflight < self.capacity


@dataclass(slots=True)
class _Alias:
    states: tuple[BackendState, ...]
    strategy: Strategy
    turn: int = 0


@dataclass(slots=True)
class _Waiter:
    names: frozenset[str]
    future: asyncio.Future[BackendState] = field(repr=False)


class Lease:
    """One held slot on a backend; release it exactly once when the upstream call is over."""

    __slots__ = ("state", "_router", "_released")

    def __init__(self, router: Router, state: BackendState) -> None:
        self._router, self.state, self._released = router, state, False

    @property
    def backend(self) -> Backend:
        return self.state.backend

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._router._release(self.state)


class Router:
    def __init__(self, backends: dict[str, Backend], models: dict[str, ModelAlias], queue_timeout_s: float) -> None:
        self.states = {name: BackendState(b, b.config.max_concurrency) for name, b in backends.items()}
        self._aliases = {
            alias: _Alias(tuple(self.states[n] for n in spec.backends), STRATEGIES[spec.strategy])
            for alias, spec in models.items()
        }
        self._waiters: deque[_Waiter] = deque()
        self._queue_timeout_s = queue_timeout_s

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.future.done())

    async def acquire(self, alias: str) -> Lease:
        """A lease on the alias's chosen backend; waits (FIFO, bounded) when every backend is full."""
        entry = self._aliases[alias]
        free = [s for s in entry.states if s.has_slot]
        if free and not self._waiters:
            entry.turn += 1
            state = free[entry.strategy(free, entry.turn)]
            state.inflight += 1
            return Lease(self, state)
        waiter = _Waiter(frozenset(s.name for s in entry.states), asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        if free:
            self._hand_off_free()
        try:
            state = await asyncio.wait_for(waiter.future, self._queue_timeout_s)
        except BaseException as exc:
            # A slot handed over in the same instant as a timeout or a client disconnect is given back.
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())
            waiter.future.cancel()
            if isinstance(exc, TimeoutError):
                raise Overloaded(
                    f"every backend of model {alias!r} is at its concurrency limit",
                    headers={"retry-after": "1"},
                ) from None
            raise
        return Lease(self, state)

    def _release(self, state: BackendState) -> None:
        # A freed slot goes straight to the oldest waiter that can use it, so waiting is FIFO.
        while self._waiters:
            w = self._waiters[0]
            if w.future.done():
                self._waiters.popleft()
                continue
            break
        for w in self._waiters:
            if not w.future.done() and state.name in w.names:
                w.future.set_result(state)
                self._drop_done()
                return
        state.inflight -= 1

    def _hand_off_free(self) -> None:
        for w in list(self._waiters):
            if w.future.done():
                continue
            for name in w.names:
                s = self.states[name]
                if s.has_slot:
                    s.inflight += 1
                    w.future.set_result(s)
                    break
        self._drop_done()

    def _drop_done(self) -> None:
        self._waiters = deque(w for w in self._waiters if not w.future.done())
