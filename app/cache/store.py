"""The cache store interface, and the in-process store (the embedded default, one replica only)."""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

DIM = 384  # all-MiniLM-L6-v2 (app/cache/embedder.py)


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
        return entries.nearest(time.monotonic(), vector, k)

    async def add_vector(self, scope: str, vector: np.ndarray, query: str, answer: bytes, ttl_s: float) -> None:
        entries = self._scopes.setdefault(scope, _Scope())
        if entries.full:  # expired rows are skipped by lookups; counting them out is needed only before a compaction
            self._vectors -= entries.expire(time.monotonic())
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
        oldest = min((s for s in self._scopes.values() if s.live), key=lambda s: s.first_added(), default=None)
        if oldest is not None:
            oldest.drop_first()
            self._vectors -= 1

    async def aclose(self) -> None:
        return None


_ADDED = itertools.count()


class _Scope:
    """The semantic entries of one scope: rows of one float32 matrix in the order they were added.

    Adding appends a row (the matrix grows by doubling), so a write never restacks the scope and a
    lookup is one matrix-vector product plus a top-k partition. Expired and evicted rows are marked
    dead (their expiry set to 0) and skipped; when the arrays are full, dead rows are dropped and the
    arrays sized to twice the live rows. A lookup scans every row: fine to tens of thousands of
    entries per scope; beyond that, Redis's HNSW index (`cache.store: redis`) searches in logarithmic time.
    """

    def __init__(self) -> None:
        self._vectors = np.zeros((8, DIM), dtype=np.float32)
        self._expires = np.zeros(8)  # absolute monotonic time; 0 marks a dead row
        self._added = np.zeros(8, dtype=np.int64)  # order of adding, across scopes: the oldest is evicted first
        self._meta: list[tuple[str, bytes] | None] = []
        self._rows = 0
        self._head = 0  # no live row before this one
        self.live = 0

    @property
    def full(self) -> bool:
        return self._rows == len(self._expires)

    def add(self, expires: float, query: str, answer: bytes, vector: np.ndarray) -> None:
        if self._rows == len(self._expires):
            self._compact_or_grow()
        i = self._rows
        self._vectors[i] = vector
        self._expires[i] = expires
        self._added[i] = next(_ADDED)
        self._meta.append((query, answer))
        self._rows += 1
        self.live += 1

    def nearest(self, now: float, vector: np.ndarray, k: int) -> list[Neighbour]:
        n = self._rows
        if not self.live:
            return []
        sims = self._vectors[:n] @ vector
        sims[self._expires[:n] <= now] = -np.inf  # expired or dead: never a candidate
        top = np.argpartition(-sims, k - 1)[:k] if n > k else np.arange(n)
        top = top[np.argsort(-sims[top])]
        out = []
        for i in top:
            meta = self._meta[i]
            if sims[i] == -np.inf or meta is None:
                break
            out.append(Neighbour(float(sims[i]), meta[0], meta[1]))
        return out

    def expire(self, now: float) -> int:
        """Mark the rows that expired by `now` dead; how many were live."""
        gone = np.flatnonzero((self._expires[:self._rows] <= now) & (self._expires[:self._rows] > 0))
        for i in gone:
            self._kill(int(i))
        return len(gone)

    def first_added(self) -> int:
        while self._head < self._rows and self._meta[self._head] is None:
            self._head += 1
        return int(self._added[self._head]) if self._head < self._rows else 1 << 62

    def drop_first(self) -> None:
        self.first_added()
        if self._head < self._rows:
            self._kill(self._head)

    def _kill(self, i: int) -> None:
        if self._meta[i] is not None:
            self._meta[i] = None
            self._expires[i] = 0.0
            self.live -= 1

    def _compact_or_grow(self) -> None:
        keep = np.flatnonzero(self._expires[:self._rows] > 0)
        size = max(8, len(keep) * 2)
        vectors, expires, added = np.zeros((size, DIM), dtype=np.float32), np.zeros(size), np.zeros(size, dtype=np.int64)
        vectors[:len(keep)] = self._vectors[keep]
        expires[:len(keep)] = self._expires[keep]
        added[:len(keep)] = self._added[keep]
        self._vectors, self._expires, self._added = vectors, expires, added
        self._meta = [self._meta[i] for i in keep]
        self._rows, self._head = len(keep), 0
