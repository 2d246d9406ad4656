"""The console's ring of recent requests: bounded in count and in what it keeps of content, and
holding plain values only (nothing the garbage collector has to walk)."""

from __future__ import annotations

import gc

from app.record import AttemptRecord, Estimate, Outcome, RequestRecord, Usage
from app.telemetry.recent import ID, KEEP_TEXT_BYTES, RecentRequests
from app.upstream.adapters import BackendReport


def record(n: int, **kw) -> RequestRecord:
    return RequestRecord(f"r{n}", "chat/completions", float(n), **kw)


def test_the_ring_keeps_only_the_newest_n():
    ring = RecentRequests(3)
    for n in range(10):
        ring.add(record(n))
    assert len(ring) == 3 and ring.size == 3
    assert [e[ID] for e in ring] == ["r7", "r8", "r9"]
    assert [e[ID] for e in ring.newest(2)] == ["r9", "r8"]
    assert ring.seq == 10, "it still counts every request it saw"
    assert ring.find("r8").request_id == "r8"
    assert ring.find("r2") is None, "gone from the ring, gone from the console"


def test_newest_never_returns_more_than_held():
    ring = RecentRequests(5)
    ring.add(record(1))
    assert [e[ID] for e in ring.newest(100)] == ["r1"]


def test_size_zero_keeps_nothing():
    ring = RecentRequests(0)
    ring.add(record(1))
    assert len(ring) == 0 and ring.seq == 0 and ring.newest(5) == []


def test_a_request_comes_back_as_it_was_recorded():
    r = record(1, tenant="t", alias="a", backend="b", stream=True, status=200, outcome=Outcome.OK, finished=2.5,
               usage=Usage(10, 5), fallback="timeout", retries=1, attempts=2, prompt_tokens_hint=12)
    att = AttemptRecord(2, "a", "b", "vllm", "h", 1, "m", True, 1.1, load=3, headers=1.2, first_event=1.3, end=2.4, status=200)
    att.predicted = Estimate(0.01, 0.2, 1.3, 40)
    att.report = BackendReport(prefill_s=0.05, prompt_tokens=12, source="llamacpp")
    r.attempt_log.append(att)
    ring = RecentRequests(2)
    ring.add(r)
    back = ring.find("r1")
    assert (back.tenant, back.alias, back.backend, back.stream, back.outcome, back.fallback) == ("t", "a", "b", True, Outcome.OK, "timeout")
    assert back.usage.completion_tokens == 5 and back.duration_s == 1.5
    [a] = back.attempt_log
    assert (a.number, a.load, a.first_event, a.end) == (2, 3, 1.3, 2.4)
    assert a.predicted == Estimate(0.01, 0.2, 1.3, 40) and a.report.prefill_s == 0.05


def test_entries_are_plain_values_the_collector_drops():
    ring = RecentRequests(50)
    for n in range(50):
        r = record(n, finished=n + 1.0, usage=Usage(1, 2))
        r.attempt_log.append(AttemptRecord(1, "a", "b", "vllm", "h", 1, "m", False, 1.0, end=2.0))
        r.events.append(__import__("app.record").record.Event(1.0, "retry", {"error.type": "timeout", "x": [1, 2]}))
        ring.add(r)
    gc.collect(0)  # one young-generation pass, as happens many times a second in service
    assert not any(gc.is_tracked(e) for e in ring), "a full ring adds nothing to the collector's work"


def test_captured_content_is_bounded_per_request():
    ring = RecentRequests(2)
    big = {"messages": [{"role": "user", "content": "x" * (KEEP_TEXT_BYTES * 4)}]}
    ring.add(record(1, body=big, output_text="y" * (KEEP_TEXT_BYTES * 3)))
    kept = ring.find("r1")
    assert len(kept.body["preview"]) <= KEEP_TEXT_BYTES and kept.body["truncated_bytes"] > KEEP_TEXT_BYTES * 4
    assert len(kept.output_text) == KEEP_TEXT_BYTES
    small = {"messages": [{"role": "user", "content": "hello"}]}
    ring.add(record(2, body=small, output_text="hi"))
    assert ring.find("r2").body == small and ring.find("r2").output_text == "hi", "small content is kept whole"
