"""Event splitting survives any chunking of the byte stream."""

from __future__ import annotations

from app.upstream.sse import EventSplitter, event_data

STREAM = b'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":2}\r\n\r\ndata: [DONE]\n\n'


def split_all(chunks: list[bytes]) -> list[bytes]:
    s = EventSplitter()
    out = []
    for c in chunks:
        out.extend(s.feed(c))
    assert s.pending == b""
    return out


def test_whole_stream_at_once():
    assert split_all([STREAM]) == [b'data: {"a":1}', b": keep-alive", b'data: {"b":2}', b"data: [DONE]"]


def test_every_split_point_gives_the_same_events():
    whole = split_all([STREAM])
    for i in range(1, len(STREAM)):
        assert split_all([STREAM[:i], STREAM[i:]]) == whole


def test_byte_by_byte():
    assert split_all([bytes([b]) for b in STREAM]) == split_all([STREAM])


def test_truncated_event_stays_pending():
    s = EventSplitter()
    assert s.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'data: {"a":1}']
    assert s.pending == b'data: {"b"'


def test_event_data():
    assert event_data(b'data: {"a":1}') == b'{"a":1}'
    assert event_data(b'data:{"a":1}') == b'{"a":1}'
    assert event_data(b": comment") is None
    assert event_data(b"event: x\ndata: one\ndata: two") == b"one\ntwo"
