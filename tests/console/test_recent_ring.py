"""The console's ring of recent requests: bounded in count and in what it keeps of content."""

from __future__ import annotations

from app.record import RequestRecord
from app.telemetry.recent import KEEP_TEXT_BYTES, RecentRequests


def record(n: int, **kw) -> RequestRecord:
    return RequestRecord(f"r{n}", "chat/completions", float(n), **kw)


def test_the_ring_keeps_only_the_newest_n():
    ring = RecentRequests(3)
    for n in range(10):
        ring.add(record(n))
    assert len(ring) == 3 and ring.size == 3
    assert [r.request_id for r in ring] == ["r7", "r8", "r9"]
    assert [r.request_id for r in ring.newest(2)] == ["r9", "r8"]
    assert ring.seq == 10, "it still counts every request it saw"
    assert ring.find("r8").request_id == "r8"
    assert ring.find("r2") is None, "gone from the ring, gone from the console"


def test_newest_never_returns_more_than_held():
    ring = RecentRequests(5)
    ring.add(record(1))
    assert [r.request_id for r in ring.newest(100)] == ["r1"]


def test_size_zero_keeps_nothing():
    ring = RecentRequests(0)
    ring.add(record(1))
    assert len(ring) == 0 and ring.seq == 0 and ring.newest(5) == []


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
