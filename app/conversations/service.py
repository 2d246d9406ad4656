"""Stored Responses turns for the request path: read a chain's last turn, keep a new one, serve the GET/DELETE routes.

The store failing is never a silent cut: a chained request whose previous turn cannot be read fails with 503
(retryable) rather than be answered without its history; a turn that could not be kept is answered anyway and
says so in a header, since its answer already exists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
from starlette.responses import Response

from app.cache.redis_store import connect
from app.config import CacheConfig, ResponsesConfig
from app.conversations.chain import ChainTooLong, expand
from app.conversations.store import MemoryResponseStore, RedisResponseStore, ResponseStore, StoredResponse
from app.errors import GatewayError, InvalidRequest, NotFound
from app.protocols import ParsedRequest
from app.protocols.responses.protocol import RESPONSES, event_type
from app.relay.loop import SSEResponse
from app.upstream.sse import event_data

# The final events whose response is kept (an answer exists); response.failed and error events are not.
_FINAL = (b"response.completed", b"response.incomplete")
_FINAL_QUOTED = tuple(b'"' + f + b'"' for f in _FINAL)

log = logging.getLogger("slipstream.conversations")


class StoreUnavailable(GatewayError):
    status = 503
    type = "api_error"
    code = "response_store_unavailable"


class PreviousResponseNotFound(InvalidRequest):
    """A chain from a turn the tenant has no stored response for: OpenAI's 400 with this code (a 404 is for the
    stored-response routes only). Clients key on it: Codex and others resend the whole conversation on it."""

    code = "previous_response_not_found"


def not_found(response_id: str) -> NotFound:
    # The same words for an id that never existed, expired, was deleted, or is another tenant's.
    return NotFound(f"Response with id '{response_id}' not found.")


class Conversations:
    def __init__(self, store: ResponseStore, config: ResponsesConfig) -> None:
        self.store = store
        self.max_entry_bytes = config.max_entry_bytes
        self._timeout_s = config.timeout_ms / 1000

    async def begin(self, tenant: str, req: ParsedRequest) -> Turn:
        """A Responses request made stateless: its chain expanded into `input` (the id stays in the body
        for the answer's echo; the protocol never sends it upstream), and the turn that will keep it."""
        body = req.body
        previous_id = body.get("previous_response_id")
        previous = await self.previous(tenant, previous_id) if previous_id is not None else None
        items = expand(previous, body["input"])
        if previous is not None:
            self.check_size(items)
            body["input"] = items
            req.size = req.protocol.prompt_size(body)  # the estimate every stage reads covers the chain
        return Turn(self, tenant, items, body.get("store", True) is not False, previous_id, req.alias)

    async def previous(self, tenant: str, response_id: str) -> StoredResponse:
        """The turn a request chains from; OpenAI's 400 `previous_response_not_found` when the tenant has none by
        that id (never stored, store=false, expired, deleted, or another tenant's: the same words for each)."""
        turn = await self._call(self.store.get(tenant, response_id), "read")
        if turn is None:
            raise PreviousResponseNotFound(f"Previous response with id '{response_id}' not found.",
                                           param="previous_response_id")
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


class Turn:
    """One request's turn: keeps its answer (when `store` allows) before the client can chain from it."""

    __slots__ = ("alias", "conv", "items", "previous_id", "store", "tenant")

    def __init__(self, conv: Conversations, tenant: str, items: list, store: bool, previous_id: str | None,
                 alias: str) -> None:
        self.conv, self.tenant, self.items, self.store = conv, tenant, items, store
        self.previous_id, self.alias = previous_id, alias

    async def keep(self, response: Response) -> Response:
        """The pipeline's answer, its turn kept: a JSON answer now, a stream's before its final event leaves.
        A chained turn's answer names the turn it follows (previous_response_id), as OpenAI's does, from every
        backend: a native Responses backend gets no id (the gateway expanded the chain) and says null."""
        if isinstance(response, SSEResponse):
            if self.previous_id is not None:
                response.body_iterator = self._echo_previous(response.body_iterator)
            if self.store:
                response.body_iterator = self._keep_final(response.body_iterator)
        elif response.status_code == 200 and (self.store or self.previous_id is not None):
            answer = orjson.loads(response.body)
            if not isinstance(answer, dict):
                return response
            if self.previous_id is not None and answer.get("previous_response_id") != self.previous_id:
                answer["previous_response_id"] = self.previous_id
                response.body = orjson.dumps(answer)
                response.headers["content-length"] = str(len(response.body))
            if self.store and not await self._keep(answer):
                response.headers["x-slipstream-response-stored"] = "false"
        return response

    async def _echo_previous(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        # The lifecycle events (response.created, .in_progress, .completed, ...) carry the response object.
        try:
            async for chunk in chunks:
                if b'"response"' in chunk:
                    chunk = b"".join(self._echoed(ev) for ev in chunk.split(b"\n\n") if ev)
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    def _echoed(self, ev: bytes) -> bytes:
        data = event_data(ev)
        if data is None or b'"response"' not in data:
            return ev + b"\n\n"
        event = orjson.loads(data)
        response = event.get("response") if isinstance(event, dict) else None
        if not isinstance(response, dict) or response.get("previous_response_id") == self.previous_id:
            return ev + b"\n\n"
        response["previous_response_id"] = self.previous_id
        return RESPONSES.sse.frame(orjson.dumps(event))

    async def _keep(self, answer: dict) -> bool:
        if answer.get("status") not in ("completed", "incomplete"):
            return False
        stored = {**answer, "model": self.alias, "store": True}
        if self.previous_id is not None:
            stored["previous_response_id"] = self.previous_id
        return await self.conv.keep(self.tenant, self.items, stored)

    async def _keep_final(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        # The relay joins the events of one upstream read: the write holding the final event waits for the
        # store, so a client that chains as soon as it has the id finds the turn on any replica.
        try:
            async for chunk in chunks:
                if any(f in chunk for f in _FINAL_QUOTED):
                    for ev in chunk.split(b"\n\n"):
                        data = event_data(ev)
                        if data is not None and event_type(data) in _FINAL:
                            final = orjson.loads(data).get("response")
                            if isinstance(final, dict):
                                await self._keep(final)
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]


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
    items = [_listed(item if isinstance(item.get("id"), str) else {"id": f"{turn.id}_in_{i}", **item})
             for i, item in enumerate(turn.input)]
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


# The item types whose listed form carries a status (the openai SDK's ResponseInputMessageItem, ResponseOutputMessage,
# ResponseFunctionToolCallItem, ResponseFunctionToolCallOutputItem: "populated when items are returned via API").
_WITH_STATUS = ("message", "function_call", "function_call_output")


def _listed(item: dict) -> dict:
    """An input item as OpenAI lists it: an easy message (`"content": "text"`) as the message it stands for, its
    text one `input_text` part (`output_text` for an assistant's), and a status. The SDK types a listed message's
    content as a list of parts: a string there left `item.content[0].text` to fail in the client."""
    item.setdefault("type", "message")
    if item["type"] == "message" and isinstance(item.get("content"), str):
        text = item["content"]
        item["content"] = ([{"type": "output_text", "text": text, "annotations": []}] if item.get("role") == "assistant"
                           else [{"type": "input_text", "text": text}])
    if item["type"] in _WITH_STATUS and item.get("status") is None:
        item["status"] = "completed"
    return item
