"""Anthropic's Models API on /v1/models, for the clients that speak Messages.

The anthropic SDK's `client.models.list()` and `retrieve()` call the same paths as OpenAI's, with the key
as x-api-key and an anthropic-version header on every request, and read the answer as Anthropic shapes it:
`{"data": [{"type": "model", "id", "display_name", "created_at", ...}], "has_more", "first_id",
"last_id"}`, paged by `limit`, `after_id` and `before_id`, errors as `{"type": "error", ...}`. Answered in
OpenAI's shape, its key went unread (401) and its page had none of those fields. The anthropic-version
header tells the two apart: OpenAI's clients do not send it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from app.admission.auth import authorization_of, duplicate_authorization
from app.errors import InvalidRequest
from app.protocols.messages import MESSAGES

DEFAULT_LIMIT, MAX_LIMIT = 20, 1000


def asks(request) -> bool:
    """Whether the request comes from an Anthropic client (it names the API version it speaks)."""
    return "anthropic-version" in request.headers


def credentials(request) -> str | None:
    """The key as the Messages routes read it (MESSAGES.credentials: x-api-key, or Authorization), each
    header at most once, as the fast path refuses a repeated one there."""
    if len(request.headers.getlist("x-api-key")) > 1:
        raise duplicate_authorization()
    authorization_of(request)  # refuses a repeated Authorization
    return MESSAGES.credentials(request.headers)


def model_object(openai_model: dict) -> dict:
    """An alias as Anthropic describes a model. Its `created_at` is the OpenAI object's `created` (when
    the gateway started serving it), so both APIs give the same instant."""
    created = datetime.fromtimestamp(openai_model["created"], UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": openai_model["id"], "display_name": openai_model["id"], "created_at": created,
            "lifecycle": "active"}


def page(models: list[dict], params) -> bytes:
    """One page of `models` (Anthropic's objects, in the list's order) as `limit`, `after_id` and
    `before_id` in the query ask."""
    raw = params.get("limit")
    if raw is None:
        limit = DEFAULT_LIMIT
    else:
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit: must be an integer from 1 to {MAX_LIMIT}, got {raw!r}", param="limit")
    after, before = params.get("after_id"), params.get("before_id")
    if after is not None and before is not None:
        raise InvalidRequest("after_id and before_id cannot both be given", param="before_id")
    ids = [m["id"] for m in models]
    for name, cursor in (("after_id", after), ("before_id", before)):
        if cursor is not None and cursor not in ids:
            raise InvalidRequest(f"{name}: '{cursor}' is not a model in this list", param=name)
    if after is not None:
        start = ids.index(after) + 1
        chosen = models[start:start + limit]
        more = start + limit < len(models)
    elif before is not None:
        end = ids.index(before)
        chosen = models[max(0, end - limit):end]
        more = end - limit > 0
    else:
        chosen = models[:limit]
        more = limit < len(models)
    return orjson.dumps({"data": chosen, "has_more": more, "first_id": chosen[0]["id"] if chosen else None,
                         "last_id": chosen[-1]["id"] if chosen else None})
