"""The response store: each stored Responses turn under its tenant, in process (the embedded default) or in Redis.

A stored turn keeps the whole input it was answered from (its chain already expanded) and its output items,
so the next turn of a chain costs one read whatever the chain's length, and its input is the stored bytes
plus the new items: the prefix a backend's prompt cache (and our prefix routing) saw last turn, unchanged.
The price is storage that grows with the chain (each turn repeats its predecessors); `max_entry_bytes` bounds
one turn, and a chain past it is refused, never cut (app.conversations.chain).

Keys carry a digest of the tenant, so one tenant's id under another tenant is simply absent: the same 404 as
an id that never existed, with no way to tell the two apart.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import orjson

log = logging.getLogger("slipstream.conversations")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One answered turn: the input it was answered from (chain expanded), its output items, and the
    response object as the client received it (for GET /v1/responses/{id})."""

    id: str
    input: list[dict]
    output: list[dict]
    response: dict

    def dumps(self) -> bytes:
        return orjson.dumps({"id": self.id, "input": self.input, "output": self.output, "response": self.response})

    @classmethod
    def loads(cls, raw: bytes) -> StoredResponse:
        d = orjson.loads(raw)
        return cls(d["id"], d["input"], d["output"], d["response"])


class ResponseStore(Protocol):
    """Both stores expire a turn at an absolute time from its write; reading never extends it."""

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def put(self, tenant: str, turn: StoredResponse, raw: bytes) -> None:
        """Keep `turn`, already serialised as `raw` (the caller checked its size)."""
        ...

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Whether the tenant had it."""
        ...

    async def aclose(self) -> None: ...


def tenant_scope(tenant: str) -> str:
    """The tenant's part of a key: a digest, so tenant names stay out of the store's key space."""
    return hashlib.blake2b(tenant.encode(), digest_size=12).hexdigest()


class MemoryResponseStore:
    """Turns in this process (one replica only), bounded by total bytes: the least recently written go first."""

    def __init__(self, max_bytes: int, ttl_s: float) -> None:
        self._max = max_bytes
        self._ttl = ttl_s
        self._bytes = 0
        self._items: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = (tenant_scope(tenant), response_id)
        item = self._items.get(key)
        if item is None:
            return None
        if time.monotonic() >= item[0]:
            self._drop(key)
            return None
        return StoredResponse.loads(item[1])

    async def put(self, tenant: str, turn: StoredResponse, raw: bytes) -> None:
        key = (tenant_scope(tenant), turn.id)
        if key in self._items:
            self._drop(key)
        self._items[key] = (time.monotonic() + self._ttl, raw)
        self._bytes += len(raw)
        while self._bytes > self._max and self._items:
            self._drop(next(iter(self._items)))

    async def delete(self, tenant: str, response_id: str) -> bool:
        key = (tenant_scope(tenant), response_id)
        item = self._items.get(key)
        if item is None:
            return False
        self._drop(key)
        return time.monotonic() < item[0]

    def _drop(self, key: tuple[str, str]) -> None:
        _, raw = self._items.pop(key)
        self._bytes -= len(raw)

    async def aclose(self) -> None:
        self._items.clear()
        self._bytes = 0


class RedisResponseStore:
    """Turns in Redis, shared by every replica: one GET to read, one SET with EX to write, one DEL."""

    def __init__(self, client, prefix: str, ttl_s: float) -> None:
        self._r = client
        self._prefix = prefix + "resp:"
        self._ttl = max(1, int(ttl_s))

    def _key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}{tenant_scope(tenant)}:{response_id}"

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        raw = await self._r.get(self._key(tenant, response_id))
        return None if raw is None else StoredResponse.loads(raw)

    async def put(self, tenant: str, turn: StoredResponse, raw: bytes) -> None:
        await self._r.set(self._key(tenant, turn.id), raw, ex=self._ttl)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return bool(await self._r.delete(self._key(tenant, response_id)))

    async def aclose(self) -> None:
        await self._r.aclose()
