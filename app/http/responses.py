"""The Responses API's stored responses: GET /v1/responses/{id} (JSON, or its events), DELETE, GET .../input_items,
POST .../cancel (refused: nothing runs in the background).

POST /v1/responses is a proxied route like the others (app.http.fastpath -> app.pipeline), where the chain is
expanded and the answer kept (app.conversations). Every read here is scoped to the caller's tenant: another
tenant's id is not found, in the same words as an id that never existed.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.admission.auth import authorization_of
from app.conversations.service import input_items_page
from app.errors import InvalidRequest
from app.protocols.responses.protocol import replay_events

router = APIRouter(prefix="/v1/responses")
_JSON = "application/json"


def _tenant(request: Request) -> str:
    return request.app.state.gateway.auth.authenticate(authorization_of(request)).name


@router.get("/{response_id}")
async def retrieve(response_id: str, request: Request) -> Response:
    q = request.query_params
    after = q.get("starting_after")
    if after is not None and not after.isdigit():
        raise InvalidRequest("'starting_after' must be a non-negative integer", param="starting_after")
    turn = await request.app.state.gateway.conversations.get(_tenant(request), response_id)
    if q.get("stream") == "true":
        # The SDK's retrieve(stream=True) and responses.stream(response_id=...) read events: a stored turn is a
        # finished answer, so its whole event sequence, after `starting_after` (a sequence number) when given.
        # Answered as JSON, the SDK read no event at all and raised nothing.
        events = replay_events(turn.response)[int(after) + 1 if after is not None else 0:]
        return Response(b"".join(events), media_type="text/event-stream")
    return Response(orjson.dumps(turn.response), media_type=_JSON)


@router.delete("/{response_id}")
async def delete(response_id: str, request: Request) -> Response:
    await request.app.state.gateway.conversations.delete(_tenant(request), response_id)
    return Response(orjson.dumps({"id": response_id, "object": "response.deleted", "deleted": True}), media_type=_JSON)


@router.post("/{response_id}/cancel")
async def cancel(response_id: str, request: Request) -> Response:
    # Only background responses can be cancelled (OpenAI), and the gateway runs none: every stored one is a
    # finished synchronous answer, refused in OpenAI's words; an id the tenant has none by is the same 404.
    await request.app.state.gateway.conversations.get(_tenant(request), response_id)
    raise InvalidRequest("Cannot cancel a synchronous response.")


@router.get("/{response_id}/input_items")
async def input_items(response_id: str, request: Request) -> Response:
    q = request.query_params
    limit, order, after = q.get("limit", "20"), q.get("order", "desc"), q.get("after")
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        raise InvalidRequest("'limit' must be an integer from 1 to 100", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'", param="order")
    turn = await request.app.state.gateway.conversations.get(_tenant(request), response_id)
    return Response(orjson.dumps(input_items_page(turn, int(limit), order, after)), media_type=_JSON)
