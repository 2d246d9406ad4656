"""The relay as a filter chain: the loop frames, ends and reports errors; every other job is a filter.

The upstream here is a list of SSE events behind the EventStream interface (`batches()`, `backend`):
the relay's only seam to the transport, so the chain is played exactly, without sockets.
"""

from __future__ import annotations

import asyncio

import orjson

from app.errors import GatewayError, sse_error_event
from app.protocols.openai import OPENAI_SSE, OpenAISse
from app.record import Outcome
from app.relay.filters import FinishReasons, ModelName, UsageFilter
from app.relay.loop import Relay
from app.relay.result import RelayResult


class _Backend:
    name = "b"


class Events:
    """An upstream stream that sends `batches` of SSE events, one read each."""

    backend = _Backend()

    def __init__(self, *batches: list[dict | bytes]) -> None:
        self._batches = [[b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) for e in b] for b in batches]

    async def batches(self):
        for b in self._batches:
            yield b


def chunk(content: str | None = None, finish: str | None = None, **extra) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "c", "model": "backend-name", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def play(relay: Relay) -> list[bytes]:
    async def main():
        return [b async for b in relay.events()]

    return asyncio.run(main())


def data_events(out: list[bytes]) -> list[bytes]:
    return [e[6:] for e in b"".join(out).split(b"\n\n") if e.startswith(b"data: ")]


def chain(result: RelayResult, alias: str = "chat", wants_usage: bool = False, choices: int = 1) -> tuple:
    return (ModelName(result, alias, OPENAI_SSE), FinishReasons(result, OPENAI_SSE, choices),
            UsageFilter(result, OPENAI_SSE, wants_usage))


def test_a_filter_can_change_and_drop_events():
    class Shout:
        def on_data(self, data):
            return None if b'"drop"' in data else data.upper()

        def on_end(self, result):
            self.ended = result.outcome

    shout = Shout()
    out = play(Relay(Events([chunk("a"), b'{"drop":1}', chunk("b")], [b"[DONE]"]), (shout,)))
    events = data_events(out)
    assert len(events) == 3 and events[-1] == b"[DONE]" and b'"A"' in events[0] and b'"B"' in events[1]
    assert shout.ended is Outcome.OK


def test_the_result_is_one_value_with_model_usage_reasons_and_outcome():
    result = RelayResult()
    usage = {"id": "c", "model": "backend-name", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    out = play(Relay(Events([chunk("hi"), chunk(finish="stop")], [usage, b"[DONE]"]), chain(result), result))
    assert result.response_model == "backend-name" and result.finish_reasons == ["stop"]
    assert result.usage is not None and (result.usage.prompt_tokens, result.usage.completion_tokens) == (5, 2)
    assert result.complete and result.outcome is Outcome.OK and result.first_token > 0
    events = data_events(out)
    assert all(b"usage" not in e for e in events)  # hidden from a client that did not ask
    assert all(b'"model":"chat"' in e for e in events[:-1])  # renamed to the alias
    assert events[-1] == b"[DONE]"


def test_a_held_finishing_chunk_is_released_before_done():
    """Without usage asked for, the finishing chunk waits for the (hidden) usage chunk; a stream that
    ends first still gets it, before [DONE]."""
    result = RelayResult()
    events = data_events(play(Relay(Events([chunk("x"), chunk(finish="length")], [b"[DONE]"]), chain(result), result)))
    assert len(events) == 3 and b'"finish_reason":"length"' in events[1] and events[2] == b"[DONE]"


def test_a_stream_closed_early_without_done_ends_with_an_error_event():
    result = RelayResult()
    out = play(Relay(Events([chunk("x")]), chain(result, choices=1), result))
    assert out[-1].startswith(b'data: {"error"') and not result.complete
    assert result.outcome is Outcome.STREAM_BROKEN


def test_a_stream_closed_after_every_choice_finished_is_complete():
    result = RelayResult()
    out = play(Relay(Events([chunk("x"), chunk(finish="stop", choices=[{"index": 1, "delta": {}, "finish_reason": "stop"}])]),
                     chain(result, choices=1), result))
    assert data_events(out)[-1] == b"[DONE]" and result.complete


def test_a_protocol_supplies_its_own_framing_end_and_error_events():
    """What a client protocol adapter plugs in (app.relay.format.StreamFormat): here, named events."""

    class Named(OpenAISse):
        done = b"event: end\ndata: {}\n\n"

        def frame(self, data: bytes) -> bytes:
            return b"event: delta\ndata: " + data + b"\n\n"

        def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
            return b"event: error\n" + sse_error_event(err)

    ok = b"".join(play(Relay(Events([chunk("x")], [b"[DONE]"]), (), fmt=Named())))
    assert ok.startswith(b"event: delta\ndata: ") and ok.endswith(b"event: end\ndata: {}\n\n")
    result = RelayResult()
    broken = b"".join(play(Relay(Events([chunk("x")]), (FinishReasons(result, OPENAI_SSE),), result, Named())))
    assert b"event: error\n" in broken and not broken.endswith(b"event: end\ndata: {}\n\n")
