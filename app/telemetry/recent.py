"""The last N finished requests, in memory, for the operator console.

Appending is the only work on the request path (one deque append, no copy, no formatting): the
console turns records into rows when someone looks. The ring holds the records themselves, so what
it can show is what the record stage already had; nothing more is kept per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import orjson

from app.record import RequestRecord

# With content capture on, a body or answer beyond this is kept only as a preview: the ring's memory
# stays bounded (size x this) whatever the clients send.
KEEP_TEXT_BYTES = 16_384


class RecentRequests:
    """A bounded ring of finished RequestRecords, newest last; `seq` counts every one ever added."""

    __slots__ = ("_ring", "seq")

    def __init__(self, size: int) -> None:
        self._ring: deque[RequestRecord] = deque(maxlen=max(0, size))
        self.seq = 0

    @property
    def size(self) -> int:
        return self._ring.maxlen or 0

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, record: RequestRecord) -> None:
        if self._ring.maxlen:
            if record.body is not None:
                _bound_content(record)
            self._ring.append(record)
            self.seq += 1

    def newest(self, n: int) -> list[RequestRecord]:
        """Up to `n` records, newest first."""
        out = []
        for record in reversed(self._ring):
            if len(out) >= n:
                break
            out.append(record)
        return out

    def __iter__(self) -> Iterator[RequestRecord]:
        """Oldest first; a snapshot, so the ring may change while the caller reads."""
        return iter(list(self._ring))

    def find(self, request_id: str) -> RequestRecord | None:
        for record in reversed(self._ring):
            if record.request_id == request_id:
                return record
        return None


def _bound_content(record: RequestRecord) -> None:
    """Called after spans took the full text: what the ring keeps of it is bounded."""
    raw = orjson.dumps(record.body)
    if len(raw) > KEEP_TEXT_BYTES:
        record.body = {"preview": raw[:KEEP_TEXT_BYTES].decode("utf-8", "ignore"), "truncated_bytes": len(raw)}
    if record.output_text is not None and len(record.output_text) > KEEP_TEXT_BYTES:
        record.output_text = record.output_text[:KEEP_TEXT_BYTES]
