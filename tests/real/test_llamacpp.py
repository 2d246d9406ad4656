"""Slipstream in front of real llama.cpp servers: what the simulator cannot prove.

Each check here failed, or could not be seen, before the backend adapters and the latency model knew
how llama-server behaves (issue 14): headers at slot assignment, prompt-cache reporting, published
slots, cancellation only when a stream's connection closes, its own error shapes.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from tests.real.conftest import A_SLOTS, B_SLOTS, KEY
from tests.support import wait_until

AUTH = {"authorization": f"Bearer {KEY}", "cache-control": "no-cache, no-store"}
HI = [{"role": "user", "content": "Say hello in five words."}]


def server_timing(header: str) -> dict[str, tuple[float, str | None]]:
    out = {}
    for part in header.split(","):
        m = re.match(r'\s*(\w+);dur=([\d.]+)(?:;desc="(\w+)")?', part)
        out[m.group(1)] = (float(m.group(2)), m.group(3))
    return out


def backend_figures(real, name: str) -> dict:
    data = httpx.get(f"{real.url}/admin/backends", headers=real.admin, timeout=5).json()
    return next(b for b in data["backends"] if b["name"] == name)


def test_chat_stream_and_usage(real):
    c = real.client()
    r = c.chat.completions.create(model="a", messages=HI, max_tokens=12, temperature=0.7)
    assert r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 12
    assert r.model == "a"  # the alias asked for, never llama.cpp's GGUF path
    chunks = list(c.chat.completions.create(model="a", messages=HI, max_tokens=12, temperature=0.7, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].choices == [] and 0 < chunks[-1].usage.completion_tokens <= 12
    assert {ch.model for ch in chunks} == {"a"}


def test_stream_without_include_usage_keeps_llamacpp_timings(real):
    with httpx.stream("POST", f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                      json={"model": "a", "messages": HI, "max_tokens": 8, "stream": True}) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert any('"timings"' in e for e in events)
    assert not any('"usage"' in e for e in events)  # the usage the gateway asked for stays hidden


def test_server_timing_shows_llamacpps_own_timings(real):
    # Not streamed upstream (alias a-json): llama.cpp's prefill and decode are shown as it reported them.
    r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                   json={"model": "a-json", "messages": HI, "max_tokens": 24, "temperature": 0.7})
    assert r.status_code == 200, r.text
    timings = r.json()["timings"]
    t = server_timing(r.headers["server-timing"])
    assert t["prefill"][1] == t["decode"][1] == "reported"
    assert t["prefill"][0] == pytest.approx(timings["prompt_ms"], rel=0.02, abs=0.02)
    assert t["decode"][0] == pytest.approx(timings["predicted_ms"], rel=0.02, abs=0.02)
    assert t["network"][0] < 5
    # Streamed upstream (alias a, the llamacpp default): prefill is still the report; decode is what the
    # gateway measured from the first token to the last (llama.cpp's own clock starts a token or two
    # earlier than the first event reaches the gateway, so the two differ by about that).
    r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                   json={"model": "a", "messages": HI, "max_tokens": 24, "temperature": 0.7, "ignore_eos": True})
    timings = r.json()["timings"]
    t = server_timing(r.headers["server-timing"])
    assert t["prefill"] == (pytest.approx(timings["prompt_ms"], rel=0.02, abs=0.02), "reported")
    assert t["decode"][1] == "measured" and t["decode"][0] > 0
    assert t["network"][0] < 5


def test_slots_come_from_the_server(real):
    assert wait_until(lambda: backend_figures(real, "a")["latency_model"]["slots"] == A_SLOTS, timeout=10)
    assert wait_until(lambda: backend_figures(real, "b")["latency_model"]["slots"] == B_SLOTS, timeout=10)
    # Six concurrent streams on A (4 slots) queue two of them; the published count still stands.
    c = real.client()
    threads = [threading.Thread(target=lambda: list(c.chat.completions.create(
        model="a", messages=HI, max_tokens=16, stream=True))) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    a = backend_figures(real, "a")["latency_model"]
    assert (a["slots"], a["slots_source"]) == (A_SLOTS, "reported")


def test_the_servers_own_prompt_cache_reuse_shows_on_admin_backends(real):
    # llama-server counts the prompt tokens it reused (any client's); the gateway shows the reused share
    # between two scrapes, so a repeated prompt shows as mostly reused whatever routed it.
    long = [{"role": "system", "content": "You answer about rivers. " + "The river runs past stone and reed. " * 40},
            {"role": "user", "content": "Name one river."}]
    c = real.client()

    # Server B: the prompt (~344 tokens) is over A's per-slot context (1,024 tokens over 4 slots), so a call to
    # "a" would be served by its context fallback, B, and A's counters would never move.
    def hits():
        return backend_figures(real, "b")["reported_load"].get("prefix_cache_hit_share")

    c.chat.completions.create(model="b", messages=long, max_tokens=4)
    time.sleep(1.2)  # two scrapes (0.5 s apart): the counters before the repeat are read
    for _ in range(3):
        c.chat.completions.create(model="b", messages=long, max_tokens=4)
    assert wait_until(lambda: (hits() or 0.0) > 0.8, timeout=5), hits()


def test_a_queued_request_shows_queue_not_network(real):
    assert wait_until(lambda: backend_figures(real, "b")["latency_model"]["slots"] == B_SLOTS, timeout=10)
    started = threading.Event()

    def long_stream():
        with httpx.stream("POST", f"{real.url}/v1/chat/completions", headers=AUTH, timeout=60,
                          json={"model": "b", "messages": HI, "max_tokens": 96, "stream": True,
                                "ignore_eos": True}) as r:
            started.set()
            r.read()

    first = threading.Thread(target=long_stream)
    first.start()
    assert started.wait(30)
    with httpx.stream("POST", f"{real.url}/v1/chat/completions", headers=AUTH, timeout=60,
                      json={"model": "b", "messages": HI, "max_tokens": 4, "stream": True}) as r:
        t = server_timing(r.headers["server-timing"])
        r.read()
    first.join(60)
    # B has one slot: the second request waited for the first, either in llama-server's queue (before it
    # sent its headers) or held by the gateway's router for the first's prefix to be reusable in that
    # slot (prefix routing). Either way the wait is shown as such, never as network or gateway overhead.
    assert t["network"][0] < 5, t
    assert t["queue"][1] == "measured", t
    assert t["queue"][0] + t.get("prefix_wait", (0.0, ""))[0] > 150, t
    assert t["gateway"][0] < 150, t
    assert backend_figures(real, "b")["latency_model"]["net_s"] < 0.005


def test_a_client_disconnect_frees_the_slot(real):
    with httpx.stream("POST", f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                      json={"model": "b", "messages": HI, "max_tokens": 2000, "stream": True,
                            "ignore_eos": True}) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        assert real.b.busy_slots() == 1
    gone = time.monotonic()
    assert wait_until(lambda: real.b.busy_slots() == 0, timeout=3.0)
    assert time.monotonic() - gone < 3.0


def test_context_overflow_falls_back_or_says_context_length_exceeded(real):
    # About 400 tokens: more than one of A's slots holds (256), well within B's 2048.
    medium = [{"role": "user", "content": "the cat sat " * 130 + "Where did it sit?"}]
    r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=60,
                   json={"model": "a", "messages": medium, "max_tokens": 4})
    assert r.status_code == 200, r.text
    assert r.headers["x-slipstream-fallback"] == "b; reason=context_length"
    huge = [{"role": "user", "content": "the cat sat " * 900}]
    r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=60,
                   json={"model": "b", "messages": huge, "max_tokens": 4})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"


def test_a_poison_request_does_not_eject_the_backend(real):
    # SmolLM2 is text-only: llama-server answers an image with a 500 every time, on any backend; the client reads
    # it as OpenAI answers an image sent to a text-only model, a 400.
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAf"
                                                       "FcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}
    poison = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    statuses = set()
    for _ in range(6):  # twice the breaker's consecutive-failure limit
        r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                       json={"model": "b", "messages": poison, "max_tokens": 4})
        statuses.add(r.status_code)
        assert r.json()["error"]["message"].startswith("image input is not supported")
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert statuses == {400}
    assert backend_figures(real, "b")["breaker"]["state"] == "closed"
    r = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30,
                   json={"model": "b", "messages": HI, "max_tokens": 4})
    assert r.status_code == 200, r.text


def test_json_answer_assembled_from_an_upstream_stream_equals_the_non_streamed_one(real):
    # Gateway alias `a` streams from llama-server for JSON clients (the llamacpp default); asked directly
    # without streaming, the server's own body must match it field for field.
    ask = {"messages": HI, "max_tokens": 12, "temperature": 0, "seed": 7}
    via = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30, json={"model": "a", **ask})
    assert via.status_code == 200, via.text
    direct = httpx.post(f"{real.a.url}/chat/completions", timeout=30, json={"model": "smol-a", **ask}).json()
    got = via.json()
    assert got["object"] == direct["object"] == "chat.completion"
    assert [c["message"] for c in got["choices"]] == [c["message"] for c in direct["choices"]]
    assert [c["finish_reason"] for c in got["choices"]] == [c["finish_reason"] for c in direct["choices"]]
    assert {k: got["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == \
        {k: direct["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    g, d = got["timings"], direct["timings"]
    assert set(g) == set(d)
    assert g["predicted_n"] == d["predicted_n"] and g["prompt_n"] + g["cache_n"] == d["prompt_n"] + d["cache_n"]
    assert got["model"] == "a"
    # Streamed upstream, the attempt was timed like a stream: its first token was seen.
    t = server_timing(via.headers["server-timing"])
    assert t["prefill"][1] == "reported" and t["decode"][1] == "measured"


def test_log_probabilities_survive_the_answer_assembled_from_an_upstream_stream(real):
    # The JSON client asked for logprobs; the gateway streamed from llama-server and rebuilt the body, so
    # each chunk's entries must be joined, not dropped (the cache's probability judge reads them).
    ask = {"messages": HI, "max_tokens": 6, "temperature": 0, "seed": 7, "logprobs": True, "top_logprobs": 3}
    via = httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=30, json={"model": "a", **ask})
    assert via.status_code == 200, via.text
    direct = httpx.post(f"{real.a.url}/chat/completions", timeout=30, json={"model": "smol-a", **ask}).json()
    got, want = via.json()["choices"][0]["logprobs"]["content"], direct["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in got] == [t["token"] for t in want]
    assert len(got) == via.json()["usage"]["completion_tokens"]
    assert all(len(t["top_logprobs"]) == 3 for t in got)
    # The same numbers up to the server's batching (two calls need not share a batch).
    assert all(abs(g["logprob"] - w["logprob"]) < 0.05 for g, w in zip(got, want))


def test_a_prompt_list_is_answered_from_the_upstream_stream_as_llamacpp_answers_it(real):
    # Legacy completions with several prompts: llama-server opens that stream with `data: null`, which the assembler
    # took for a broken stream, so the JSON client got a 502 where the server itself answers each prompt.
    ask = {"prompt": ["The sky is", "The sea is"], "max_tokens": 4, "temperature": 0, "seed": 7}
    got = real.client().completions.create(model="a", **ask)
    direct = httpx.post(f"{real.a.url}/completions", timeout=30, json={"model": "smol-a", **ask}).json()
    assert [(c.index, c.text, c.finish_reason) for c in got.choices] == \
        [(c["index"], c["text"], c["finish_reason"]) for c in direct["choices"]]
    # Streamed to the client: that empty event is not passed on (the SDK yields it as a None chunk), and every chunk
    # names the alias (the first event, whose model is read, was the empty one).
    chunks = list(real.client().completions.create(model="a", stream=True, **ask))
    assert all(c is not None and c.model == "a" for c in chunks)
    texts = {c.index: "" for c in got.choices}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == {c.index: c.text for c in got.choices}


def test_a_json_client_that_leaves_frees_the_slot(real):
    # A non-streamed call to llama-server keeps generating after its client leaves; streamed upstream,
    # the gateway closes the stream when the JSON client goes, and the slot frees at once.
    def leave_early():
        try:
            httpx.post(f"{real.url}/v1/chat/completions", headers=AUTH, timeout=1.5,
                       json={"model": "b", "messages": HI, "max_tokens": 2000, "ignore_eos": True})
        except httpx.TimeoutException:
            pass

    th = threading.Thread(target=leave_early)
    th.start()
    assert wait_until(lambda: real.b.busy_slots() == 1, timeout=5)
    th.join(10)
    assert wait_until(lambda: real.b.busy_slots() == 0, timeout=3.0)
