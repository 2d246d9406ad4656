"""Live per-backend state the router decides on: the bottom of app/routing, which every routing
module reads and none of it imports back.

The router keeps, per backend, when each request it sent there is predicted to finish (the in-flight
book), its health (the breaker), its latency model and what it is believed to hold in its prompt cache.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from app.config import BackendConfig
from app.routing.health import Breaker
from app.routing.latency_model import LatencyModel
from app.routing.prefix_index import BackendPrefixes
from app.upstream.client import Backend


class InflightBook:
    """The requests in flight to one backend: when each started, its predicted wait for the first
    token, and the tokens it will decode. Finish times are priced at the backend's TPOT now, so a
    backend that slowed down is seen to finish its work later, not only its new requests."""

    __slots__ = ("_entries", "_next")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[float, float, float]] = {}
        self._next = 0

    def add(self, start: float, ttft_s: float, decode_tokens: float) -> int:
        """Book a request; returns the ticket to remove it with."""
        self._next += 1
        self._entries[self._next] = (start, ttft_s, decode_tokens)
        return self._next

    def remove(self, ticket: int) -> None:
        self._entries.pop(ticket, None)

    def __len__(self) -> int:
        return len(self._entries)

    def nth_finish(self, n: int, tpot_s: float) -> float | None:
        """The n-th earliest predicted finish (0-based) at `tpot_s`, or None when fewer are booked."""
        if n >= len(self._entries):
            return None
        return heapq.nsmallest(n + 1, (s + w + k * tpot_s for s, w, k in self._entries.values()))[-1]


@dataclass(slots=True)
class BackendState:
    """Live per-backend state the router decides on."""

    backend: Backend
    capacity: int
    breaker: Breaker
    model: LatencyModel
    weight: float = 1.0
    inflight: int = 0
    # Set from a 429's Retry-After: other backends are preferred until then.
    limited_until: float = 0.0
    # The backend's own waiting count, from its /metrics (vLLM), when scraped.
    scraped_waiting: float | None = None
    wrr_current: float = 0.0
    # When each request in flight here is predicted to finish: the queue a new one would wait in.
    book: InflightBook = field(default_factory=InflightBook)
    # What the backend is believed to hold in its prompt cache, and the estimated prompt tokens it
    # still has to prefill for requests in flight (released at their first token).
    prefixes: BackendPrefixes = field(default_factory=BackendPrefixes)
    uncached_inflight: float = 0.0
    prefilling: int = 0  # requests in flight here not yet at their first token (each pays the fixed part)
    # When the prefill now under way began: the backend went busy, or the one before it reached its
    # first token. Time since then is work already done off the backlog.
    prefill_busy_since: float = 0.0

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def has_slot(self) -> bool:
        return self.inflight < self.capacity


def slot_scoped_cache(state: BackendState) -> bool:
    """Whether the backend's prompt cache belongs to the slot that computed it (llama.cpp), rather than
    being shared by every running request (vLLM's, SGLang's and TGI's block caches)."""
    return state.backend.adapter.prompt_cache_per_slot


def prefixes_for(config: BackendConfig) -> BackendPrefixes:
    """A backend's prefix index, bounded by its configured cache size (else a default, then learned)."""
    size, ttl = config.prefix_cache_tokens, config.prefix_ttl_s
    return BackendPrefixes(float(size), ttl, fixed_capacity=True) if size else BackendPrefixes(ttl_s=ttl)
