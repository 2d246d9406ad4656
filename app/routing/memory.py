"""What routing learned, handed from one gateway to the next across a config reload.

A reload builds a new gateway from the new file. A backend whose name, URL and served model are
unchanged is the same server serving the same model: its timing (the latency model), what its prompt
cache holds (the prefix index), how well it was predicted, and what its counters last read stay true.
An alias's answer lengths, its traffic's reuse and arrival rate, and each served model's tokens per
routing token are facts of the traffic and the model, not of the file. Rebuilt empty, the first
minute after every reload priced answers at the default length and a published prefill rate in the
server's tokens, and /admin/backends showed no prediction error at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.routing.accuracy import PredictionErrors
from app.routing.latency_model import LatencyModel, Prior
from app.routing.lookahead import ArrivalRate
from app.routing.output_length import OutputLengths
from app.routing.prefix_index import BackendPrefixes
from app.routing.reuse import ReuseTracker
from app.routing.token_ratio import TokenRatio


@dataclass(slots=True)
class BackendMemory:
    """What routing knows of one server, kept while it is configured under the same name, URL and model."""

    model: LatencyModel
    prefixes: BackendPrefixes
    accuracy: PredictionErrors | None = None
    # The server's prefix-cache counters at its last scrape (queries, hits) and the hit share they gave.
    prefix_counters: tuple[float, float] | None = None
    prefix_hits: float | None = None
    # The index's settings as the running file gave them (capacity, whether configured, TTL), read when
    # the memory is taken: a reload refused after the new router took the index over puts them back
    # (RoutingMemory.give_back).
    settings: tuple[float, bool, float] = field(init=False)

    def __post_init__(self) -> None:
        self.settings = (self.prefixes.capacity_tokens, self.prefixes.fixed_capacity, self.prefixes.ttl_s)


@dataclass(slots=True)
class AliasMemory:
    """What a latency-aware alias learned of its own traffic."""

    reuse: ReuseTracker
    arrivals: ArrivalRate


@dataclass(slots=True)
class RoutingMemory:
    backends: dict[str, BackendMemory] = field(default_factory=dict)
    aliases: dict[str, AliasMemory] = field(default_factory=dict)
    outputs: OutputLengths | None = None
    token_ratios: dict[str, TokenRatio] = field(default_factory=dict)

    def latency_model(self, name: str, prior: Prior | None = None) -> LatencyModel:
        """Backend `name`'s kept latency model, else a fresh one from `prior`."""
        kept = self.backends.get(name)
        return kept.model if kept is not None else LatencyModel(prior)

    def give_back(self) -> None:
        """The reload was refused: the running gateway keeps its indexes with the settings it had (a new
        router built from the refused file set its own on them)."""
        for b in self.backends.values():
            b.prefixes.capacity_tokens, b.prefixes.fixed_capacity, b.prefixes.ttl_s = b.settings
