"""Serve a cached answer again: a fresh id, honest usage (the protocol says how), and where it came from."""

from __future__ import annotations

import copy
import uuid

from app.cache.entry import Hit
from app.protocols import ClientProtocol
from app.protocols.messages_chat import IGNORED_HEADER

# Where a cached body keeps the backend model that answered it (never sent: hit_body takes it out).
SERVED_BY = "_slipstream_served_by"
# Where it keeps the answer's own headers (never sent in the body either): those that describe the answer, not the
# call that made it, so that a hit says what the miss said. The request fields the answer did not honour (a Messages
# answer from a chat backend) are such: the stored answer is the one given without them.
_HEADERS = "_slipstream_headers"
_ANSWER_HEADERS = (IGNORED_HEADER,)


def kept(body: dict, model: str, headers: dict[str, str]) -> dict:
    """The body to store: with the backend model that answered it and the answer's own headers."""
    out = {**body, SERVED_BY: model}
    said = {k: headers[k] for k in _ANSWER_HEADERS if k in headers}
    if said:
        out[_HEADERS] = said
    return out


def served_by(hit: Hit) -> str | None:
    """The backend model that produced a cached answer (x-slipstream-model on a hit, as on the miss)."""
    value = hit.answer.body.get(SERVED_BY)
    return value if isinstance(value, str) else None


def answer_headers(hit: Hit) -> dict[str, str]:
    """The headers the answer carried when it was stored (none for entries stored before they were kept)."""
    said = hit.answer.body.get(_HEADERS)
    return {k: v for k, v in said.items() if k in _ANSWER_HEADERS and isinstance(v, str)} if isinstance(said, dict) else {}


def hit_body(hit: Hit, protocol: ClientProtocol, asked: dict | None = None) -> dict:
    """The response body for this hit (asked for with body `asked`), with honest usage and a fresh id.

    An exact hit keeps the stored token counts (same prompt, same answer) and reports the prompt as
    cached. A semantic hit counts only the answer's tokens: no model read this prompt, and its count
    is not known without a tokenizer, so it is not guessed.
    """
    body = copy.deepcopy(hit.answer.body)
    # The backend's timing report (llama.cpp `timings`) described the call that filled the cache, not this
    # answer; the model that served it is said in a header (SERVED_BY).
    body.pop("timings", None)
    body.pop(SERVED_BY, None)
    body.pop(_HEADERS, None)
    protocol.served_again(body, uuid.uuid4().hex[:24], hit.kind == "semantic-hit", asked)
    return body
