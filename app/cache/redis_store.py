"""The shared store: Redis for exact entries, and Redis's vector search (RediSearch) for semantic ones.

Semantic entries are hashes under `{prefix}sem:` indexed by FT.CREATE with an HNSW COSINE vector field
(FLOAT16 by default, FLOAT32 on request) and a TAG field for the scope; FT.SEARCH pre-filters by scope,
then runs KNN. Redis reports COSINE as a distance (1 - similarity): it is converted back here, in one place.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import numpy as np
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.cache.store import Neighbour

log = logging.getLogger("slipstream.cache")

DIM = 384
# HNSW candidates kept while searching (RediSearch's default is 10). Where the scope filter leaves most of
# a large index, RediSearch walks the HNSW graph, and at 10 it lost a lookup's stored question: 100k
# entries in each of two scopes (the seeded questions among random fillers), 92 of 160 reworded lookups
# found theirs at 10, 159 at 64 (0.50 -> 0.81 ms p50), 160 at 200 (2.59 ms). Small scopes are searched by
# brute force, where the figure is not used.
EF_RUNTIME = 64
# The vector field's element type, and what names its index and keys: half precision takes 2 bytes a
# component against 4 (README, "Capacity model": Redis per semantic entry). FLOAT32 keeps the names it
# always had, so a store configured for it reads the entries written before FLOAT16 existed. FLOAT16 gets
# its own index and key prefix ("-f16" after the model id, which no FLOAT32 prefix matches): an index is
# never read or fed with vectors of the other width. Entries under the other index are not found; they
# expire with their TTL.
VECTOR_TYPES = {"FLOAT16": (np.float16, "-f16"), "FLOAT32": (np.float32, "")}


def connect(url: str, timeout_s: float, idle_ok: bool = False) -> redis.Redis | RedisCluster:
    """A client for redis://, rediss://, redis+cluster:// or redis+sentinel://h:p[,h:p]/service[/db] URLs.
    `idle_ok`: a subscriber's, whose reads wait as long as its channel is quiet (a PING every 30 s finds a
    dead connection); `timeout_s` then bounds only connecting."""
    opts: dict[str, Any] = {"socket_timeout": None if idle_ok else timeout_s, "socket_connect_timeout": timeout_s,
                            "decode_responses": False}
    if idle_ok:
        opts["health_check_interval"] = 30
    if url.startswith("redis+cluster://"):
        return RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"), **opts)
    if url.startswith("redis+sentinel://"):
        rest = url.removeprefix("redis+sentinel://")
        hosts, _, path = rest.partition("/")
        service, _, db = path.partition("/")
        nodes = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1]) if ":" in h else 26379) for h in hosts.split(",")]
        sentinel = Sentinel(nodes, **opts)
        return sentinel.master_for(service or "mymaster", db=int(db or 0), **opts)
    return redis.Redis.from_url(url, **opts)


class RedisStore:
    # Errors that mean "Redis is not there" (as opposed to a bad command): the cache skips it briefly.
    OUTAGE_ERRORS: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError)

    def __init__(self, client: redis.Redis | RedisCluster, prefix: str, model_id: str, dim: int = DIM, write_client=None,
                 vector_type: str = "FLOAT16") -> None:
        self._r = client
        # Writes run off the request path with a longer timeout than lookups: their own connections.
        self._w = write_client or client
        self._prefix = prefix
        # The index and its keys carry the embedding model and quantisation: vectors from another
        # model (or int8 vs fp32) live in another index and are never compared with these; so do vectors
        # stored at another width (VECTOR_TYPES).
        self._dtype, suffix = VECTOR_TYPES[vector_type]
        self._vector_type = vector_type
        self._index = f"{prefix}sem-idx:{model_id}{suffix}"
        self._sem_prefix = f"{prefix}sem:{model_id}{suffix}:"
        self._dim = dim
        self._index_ready = False

    async def get(self, key: str) -> bytes | None:
        return await self._r.get(self._prefix + "x:" + key)  # type: ignore[return-value]  # decode_responses=False

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._r.set(self._prefix + "x:" + key, value, px=max(1, int(ttl_s * 1000)))

    async def ensure_index(self) -> None:
        """Create the vector index once; another replica may have made it already."""
        if self._index_ready:
            return
        try:
            # On the writes' connection: its longer timeout suits a one-off command a busy Redis may be slow on.
            await self._w.execute_command(
                "FT.CREATE", self._index, "ON", "HASH", "PREFIX", "1", self._sem_prefix,
                "SCHEMA", "scope", "TAG",
                "vec", "VECTOR", "HNSW", "6", "TYPE", self._vector_type, "DIM", str(self._dim), "DISTANCE_METRIC", "COSINE",
            )
        except ResponseError as exc:
            if "already exists" not in str(exc).lower():
                raise
        self._index_ready = True

    async def nearest(self, scope: str, vector: np.ndarray, k: int) -> list[Neighbour]:
        await self.ensure_index()
        # Scopes are hex digests: safe inside a TAG query without escaping.
        query = f"(@scope:{{{scope}}})=>[KNN {k} @vec $v EF_RUNTIME {EF_RUNTIME} AS dist]"
        try:
            reply = await self._r.execute_command(
                "FT.SEARCH", self._index, query, "PARAMS", "2", "v", vector.astype(self._dtype).tobytes(),
                "SORTBY", "dist", "RETURN", "3", "dist", "query", "answer", "LIMIT", "0", str(k), "DIALECT", "2",
            )
        except ResponseError as exc:
            if "no such index" not in str(exc).lower():
                raise
            # Redis restarted empty (or someone dropped the index): make it again; nothing to find yet.
            self._index_ready = False
            await self.ensure_index()
            return []
        out = []
        for f in _result_fields(reply):
            if b"answer" not in f:
                continue  # expired between the search and the read
            out.append(Neighbour(1.0 - float(f[b"dist"]), f[b"query"].decode(), f[b"answer"]))
        return out

    async def add_vector(self, scope: str, vector: np.ndarray, query: str, answer: bytes, ttl_s: float) -> None:
        await self.ensure_index()
        key = f"{self._sem_prefix}{scope[:16]}:{uuid.uuid4().hex}"
        mapping: dict[Any, Any] = {"scope": scope, "vec": vector.astype(self._dtype).tobytes(), "query": query, "answer": answer}
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.pexpire(key, max(1, int(ttl_s * 1000)))
            await pipe.execute()

    async def write_batch(self, ops: list) -> None:
        """Every op in one pipeline (no MULTI): one round trip for a whole batch of answers."""
        if any(op.key is None for op in ops):
            await self.ensure_index()
        async with self._w.pipeline(transaction=False) as pipe:
            for op in ops:
                px = max(1, int(op.ttl_s * 1000))
                if op.key is not None:
                    pipe.set(self._prefix + "x:" + op.key, op.value, px=px)
                else:
                    key = f"{self._sem_prefix}{op.scope[:16]}:{uuid.uuid4().hex}"
                    pipe.hset(key, mapping={"scope": op.scope, "vec": op.vector.astype(self._dtype).tobytes(),
                                            "query": op.query, "answer": op.value})
                    pipe.pexpire(key, px)
            await pipe.execute()

    async def aclose(self) -> None:
        await self._r.aclose()
        if self._w is not self._r:
            await self._w.aclose()


def _result_fields(reply) -> list[dict[bytes, bytes]]:
    """Each hit's fields, from a RESP3 map reply or a RESP2 flat array. A hit whose key expired after the
    index found it (Redis deletes an expired key when it is next touched or its active expiry gets to it)
    comes back with nil for its fields: it has none."""
    if isinstance(reply, dict):
        return [r.get(b"extra_attributes") or {} for r in reply.get(b"results", [])]
    return [dict(zip(fields[::2], fields[1::2])) if fields else {} for fields in reply[2::2]]
