"""The last N finished requests, in memory, for the operator console.

What is kept of each is a flat tuple of plain values (strings, numbers, None, tuples of them), not
the record: a held RequestRecord brings a score of containers (lists, dicts, spans, attempt records)
that the cyclic garbage collector would walk again and again while they live in the ring, which
bench/overhead.py showed as 6-9 % fewer requests per second. Tuples of plain values are dropped
from the collector's lists at its first pass, so a full ring costs the collector nothing. The
console turns entries back into records (`revive`) when someone looks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import orjson

from app.record import AttemptRecord, Estimate, Event, Outcome, RequestRecord, RouteDecision, Usage
from app.routing.prefix_routing import PrefixMatch
from app.upstream.adapters import NO_REPORT, BackendReport

# With content capture on, a body or answer beyond this is kept only as a preview: the ring's memory
# stays bounded (size x this) whatever the clients send.
KEEP_TEXT_BYTES = 16_384
_EVENTS = 20

# Field positions in an entry: one flat tuple of plain values. Nested tuples would not do: the
# collector untracks a tuple only once every item is untracked, one level per pass, so nested ones
# reach the old generation still tracked. What has a variable shape (attempts, routing decisions,
# events) is kept as JSON bytes instead; the final attempt's figures the fleet view reads are flat.
(ID, ENDPOINT, RECEIVED, FINISHED, TENANT, ALIAS, BACKEND, STREAM, STATUS, OUTCOME, ERROR, CACHE, ATTEMPTS, RETRIES,
 FALLBACK, TARGET, PROMPT_HINT, USAGE_PROMPT, USAGE_COMPLETION, CACHE_START, CACHE_END, MAX_TOKENS, BODY, ANSWER,
 TRACE_ID, FIRST_ROUTED, LAST_BACKEND, LAST_STREAM, LAST_START, LAST_FIRST, LAST_END, LAST_ERROR, PRED_TTFT, PRED_E2E,
 ATTEMPT_LOG, ROUTES, EVENTS, ANSWERED) = range(38)

Entry = tuple


def _plain(v: object) -> object:
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def _attempt(a: AttemptRecord) -> list:
    p, r = a.predicted, a.report
    return [a.number, a.alias, a.backend, a.flavor, a.stream, a.start, a.headers, a.first_event, a.end, a.status, a.error_type,
            a.load, None if p is None else [p.queue_s, p.ttft_s, p.e2e_s, p.decode_tokens],
            None if a.prefix is None else [a.prefix.blocks, a.prefix.matched_tokens, a.prefix.tokens], a.cached_reported,
            None if r is NO_REPORT else [r.queue_s, r.prefill_s, r.decode_s, r.prompt_tokens, r.output_tokens,
                                         r.prompt_processed, r.prompt_cached, r.server_s, r.source],
            a.slot_wait_s, a.burst_wait_s]


def _ended(a: AttemptRecord) -> float:
    return a.end or a.start


def summarise(record: RequestRecord) -> Entry:
    """The record as plain values: what the console shows of it, nothing more."""
    body = answer = None
    if record.body is not None:  # content capture is on
        raw = orjson.dumps(record.body)
        body = raw if len(raw) <= KEEP_TEXT_BYTES else orjson.dumps(
            {"preview": raw[:KEEP_TEXT_BYTES].decode("utf-8", "ignore"), "truncated_bytes": len(raw)})
        if record.output_text is not None:
            answer = record.output_text[:KEEP_TEXT_BYTES]
    trace_id = None
    if record.span is not None:
        ctx = record.span.get_span_context()
        trace_id = f"{ctx.trace_id:032x}" if ctx.trace_id else None
    u = record.usage
    max_tokens = record.params.get("max_tokens") if record.params else None
    log = record.attempt_log
    # The attempt that answered; when none did, the one that ended last (its backend takes the blame).
    last = record.answered_by or (max(log, key=_ended) if log else None)
    p = last.predicted if last is not None else None
    return (
        record.request_id, record.endpoint, record.received, record.finished, record.tenant, record.alias, record.backend,
        record.stream, record.status, record.outcome.value, record.error_type, record.cache, record.attempts, record.retries,
        record.fallback, record.target_result, record.prompt_tokens_hint,
        None if u is None else u.prompt_tokens, None if u is None else u.completion_tokens, record.cache_start, record.cache_end,
        max_tokens if isinstance(max_tokens, int) else None, body, answer, trace_id,
        log[0].routed if log else 0.0,
        None if last is None else last.backend, last is not None and last.stream, 0.0 if last is None else last.start,
        0.0 if last is None else last.first_event, 0.0 if last is None else last.end, None if last is None else last.error_type,
        None if p is None else p.ttft_s, None if p is None else p.e2e_s,
        orjson.dumps([_attempt(a) for a in log]) if log else b"[]",
        orjson.dumps([[d.alias, d.strategy, d.chosen, d.at, d.end, {k: _plain(v) for k, v in d.candidates.items()}, d.reason]
                      for d in record.routes]) if record.routes else b"[]",
        orjson.dumps([[e.at, e.name, {k: _plain(v) for k, v in e.attributes.items()}] for e in record.events[:_EVENTS]])
        if record.events else b"[]",
        next((i for i, a in enumerate(log) if a is record.answered_by), -1),
    )


def revive(e: Entry) -> RequestRecord:
    """An entry as a RequestRecord again (for the console's views; not the original object)."""
    usage = None if e[USAGE_PROMPT] is None else Usage(e[USAGE_PROMPT], e[USAGE_COMPLETION])
    log = [AttemptRecord(number, alias, backend, flavor, "", 0, "", stream, start, load=load, headers=headers,
                         first_event=first, end=end, status=status, error_type=error, cached_reported=cached,
                         predicted=None if predicted is None else Estimate(*predicted),
                         prefix=None if prefix is None else PrefixMatch(*prefix),
                         report=NO_REPORT if report is None else BackendReport(*report), slot_wait_s=slot_wait,
                         burst_wait_s=burst_wait)
           for (number, alias, backend, flavor, stream, start, headers, first, end, status, error, load, predicted, prefix,
                cached, report, slot_wait, burst_wait) in orjson.loads(e[ATTEMPT_LOG])]
    return RequestRecord(e[ID], e[ENDPOINT], e[RECEIVED], tenant=e[TENANT], alias=e[ALIAS], backend=e[BACKEND], stream=e[STREAM],
                         status=e[STATUS], outcome=Outcome(e[OUTCOME]), error_type=e[ERROR], finished=e[FINISHED],
                         attempts=e[ATTEMPTS], retries=e[RETRIES], fallback=e[FALLBACK], cache=e[CACHE],
                         cache_start=e[CACHE_START], cache_end=e[CACHE_END], prompt_tokens_hint=e[PROMPT_HINT],
                         target_result=e[TARGET], usage=usage,
                         params=None if e[MAX_TOKENS] is None else {"max_tokens": e[MAX_TOKENS]},
                         body=None if e[BODY] is None else orjson.loads(e[BODY]), output_text=e[ANSWER],
                         attempt_log=log, answered_by=log[e[ANSWERED]] if e[ANSWERED] >= 0 else None,
                         routes=[RouteDecision(*d) for d in orjson.loads(e[ROUTES])],
                         events=[Event(at, name, attrs) for at, name, attrs in orjson.loads(e[EVENTS])])


class RecentRequests:
    """A bounded ring of finished requests (entries), newest last; `seq` counts every one ever added."""

    __slots__ = ("_ring", "seq")

    def __init__(self, size: int) -> None:
        self._ring: deque[Entry] = deque(maxlen=max(0, size))
        self.seq = 0

    @property
    def size(self) -> int:
        return self._ring.maxlen or 0

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, record: RequestRecord) -> None:
        if self._ring.maxlen:
            self._ring.append(summarise(record))
            self.seq += 1

    def newest(self, n: int) -> list[Entry]:
        """Up to `n` entries, newest first."""
        out: list[Entry] = []
        for entry in reversed(self._ring):
            if len(out) >= n:
                break
            out.append(entry)
        return out

    def __iter__(self) -> Iterator[Entry]:
        """Oldest first; a snapshot, so the ring may change while the caller reads."""
        return iter(list(self._ring))

    def find(self, request_id: str) -> RequestRecord | None:
        for entry in reversed(self._ring):
            if entry[ID] == request_id:
                return revive(entry)
        return None
