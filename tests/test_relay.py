"""Streaming: chunks relayed as they arrive, usage honoured, disconnects cancel the backend's work."""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx

from tests.conftest import ACME_KEY
from tests.support import sim_stats, wait_until
from tests.test_pipeline import expected_text


def test_stream_content_matches_backend(client):
    messages = [{"role": "user", "content": "stream me"}]
    stream = client.chat.completions.create(
        model="chat", messages=messages, max_tokens=12, stream=True, extra_body={"ignore_eos": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected_text(messages, 12)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)


def test_usage_chunk_hidden_when_not_requested(gateway):
    # The gateway asks the backend for usage; a client that did not ask must not see that chunk.
    with httpx.stream(
        "POST", f"{gateway.url}/v1/chat/completions", headers={"authorization": f"Bearer {ACME_KEY}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "u"}], "max_tokens": 4, "stream": True},
    ) as r:
        body = r.read()
    assert b'"usage"' not in body
    assert b'"choices":[]' not in body
    assert body.endswith(b"data: [DONE]\n\n")


def test_usage_chunk_relayed_when_requested(client):
    stream = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "u"}], max_tokens=4, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 4


def test_chunks_arrive_as_produced(client):
    # The slow backend emits a token every 40 ms: a buffering gateway would deliver them all at once.
    stream = client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "t"}], max_tokens=8, stream=True, extra_body={"ignore_eos": True}
    )
    arrivals = [time.perf_counter() for c in stream if c.choices and c.choices[0].delta.content]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(arrivals) == 8
    assert sorted(gaps)[len(gaps) // 2] > 0.02


def test_client_disconnect_cancels_upstream(gateway, fleet):
    port = fleet.ports["slow"]
    before = sim_stats(port)
    client = gateway.client()
    stream = client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "long"}], max_tokens=500, stream=True,
        extra_body={"ignore_eos": True},
    )
    for got, _chunk in enumerate(stream, 1):
        if got == 3:
            break
    assert sim_stats(port)["running"] == 1
    stream.close()
    # 500 tokens at 40 ms would hold the slot for 20 s; the disconnect must free it at once.
    assert wait_until(lambda: sim_stats(port)["running"] == 0, timeout=2.0), sim_stats(port)
    after = sim_stats(port)
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["completed"] == before["completed"]


def test_fifty_concurrent_streams_complete_in_order(gateway):
    async def one(client, i: int) -> tuple[str, str]:
        messages = [{"role": "user", "content": f"question number {i}"}]
        stream = await client.chat.completions.create(
            model="chat", messages=messages, max_tokens=30, stream=True, extra_body={"ignore_eos": True}
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return "".join(parts), expected_text(messages, 30)

    async def main():
        async with gateway.async_client() as client:
            return await asyncio.gather(*(one(client, i) for i in range(50)))

    results = asyncio.run(main())
    assert len(results) == 50
    for got, want in results:
        assert got == want


def test_llamacpp_timings_survive_a_hidden_usage_chunk(client):
    # The gateway asks for usage upstream; llama.cpp then puts its timings on the usage chunk, which a
    # client that did not ask for usage must not see: the timings move to the finishing chunk.
    chunks = list(client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "t"}], max_tokens=4, stream=True,
        extra_body={"ignore_eos": True}))
    assert all(c.choices for c in chunks) and not any(c.usage for c in chunks)
    final = chunks[-1]
    assert final.choices[0].finish_reason == "length" and final.model_extra["timings"]["predicted_n"] == 4
    assert {c.model for c in chunks} == {"chat"}
