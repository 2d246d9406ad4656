"""Stored Responses turns for the request path: read a chain's last turn, keep a new one, serve the GET/DELETE routes.

The store failing is never a silent cut: a chained request whose previous turn cannot be read fails with 503
(retryable) rather than be answered without its history; a turn that could not be kept is answered anyway and
says so in a header, since its answer already exists.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from app.cache.redis_store import connect
from app.config import CacheConfig, ResponsesConfig
from app.conversations.chain import ChainTooLong
from app.conversations.store import MemoryResponseStore, RedisResponseStore, ResponseStore, StoredResponse
from app.errors import GatewayError, InvalidRequest, NotFound

log = logging.getLogger("slipstream.conversations")


class StoreUnavailable(GatewayError):
    status = 503
    type = "api_error"
    code = "response_store_unavailable"


def not_found(response_id: str, param: str | None = None) -> NotFound:
    # The same words for an id that never existed, expired, was deleted, or is another tenant's.
    return NotFound(f"Response with id '{response_id}' not found.", param=param)


class Conversations:
    def __init__(self, store: ResponseStore, config: ResponsesConfig) -> None:
        self.store = store
        self.max_entry_bytes = config.max_entry_bytes
        self._timeout_s = config.timeout_ms / 1000

    async def previous(self, tenant: str, response_id: str) -> StoredResponse:
        """The turn a request chains from; 404 naming previous_response_id when the tenant has none by that id."""
        turn = await self._call(self.store.get(tenant, response_id), "read")
        if turn is None:
            raise not_found(response_id, "previous_response_id")
        return turn

    def check_size(self, items: list) -> bytes:
        """The chain's items serialised once; refused past the bound a stored turn may hold."""
        raw = orjson.dumps(items)
        if len(raw) > self.max_entry_bytes:
            raise ChainTooLong(len(raw), self.max_entry_bytes)
        return raw

    async def keep(self, tenant: str, items: list, response: dict) -> bool:
        """Store an answered turn (complete answers only); False when it could not be kept."""
        output = response.get("output")
        if not isinstance(response.get("id"), str) or not isinstance(output, list):
            return False
        turn = StoredResponse(response["id"], items, output, response)
        raw = turn.dumps()
        if len(raw) > self.max_entry_bytes:
            log.warning("response %s not stored: %d bytes over responses.max_entry_bytes", turn.id, len(raw))
            return False
        try:
            await self._call(self.store.put(tenant, turn, raw), "write")
        except StoreUnavailable:
            return False
        return True

    async def get(self, tenant: str, response_id: str) -> StoredResponse:
        turn = await self._call(self.store.get(tenant, response_id), "read")
        if turn is None:
            raise not_found(response_id)
        return turn

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self._call(self.store.delete(tenant, response_id), "delete"):
            raise not_found(response_id)

    async def _call(self, op, what: str):
        try:
            async with asyncio.timeout(self._timeout_s):
                return await op
        except (TimeoutError, OSError, ConnectionError) as exc:
            log.warning("response store %s failed: %s", what, type(exc).__name__)
            raise StoreUnavailable(f"the response store could not {what} in time; retry shortly") from None
        except Exception as exc:  # a Redis error of another kind: still never a 500 with a traceback
            if type(exc).__module__.startswith("redis"):
                log.warning("response store %s failed: %s", what, exc)
                raise StoreUnavailable(f"the response store could not {what}; retry shortly") from None
            raise

    async def aclose(self) -> None:
        await self.store.aclose()


def build_conversations(config: ResponsesConfig, cache: CacheConfig) -> Conversations:
    kind = config.store or cache.store
    if kind == "redis":
        url = config.redis_url or cache.redis_url
        if not url:
            raise ValueError("responses.store 'redis' needs responses.redis_url (or cache.redis_url)")
        store: ResponseStore = RedisResponseStore(connect(url, config.timeout_ms / 1000), cache.key_prefix, config.ttl_s)
    else:
        store = MemoryResponseStore(config.memory_max_bytes, config.ttl_s)
    return Conversations(store, config)


def input_items_page(turn: StoredResponse, limit: int, order: str, after: str | None) -> dict:
    """GET /v1/responses/{id}/input_items: the turn's input (its chain included), as OpenAI lists them.

    Items stored without an id get a stable one from their position, so pages can follow `after`."""
    items = [item if isinstance(item.get("id"), str) else {"id": f"{turn.id}_in_{i}", **item}
             for i, item in enumerate(turn.input)]
    for item in items:
        item.setdefault("type", "message")
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequest(f"'after' names no item of response '{turn.id}'", param="after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}
