"""Asking a model alias of this gateway from inside it (the semantic cache's LLM judge): the same routing,
retries and fallbacks as a client's call, without a client, a tenant's limits or the cache."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from app.deadline import Deadline
from app.dispatch.log import DispatchLog
from app.dispatch.loop import dispatch
from app.protocols import CHAT
from app.upstream.attempt import JsonReply

if TYPE_CHECKING:
    from app.gateway import Gateway


async def ask_alias(gw: Gateway, alias: str, body: dict, timeout_s: float) -> dict | None:
    """The chat.completion body `alias` answers to `body` within `timeout_s`; None for a non-200 answer.
    Errors (no backend, every attempt failed) raise: the caller tells a failure from an answer."""
    req = CHAT.parse(orjson.dumps(body))
    dispatched = await dispatch(gw, req, Deadline(time.monotonic() + timeout_s), DispatchLog(CHAT.value))
    try:
        reply = dispatched.result
        if not isinstance(reply, JsonReply) or reply.status != 200:
            return None
        return orjson.loads(reply.body)
    finally:
        dispatched.owner.end()
