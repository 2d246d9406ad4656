"""Whatever arrives, every slot comes back: odd bodies and odd backend answers become clean errors.

Scripted (app.upstream.scripted): a 2-slot-per-backend alias must still serve at full capacity after
1,000 hostile requests. The same checks run against a real gateway and simulator in test_hostile_process.
"""

from __future__ import annotations

import asyncio

import pytest

from app.upstream.scripted import Reply, ScriptedTransport, Stream, completion
from tests.scripted import CHAT, call, config, in_flight, run

# 300 levels: parses (orjson reads up to 1,024) but cannot be re-serialised (orjson writes up to 254).
DEEP = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + b"[" * 300 + b"]" * 300 + b"}"


def _full_capacity(gw) -> bool:
    return all(s.inflight == 0 for s in gw.router.states.values())


async def _serves_at_capacity(gw) -> list[int]:
    """Four concurrent calls on two 2-slot backends: all four answer, none waits for a leaked slot."""
    answers = await asyncio.gather(*(call(gw) for _ in range(4)))
    return [a.status for a in answers]


def test_deeply_nested_body_is_a_400_and_takes_no_slot():
    t = ScriptedTransport(lambda name, n: Reply())

    async def scenario(gw):
        statuses = {(await call(gw, DEEP)).status for _ in range(1000)}
        return statuses, in_flight(gw), len(t.calls), await _serves_at_capacity(gw)

    statuses, held, sent, after = run(config(), t, scenario)
    assert statuses == {400}
    assert held == {"a": 0, "b": 0} and sent == 0
    assert after == [200] * 4


@pytest.mark.parametrize("stream", [False, True])
def test_backend_header_that_is_not_latin1_frees_the_slot(stream):
    headers = {"x-ratelimit-remaining-requests": "überfüllt 満杯"}
    t = ScriptedTransport(lambda name, n: Stream(headers=headers) if stream and n < 1000 else Reply(headers=headers))

    async def scenario(gw):
        statuses = {(await call(gw, {**CHAT, "stream": stream})).status for _ in range(1000)}
        return statuses, in_flight(gw), t.open_streams, await _serves_at_capacity(gw)

    statuses, held, open_streams, after = run(config(), t, scenario)
    assert statuses == {200}
    assert held == {"a": 0, "b": 0} and open_streams == 0
    assert after == [200] * 4


def test_model_name_that_is_not_latin1_is_served_and_cached_hits_too():
    t = ScriptedTransport(lambda name, n: Reply(completion(model="模型-ü")))
    cfg = config()
    cacheable = {**CHAT, "temperature": 0}

    async def scenario(gw):
        first = await call(gw, cacheable)
        await gw.cache.flush()  # the cache write runs after the answer: wait until it is stored
        hits = [await call(gw, cacheable) for _ in range(5)]
        return first.status, [(h.status, h.headers.get("x-slipstream-cache")) for h in hits], in_flight(gw)

    first, hits, held = run(cfg, t, scenario)
    assert first == 200
    assert hits == [(200, "hit")] * 5
    assert held == {"a": 0, "b": 0}


ODD_BODIES = [
    ({"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
    ({"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]}, "messages[0].content[0].text"),
    ({"model": "chat", "messages": [{"role": "user", "content": [5]}]}, "messages[0].content[0]"),
    ({"model": "chat", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "n": "2"}, "n"),
]


@pytest.mark.parametrize("body,param", ODD_BODIES)
def test_odd_but_valid_json_is_a_400_naming_the_param(body, param):
    t = ScriptedTransport(lambda name, n: Reply())

    async def scenario(gw):
        return await call(gw, body), in_flight(gw)

    answer, held = run(config(), t, scenario)
    assert answer.status == 400
    assert answer.error["param"] == param
    assert held == {"a": 0, "b": 0}


@pytest.mark.parametrize("body,param", [
    ({"model": "chat", "prompt": "hi", "messages": "not a list"}, "messages"),
    ({"model": "chat", "prompt": "hi", "messages": 7}, "messages"),
    ({"model": "chat", "prompt": {"text": "hi"}}, "prompt"),
    ({"model": "chat", "prompt": [1, "a"]}, "prompt"),
])
def test_odd_completions_bodies_are_a_400_naming_the_param(body, param):
    from app.protocols import COMPLETIONS

    t = ScriptedTransport(lambda name, n: Reply())

    async def scenario(gw):
        return await call(gw, body, endpoint=COMPLETIONS)

    answer = run(config(), t, scenario)
    assert answer.status == 400
    assert answer.error["param"] == param
