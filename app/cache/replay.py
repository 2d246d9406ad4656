"""Serve a cached answer again: a fresh id, honest usage (the protocol says how), and where it came from."""

from __future__ import annotations

import copy
import uuid

from app.cache.entry import Hit
from app.protocols import ClientProtocol

# Where a cached body keeps the backend model that answered it (never sent: hit_body takes it out).
SERVED_BY = "_slipstream_served_by"


def served_by(hit: Hit) -> str | None:
    """The backend model that produced a cached answer (x-slipstream-model on a hit, as on the miss)."""
    value = hit.answer.body.get(SERVED_BY)
    return value if isinstance(value, str) else None


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
    protocol.served_again(body, uuid.uuid4().hex[:24], hit.kind == "semantic-hit", asked)
    return body
