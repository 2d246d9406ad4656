"""The relay's own answers: how a stream the gateway stops ends, in the client API's shape."""

from __future__ import annotations

import asyncio

import orjson

from app.protocols import RESPONSES
from app.relay.loop import SSEResponse


def responses_event(seq: int) -> bytes:
    return RESPONSES.sse.frame(orjson.dumps({"type": "response.output_text.delta", "delta": "x", "sequence_number": seq}))


def test_a_responses_stream_stopped_at_shutdown_ends_with_an_error_that_continues_its_sequence():
    async def chunks():
        yield responses_event(0) + responses_event(1)
        yield responses_event(2)
        yield b": keep-alive\n\n"  # a comment carries no number: the count goes on from the event before it
        await asyncio.sleep(3600)

    async def scenario():
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            await asyncio.sleep(3600)

        response = SSEResponse(chunks(), {}, protocol=RESPONSES)
        task = asyncio.ensure_future(response({"type": "http"}, receive, send))
        await asyncio.sleep(0.05)
        task.cancel()  # what the server does to a request still running past its grace period
        await asyncio.gather(task, return_exceptions=True)
        return sent[-1]

    last = asyncio.run(scenario())
    assert last["more_body"] is False and last["body"].startswith(b"event: error\n")
    error = orjson.loads(last["body"].split(b"data: ", 1)[1])
    assert (error["code"], error["sequence_number"]) == ("stream_interrupted", 3)
