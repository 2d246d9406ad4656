"""Live per-backend state the router decides on: the bottom of app/routing, which every routing
module reads and none of it imports back.

The router keeps, per backend, when each request it sent there is predicted to finish (the in-flight
book), its health (the breaker), its latency model and what it is believed to hold in its prompt cache.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.config import BackendConfig
from app.routing.health import Breaker
from app.routing.latency_model import LatencyModel
from app.routing.prefix_index import BackendPrefixes
from app.upstream.client import Backend, streams_json

if TYPE_CHECKING:
    from app.record import Estimate


@dataclass(slots=True)
class _Booked:
    """One request in the in-flight book."""

    sent: float
    ttft_s: float  # predicted wait for the first token, from `sent`
    prefill_s: float  # of it, the prefill once the request holds a slot
    tokens: float  # to decode
    # Its first token will be reported (a stream, or a JSON call the backend serves from an upstream
    # stream: BackendState.reports_first_token), so without one yet it has not begun to decode.
    stream: bool
    news_at: float = 0.0  # the latest decode news (its first token, then progress); 0: none yet
    decoded: float = 0.0  # tokens out by `news_at`
    first_at: float = 0.0  # when its first token came; 0: not yet
    beside0: float = 0.0  # the book's decode-seconds (`InflightBook._decoded`) at its first token


_SENT = operator.attrgetter("sent")
# How many sends' times a backend keeps (BackendState.send_times): more than are sent in any one wait.
SEND_MEMORY = 64


class InflightBook:
    """The requests in flight to one backend: when each was sent, its predicted wait for the first
    token and prefill, the tokens it will decode, and, once known, when its first token came and how
    far its decode has got. Finish times are priced at the backend's TPOT now, so a backend that slowed
    down is seen to finish its work later, not only its new requests.

    When each request finishes is simulated from what is known now, not read from what was predicted
    when it was sent (issue 24, real llama.cpp servers of unequal speed): a request decoding finishes
    when its remaining tokens are out; one still waiting for its first token gets a slot when the
    backend frees one (in the order they were sent, as llama.cpp and vLLM take them) and then prefills.
    A prediction made at send time carried that moment's queue forever: on the quick server, queues
    predicted during a burst were booked into every request behind them and kept growing (predicted
    3-4 s, measured 0.3-2 s), while on the slow server a request past its predicted finish counted as
    already gone, so its queue read as none (0.5 s predicted, 2.4 s measured). An overdue request is
    now about to finish, never already finished."""

    __slots__ = ("_decoded", "_decoded_at", "_decoding", "_entries", "_next", "_streams")

    def __init__(self) -> None:
        self._entries: dict[int, _Booked] = {}
        self._next = 0
        self._streams = 0  # of them, streams: `overdue` reads only those (none: no scan at all)
        # Requests here past their first token, and the seconds they have decoded in all (summed over
        # them) up to `_decoded_at`: what each answer's decode had beside it (`remove`).
        self._decoding = 0
        self._decoded = 0.0
        self._decoded_at = 0.0

    def _advance(self, at: float) -> None:
        if at > self._decoded_at:
            self._decoded += self._decoding * (at - self._decoded_at)
            self._decoded_at = at

    def add(self, start: float, ttft_s: float, decode_tokens: float, prefill_s: float | None = None,
            reports_first_token: bool = False) -> int:
        """Book a request sent at `start`, its first token predicted after `ttft_s`, of which `prefill_s`
        (all of it when not given) once it has a slot; returns the ticket to remove it with. With
        `reports_first_token` (a stream), a request with no first token yet has not begun to decode."""
        self._next += 1
        self._streams += reports_first_token
        self._entries[self._next] = _Booked(start, ttft_s, ttft_s if prefill_s is None else prefill_s, decode_tokens,
                                            reports_first_token)
        return self._next

    def first_token(self, ticket: int, at: float) -> None:
        """The request's first token came at `at`: it holds a slot and decodes from there."""
        e = self._entries.get(ticket)
        if e is not None and not e.news_at:
            e.news_at, e.decoded, e.first_at = at, 0.0, at
            self._advance(at)
            e.beside0 = self._decoded
            self._decoding += 1

    def progress(self, ticket: int, tokens: float, at: float) -> None:
        """`tokens` of the request's answer were out at `at` (counted from its first token)."""
        e = self._entries.get(ticket)
        if e is not None and e.news_at and at >= e.news_at:
            e.news_at, e.decoded = at, tokens

    def remove(self, ticket: int, at: float | None = None) -> float | None:
        """Take the request off the book (it ended at `at`); returns the seconds other requests here
        decoded while it decoded (from its first token to `at`), summed over them: with two decoding
        beside it throughout a 1 s decode, 2.0. None where it never reported a first token (or no `at`).
        Only calls streamed upstream report one: streams, and a JSON client's chat or text completion
        where the backend's kind serves it from an upstream stream (llama.cpp, vLLM; app/dispatch/loop.py
        streams_upstream). Other JSON answers (TGI, OpenAI-compatible and Ollama servers, the Responses
        and Messages APIs) are not counted beside it, and get no measured batch of their own."""
        e = self._entries.pop(ticket, None)
        if e is None:
            return None
        if e.stream:
            self._streams -= 1
        if not e.first_at:
            return None
        self._advance(at if at is not None else self._decoded_at)
        self._decoding -= 1
        if at is None:
            return None
        return max(0.0, self._decoded - e.beside0 - max(0.0, at - e.first_at))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def streams(self) -> int:
        """How many of the requests booked here report their first token (`overdue` reads only those)."""
        return self._streams

    def finishes(self, tpot_s: float, now: float = -math.inf, slots: int | None = None,
                 stalls: bool = False) -> list[float]:
        """Every booked request's predicted finish, simulated from now (see the class docstring). With
        `stalls` (a server whose decodes stop for a newcomer's prefill: llama.cpp runs a prompt's prefill
        in the same steps as the other slots' decodes), each prefill still ahead (a request booked here
        that is prefilling, or will when it takes a slot) holds up every slot still busy when it starts
        by what is left of it: those answers, and the slots they free, end that much later.

        Without it, a full quick server's slot waits were under-predicted: sent with both slots taken,
        0.38 / 0.93 / 2.86 s predicted for 0.48 / 1.35 / 3.47 s measured (issue 24, two real llama.cpp
        servers of unequal speed), the prefills priced right. Every slot that freed took the next
        request, whose prefill stood the other slot's answer still. Bounded by the prefills booked
        ahead, each priced as predicted when it was sent: nothing learned that could run away."""
        decoding: list[float] = []
        waiting: list[_Booked] = []
        # max() as plain comparisons, the same results: every prediction walks the book (each routing
        # decision, several times), and a builtin's call costs more than the comparison.
        for e in self._entries.values():
            if e.news_at:
                left = e.tokens - e.decoded
                end = e.news_at + (left if left > 0.0 else 0.0) * tpot_s  # noqa: FURB136
                decoding.append(end if end > now else now)  # noqa: FURB136
            else:
                waiting.append(e)
        if slots is None:
            # No known limit: every request has its own slot from when it was sent.
            return decoding + [max(now, e.sent + e.ttft_s) + e.tokens * tpot_s for e in waiting]
        free = decoding + [-math.inf] * max(0, slots - len(decoding))
        heapq.heapify(free)
        if stalls:
            return _stalled(free, waiting, tpot_s, now)
        out = list(decoding)
        # Booked in the order they were sent, as a rule: the sort then only checks it.
        for e in sorted(waiting, key=_SENT):
            slot_at = e.sent if e.sent > free[0] else free[0]  # noqa: FURB136
            # A stream past its predicted first token still has all its decode ahead; an answer that
            # reports no first token may be decoding already: past its predicted end, it ends now.
            if e.stream:
                first = slot_at + e.prefill_s
                end = (first if first > now else now) + e.tokens * tpot_s  # noqa: FURB136
            else:
                end = slot_at + e.prefill_s + e.tokens * tpot_s
                if not end > now:
                    end = now
            heapq.heapreplace(free, end)  # the earliest free slot is taken until `end`
            out.append(end)
        return out

    def overdue(self, now: float, slack_s: float) -> float:
        """How many times longer than predicted the streams in flight here waited for their first token:
        the largest ratio among those that waited more than `slack_s` past their prediction (1.0: none).
        A first token not yet come bounds its wait from below (censored evidence, known before any
        answer is); one that came is the wait itself, known before the answer's end teaches the model
        (a llama.cpp server says how much of the prompt it processed only in its last chunk). On a
        server never timed, whose model still holds a GPU's prior, this is the only evidence there is."""
        worst = 1.0
        if not self._streams:  # JSON requests only (or none): the scan below would find nothing
            return worst
        for e in self._entries.values():
            if e.stream and e.ttft_s > 0:
                waited = (e.first_at or now) - e.sent
                if waited - e.ttft_s > slack_s and waited > worst * e.ttft_s:
                    worst = waited / e.ttft_s
        return worst

    def first_token_lag(self) -> float | None:
        """The smallest ratio of a first token's wait to its prediction among the streams here whose first
        token came (None: none came)."""
        low = None
        for e in self._entries.values():
            if e.stream and e.ttft_s > 0 and e.first_at:
                r = (e.first_at - e.sent) / e.ttft_s
                low = r if low is None or r < low else low
        return low

    def nth_finish(self, n: int, tpot_s: float, now: float = -math.inf, slots: int | None = None,
                   stalls: bool = False) -> float | None:
        """The n-th earliest predicted finish (0-based) at `tpot_s`, or None when fewer are booked
        (`stalls`: see `finishes`)."""
        if n >= len(self._entries):
            return None
        # sorted()[n] is heapq.nsmallest(n + 1, ...)[-1] (the same value), without nsmallest's Python-level
        # heap loop: a book holds a few dozen requests at most, and every prediction on a full backend asks.
        return sorted(self.finishes(tpot_s, now, slots, stalls))[n]


def _stalled(free: list[float], waiting: list[_Booked], tpot_s: float, now: float) -> list[float]:
    """`InflightBook.finishes`' slot simulation (`free`: the slots' ends, a heap) where each prefill holds
    up the slots still busy when it starts: the finishes of the requests decoding (`free`'s) and
    `waiting` (not yet at their first token), in no particular order."""
    out: list[float] = []
    for e in sorted(waiting, key=_SENT):
        slot_at = e.sent if e.sent > free[0] else free[0]  # noqa: FURB136
        first = slot_at + e.prefill_s
        start = slot_at if slot_at > now else now  # noqa: FURB136
        if first > start:
            # What is left of its prefill stands every other busy slot still. Those past `start` move up
            # together, and none that is not passes one that is: the heap stays a heap. The slot it takes
            # (free[0], at most `slot_at`) is never among them.
            stall = first - start
            for i, t in enumerate(free):
                if t > start:
                    free[i] = t + stall
        if e.stream:
            end = (first if first > now else now) + e.tokens * tpot_s  # noqa: FURB136
        else:
            end = first + e.tokens * tpot_s
            if not end > now:
                end = now
        # The slot's request before it ends where it frees (no later prefill moves it): final.
        done = heapq.heapreplace(free, end)
        if done != -math.inf:
            out.append(done)
    out.extend(t for t in free if t != -math.inf)
    return out


class PrefillLog:
    """Recent prefills on one backend: (slot taken, first token, prompt tokens), to tell how many
    prompt tokens the backend processed while one request prefilled. A server that prefills two prompts
    at once (llama.cpp batches every slot's prompt into one step) reports each one's prefill time as
    the time for both: learned against one prompt's tokens, that read as half the rate (issue 24:
    after a calibration burst that filled both slots of the slow server at once, its prefill was
    learned at 31 tokens/s against ~110 alone, and routing avoided it for the rest of the run)."""

    __slots__ = ("_entries",)

    def __init__(self, size: int = 32) -> None:
        self._entries: deque[tuple[float, float, float]] = deque(maxlen=size)

    def add(self, start: float, end: float, tokens: float) -> None:
        if end > start and tokens > 0:
            self._entries.append((start, end, tokens))

    def alongside(self, start: float, end: float) -> float:
        """Prompt tokens of other prefills processed between `start` and `end` (each spread evenly over
        its own prefill; the one that spans exactly this interval is taken to be the request itself)."""
        total, itself = 0.0, False
        for s, e, tokens in self._entries:
            # Most of the log ended before this prefill began: two comparisons pass over what cannot
            # overlap it (the same sum, in the same order; every answer's end reads it).
            if e > start and s < end:
                if not itself and s == start and e == end:
                    itself = True
                    continue
                overlap = min(e, end) - max(s, start)
                if overlap > 0:
                    total += tokens * overlap / (e - s)
        return total

    def covered(self, start: float, end: float) -> float:
        """Seconds of `start`..`end` during which another request prefilled here (the union of the
        prefills overlapping it, each counted once however many ran together): on a server whose
        decodes stop for a newcomer's prefill, the time a decode over that interval stood still.
        Prefills are logged as they end, so the log is in the order of their ends: read from the
        newest back to the first that ended before `start` (every answer's end reads it; most of the
        log is older)."""
        spans = []
        for s, e, _ in reversed(self._entries):
            if e <= start:
                break
            if s < end:
                spans.append((max(s, start), min(e, end)))
        if not spans:
            return 0.0
        spans.sort()
        total, reach = 0.0, start
        for s, e in spans:
            if e > reach:
                total += e - max(s, reach)
                reach = e
        return total


@dataclass(slots=True)
class BackendState:
    """Live per-backend state the router decides on."""

    backend: Backend
    capacity: int
    breaker: Breaker
    model: LatencyModel
    weight: float = 1.0
    inflight: int = 0
    # Requests leased here so far (a count that only grows), and when the last SEND_MEMORY were: whether
    # another of ours was sent here right after one, and so could reach the server first, which
    # `inflight` at its first token cannot tell (see learning._ours_could_explain).
    sent: int = 0
    send_times: deque[float] = field(default_factory=lambda: deque(maxlen=SEND_MEMORY))
    # Set from a 429's Retry-After: other backends are preferred until then.
    limited_until: float = 0.0
    # The backend's own waiting count, from its /metrics (vLLM), when scraped.
    scraped_waiting: float | None = None
    # Of those, the requests that are not this gateway's (another client's queue), as two scrapes in a
    # row saw them: what the in-flight book cannot explain.
    others_waiting: float = 0.0
    waiting_beyond_ours: float = 0.0  # the last scrape's waiting count beyond ours (the first of the two)
    wrr_current: float = 0.0
    # When each request in flight here is predicted to finish: the queue a new one would wait in.
    book: InflightBook = field(default_factory=InflightBook)
    # What the backend is believed to hold in its prompt cache, and the estimated prompt tokens it
    # still has to prefill for requests in flight (released at their first token).
    prefixes: BackendPrefixes = field(default_factory=BackendPrefixes)
    uncached_inflight: float = 0.0
    prefilling: int = 0  # requests in flight here not yet at their first token (each pays the fixed part)
    # Of the requests in flight here, those held back for a sibling's copy of their prompt's prefix: they
    # will reuse it, not compute one (until their first token, or their end).
    copy_waiters: int = 0
    # Of those, the ones still held at the gateway (Lease.wait_for_prefix): not at the server yet, so a
    # request sent here now queues ahead of them there.
    held_back: int = 0
    # When the prefill now under way began: the backend went busy, or the one before it reached its
    # first token. Time since then is work already done off the backlog.
    prefill_busy_since: float = 0.0
    # Recent prefills' intervals, to learn the prefill rate from the tokens processed alongside.
    prefills: PrefillLog = field(default_factory=PrefillLog)
    # The backend's name, read once: every decision keys its candidates' scores, matches and estimates by it.
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.backend.name

    @property
    def stalls_decodes(self) -> bool:
        """Whether a newcomer's prefill stops the decodes running here (the server kind's adapter)."""
        return self.backend.adapter.prefill_stalls_decodes

    def reports_first_token(self, stream: bool, assembles: bool) -> bool:
        """Whether a call here reports its first token: a stream, or a JSON call of a protocol that can be
        assembled (RouteContext.assembles) where this backend serves it from an upstream stream."""
        return stream or (assembles and streams_json(self.backend))

    def note_sent(self, now: float) -> int:
        """One more request leased here at `now` (time.monotonic); its index, for `sent_after`."""
        self.sent += 1
        self.send_times.append(now)
        return self.sent

    def sent_after(self, index: int, within_s: float) -> bool:
        """Whether the request leased here after the `index`th one came within `within_s` of it. One
        forgotten (SEND_MEMORY sends since) counts as yes: so many were sent during the wait."""
        if self.sent <= index:
            return False
        first = self.sent - len(self.send_times) + 1  # the index of send_times[0]
        if index < first:
            return True
        return self.send_times[index - first + 1] - self.send_times[index - first] <= within_s

    @property
    def has_slot(self) -> bool:
        return self.inflight < self.capacity

    def book_request(self, now: float, est: Estimate, reports_first_token: bool) -> int:
        """Book a request sent at `now` as `est` predicts it (its prefill: the time to first token less
        the queue); returns the book's ticket. The lease books its request so, and the look-ahead a
        request it only supposes, so both simulate the same queue."""
        return self.book.add(now, est.ttft_s, est.decode_tokens, max(0.0, est.ttft_s - est.queue_s),
                             reports_first_token)

    def place_copy(self, keys: list[bytes], now: float, ttft_s: float, release_s: float, copy: Any,
                   computes: bool) -> float:
        """A request placed here at `now` brings its copy of the prompt's prefix (`copy`, the event set when
        siblings may reuse it), its first token predicted `ttft_s` later and its end `release_s` later; this
        replica's lease, or another replica's (app/routing/remote_copies.py). Returns how long until the
        copy is free for a sibling: at the first token, or on a cache that belongs to a slot (llama.cpp) at
        the end, the slot holding it till then. There it occupies a copy of the prefix (`computes`: its own,
        not a busy one it waits for), and with the slots the server publishes (llama.cpp /props) the
        backend holds no more copies than that."""
        slotted = slot_scoped_cache(self)
        ready = release_s if slotted else ttft_s
        self.prefixes.record(keys, now, now + ready, copy)
        if slotted:
            m = self.model
            self.prefixes.occupy(keys, now + release_s, copy, computes=computes,
                                 slots=m.slots if m.slots_source == "reported" else None)
        return ready

    def free_copy(self, keys: list[bytes], copy: Any, now: float) -> None:
        """The copy `place_copy` brought is free for siblings (its first token, or its request's end); one
        whose request ended before computing it (`copy.lost`) takes the blocks it brought with it."""
        copy.set()
        self.prefixes.settle(keys, now, copy, copy.lost is not None)

    def start_prefill(self, uncached_tokens: float, now: float) -> None:
        """One more request here with `uncached_tokens` of its prompt to prefill, from `now` if the
        backend was not prefilling already."""
        self.uncached_inflight += uncached_tokens
        if not self.prefilling:
            self.prefill_busy_since = now
        self.prefilling += 1


def slot_scoped_cache(state: BackendState) -> bool:
    """Whether the backend's prompt cache belongs to the slot that computed it (llama.cpp), rather than
    being shared by every running request (vLLM's, SGLang's and TGI's block caches)."""
    return state.backend.adapter.prompt_cache_per_slot


def prefixes_for(config: BackendConfig) -> BackendPrefixes:
    """A backend's prefix index, bounded by its configured cache size (else a default, then learned)."""
    size, ttl = config.prefix_cache_tokens, config.prefix_ttl_s
    return BackendPrefixes(float(size), ttl, fixed_capacity=True) if size else BackendPrefixes(ttl_s=ttl)
