"""Streaming upstream for a JSON client: read the backend's event stream whole and assemble the answer
it would have sent non-streamed (content, tool calls, finish reasons, usage, llama.cpp's timings).

Why stream at all for a JSON client: a non-streamed call keeps a llama.cpp slot generating after its
client is gone (15-18 s here); a stream stops within ~50-80 ms of its connection closing. The wait for
the first event also teaches routing the backend's TTFT from JSON traffic.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from app.errors import UpstreamProtocolError
from app.upstream.adapters import NO_REPORT
from app.upstream.attempt import EventStream, JsonReply, json_object
from app.upstream.sse import DONE, event_data

if TYPE_CHECKING:
    from app.protocols.base import Assembler


async def collect_json(stream: EventStream, assembler: Assembler) -> JsonReply:
    """The whole answer as one JSON reply; raises a GatewayError if the stream breaks or errs (nothing has
    reached the client yet, so retries and fallback still may act). The caller closes the stream."""
    extras: dict = {}
    done = False
    async for batch in stream.batches():
        for event in batch:
            data = event_data(event)
            if data is None:
                continue
            if data == DONE:
                done = True
                break
            if data.startswith(b'{"error"'):
                json_object(data, stream.backend)  # raises the backend's error, classified by its adapter
            assembler.feed(data)
            # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
            if data.find(b'"timings"') != -1:
                _keep(extras, data, "timings")
        if done:
            break
    reasons = assembler.finish_reasons()
    if assembler.broken or not reasons or any(r is None for r in reasons):
        raise UpstreamProtocolError(f"backend {stream.backend.name} ended the stream before the answer was complete")
    body = {**assembler.result(), **extras}
    stream.timing.end = stream.timing.end or time.perf_counter()
    return JsonReply(stream.backend, 200, orjson.dumps(body), stream.headers, stream.timing, NO_REPORT, body)


def _keep(extras: dict, data: bytes, key: str) -> None:
    try:
        value = orjson.loads(data).get(key)
    except (orjson.JSONDecodeError, AttributeError):
        return
    if value is not None:
        extras[key] = value
