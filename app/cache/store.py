"""The cache store interface, and the in-process store (the embedded default, one replica only)."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A semantic entry near the query: its stored question and answer, and its cosine similarity."""

    similarity: float
    query: str
    answer: bytes


class CacheStore(Protocol):
    """Both stores expire entries at an absolute time: a hit never extends an entry's life."""

    # Errors that mean "the store is not there" (as opposed to a bad command): the cache skips it briefly.
    OUTAGE_ERRORS: tuple[type[BaseException], ...]

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def nearest(self, scope: str, vector: np.ndarray, k: int) -> list[Neighbour]:
        """Up to k entries of `scope`, most similar first (vectors are unit length)."""
        ...

    async def add_vector(self, scope: str, vector: np.ndarray, query: str, answer: bytes, ttl_s: float) -> None: ...

    async def write_batch(self, ops: list) -> None:
        """Store many WriteOps (app/cache/writer.py) in one round trip where the store can."""
        ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """Dicts and numpy arrays in this process, bounded by entry count (oldest evicted first)."""

    OUTAGE_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError)

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._exact: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._scopes: dict[str, _Scope] = {}
        self._vectors = 0

    async def get(self, key: str) -> bytes | None:
        item = self._exact.get(key)
        if item is None:
            return None
        expires, value = item
        if time.monotonic() >= expires:
            del self._exact[key]
            return None
        return value

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._exact[key] = (time.monotonic() + ttl_s, value)
        self._exact.move_to_end(key)
        while len(self._exact) > self._max:
            self._exact.popitem(last=False)

    async def nearest(self, scope: str, vector: np.ndarray, k: int) -> list[Neighbour]:
        entries = self._scopes.get(scope)
        if entries is None:
            return []
        entries.expire(time.monotonic())
        if not entries.items:
            return []
        sims = entries.matrix() @ vector
        order = np.argsort(-sims)[:k]
        return [Neighbour(float(sims[i]), entries.items[i][1], entries.items[i][2]) for i in order]

    async def add_vector(self, scope: str, vector: np.ndarray, query: str, answer: bytes, ttl_s: float) -> None:
        entries = self._scopes.setdefault(scope, _Scope())
        entries.add(time.monotonic() + ttl_s, query, answer, vector)
        self._vectors += 1
        if self._vectors > self._max:
            self._evict_oldest()

    async def write_batch(self, ops: list) -> None:
        for op in ops:
            if op.key is not None:
                await self.set(op.key, op.value, op.ttl_s)
            else:
                await self.add_vector(op.scope, op.vector, op.query, op.value, op.ttl_s)

    def _evict_oldest(self) -> None:
        oldest = min((s for s in self._scopes.values() if s.items), key=lambda s: s.items[0][0], default=None)
        if oldest is not None:
            oldest.drop_first()
            self._vectors -= 1

    async def aclose(self) -> None:
        return None


class _Scope:
    """The semantic entries of one scope, with their vectors stacked lazily for one matrix product."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str, bytes, np.ndarray]] = []
        self._matrix: np.ndarray | None = None

    def add(self, expires: float, query: str, answer: bytes, vector: np.ndarray) -> None:
        self.items.append((expires, query, answer, vector.astype(np.float32)))
        self.items.sort(key=lambda item: item[0])
        self._matrix = None

    def drop_first(self) -> None:
        self.items.pop(0)
        self._matrix = None

    def expire(self, now: float) -> None:
        n = 0
        while n < len(self.items) and self.items[n][0] <= now:
            n += 1
        if n:
            del self.items[:n]
            self._matrix = None

    def matrix(self) -> np.ndarray:
        if self._matrix is None:
            self._matrix = np.stack([item[3] for item in self.items])
        return self._matrix
