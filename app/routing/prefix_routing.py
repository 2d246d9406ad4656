"""Prefix-aware routing through the latency model: sticky until saturated (llm-d's default).

Each candidate's predicted latency counts only the prompt tokens it is not believed to hold cached
(the prefix index's match, scaled by that backend's index accuracy), after the uncached prefill work
already in flight there. The backend holding the longest cached prefix keeps the request unless its
prediction, queue included, is worse than the best one's by more than the alias's sticky margin.

A prefix no backend holds goes, among the backends within that margin of the best, to the one its
first block hashes to (rendezvous hashing): every gateway replica sends a new prefix to the same
backend without sharing state, and the latency margin bounds the load that can pile onto it
(consistent hashing with bounded load). See README "Prefix-aware routing" for the measured choice.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.config import PrefixPolicy
from app.routing.predict import ranked
from app.routing.prefix_index import BLOCK_CHARS, CHARS_PER_TOKEN
from app.routing.state import slot_scoped_cache
from app.routing.strategies import PredictedLatency

if TYPE_CHECKING:
    from app.routing.context import RouteContext
    from app.routing.state import BackendState

_DEFAULT_POLICY = PrefixPolicy()
_OVERDUE_S = 0.05
# A shared prefix shorter than this many blocks (256 characters, ~64 tokens) is not worth waiting for.
MIN_BURST_BLOCKS = 2


@dataclass(slots=True)
class PrefixMatch:
    """What of one request's prompt one backend is believed to hold cached."""

    blocks: int  # leading blocks of the prompt found in the backend's index
    matched_tokens: float  # estimated prompt tokens those blocks cover
    tokens: float  # what routing counts on: matched x the backend's index accuracy (x its host_share if hosted)
    ready_at: float = 0.0  # when a sibling still prefilling them is predicted to finish (past: settled)
    leader: asyncio.Event | None = None  # set when that sibling's first token came
    turnover: float = 0.0  # tokens sent to the backend since the matched blocks were last used
    # Held, if at all, only in the server's host memory (every copy left its slot): counted at
    # BackendPrefixes.host_share of it, and its report says whether the server keeps such prompts.
    hosted: bool = False


def matches(candidates, ctx: RouteContext) -> dict[str, PrefixMatch]:
    """The prefix index's match for this request on each candidate now, by name. What does not depend
    on the candidate is read once: every decision asks it of every candidate."""
    prompt = ctx.prefix
    if not prompt:
        return {c.name: PrefixMatch(0, 0.0, 0.0) for c in candidates}
    keys, now, tokens, chars = prompt.keys, ctx.now, prompt.tokens, prompt.chars
    # A sibling past its predicted end is still expected a little later, never in the past.
    soon = now + _OVERDUE_S
    out = {}
    for c in candidates:
        prefixes = c.prefixes
        blocks_, ready_at, leader, turnover = prefixes.match(keys, now)
        # PromptBlocks.tokens_in, inline; scaled to the request's own token estimate, so the uncached
        # part is never negative.
        covered = blocks_ * BLOCK_CHARS
        matched = (covered if covered < chars else chars) / CHARS_PER_TOKEN  # noqa: FURB136
        if tokens:
            matched = matched * ctx.prompt_tokens / tokens
        pending = leader if leader is not None and not leader.is_set() else None
        ready = max(ready_at, soon) if pending else 0.0
        hosted = blocks_ > 0 and prefixes.in_host_memory(keys[0])
        believed = matched * prefixes.accuracy * (prefixes.host_share if hosted else 1.0)
        out[c.name] = PrefixMatch(blocks_, matched, believed, ready, pending, turnover, hosted)
    return out


def match(c: BackendState, ctx: RouteContext) -> PrefixMatch:
    """The prefix index's match for this request on backend `c` now."""
    return matches((c,), ctx)[c.name]


@functools.lru_cache(maxsize=4096)
def rendezvous(group: bytes, name: str) -> int:
    """The highest-random-weight hash of a prefix group on a backend: the same on every replica (kept for
    the groups seen lately: a shared prefix is placed again at every request that carries it)."""
    return int.from_bytes(hashlib.blake2b(group + name.encode(), digest_size=8).digest(), "big")


def prepare_prefix(candidates, ctx: RouteContext) -> None:
    """Under prefix-aware routing, each candidate's match, so predictions count only uncached tokens:
    the decision, the deadline check and /admin/route/explain then predict alike."""
    if ctx.cached is not None:
        ctx.cached = matches(candidates, ctx)


class PrefixAware:
    name = "prefix_aware"

    def choose(self, candidates, ctx, turn):
        policy = ctx.prefix_policy or _DEFAULT_POLICY
        ctx.cached = {}
        prepare_prefix(candidates, ctx)
        _, raw = ranked(candidates, ctx)
        scores = PredictedLatency._unmeasured_as_best(candidates, raw)
        best = min(scores)
        band = best * (1.0 + policy.sticky_ratio) + policy.sticky_ms / 1000
        within = [i for i, s in enumerate(scores) if s <= band]
        if not any(ctx.cached[candidates[i].name].blocks for i in within):
            # Nothing warm to stay on: only near-ties with the best (the absolute margin) are left to
            # the hash, so a prompt that will never repeat is not placed worse than the best prediction.
            within = [i for i, s in enumerate(scores) if s <= best + policy.sticky_ms / 1000]
        group = ctx.prefix.group if ctx.prefix else b""
        # Warmest within the margin of the best; among equally warm (a new prefix: none), the one the
        # prefix group hashes to (or, without consistent hashing, the best predicted).
        if policy.consistent_hashing:
            def rank(i):
                return ctx.cached[candidates[i].name].blocks, rendezvous(group, candidates[i].name)
        else:
            n = len(candidates)

            def rank(i):
                return ctx.cached[candidates[i].name].blocks, -scores[i], -((i - turn) % n)
        return max(within, key=rank), scores


def burst_wait_s(m: PrefixMatch | None, ctx: RouteContext, c: BackendState) -> float:
    """How long a request may hold back for a sibling prefilling its prefix on the chosen backend
    (0: nothing to wait for). Sent at once, it would compute the same prefix a second time; so it
    waits for the sibling's predicted end, or as long as its own cold prefill would take if longer
    (the prediction may be young), plus the alias's burst margin."""
    if m is None or m.leader is None or m.leader.is_set() or ctx.cached is None:
        return 0.0
    policy = ctx.prefix_policy or _DEFAULT_POLICY
    if not policy.burst_wait_ms:
        return 0.0
    if m.blocks < MIN_BURST_BLOCKS:
        # A prompt this short costs next to nothing to prefill again: holding it back behind a sibling
        # (on a slot-scoped cache, until the sibling's whole answer ends) would cost more than it saves.
        return 0.0
    own = c.model.prefill_s(ctx.prompt_tokens, ctx.now)
    return max(m.ready_at - ctx.now, own) + burst_margin_s(ctx)


def burst_margin_s(ctx: RouteContext) -> float:
    """The alias's burst margin: what a wait for a sibling's copy may run past its reason to wait."""
    return (ctx.prefix_policy or _DEFAULT_POLICY).burst_wait_ms / 1000


def verify(a, c: BackendState, blocks) -> int | None:
    """Check what the prefix index predicted for a finished attempt against the share of the prompt its
    backend reported reusing (llama.cpp cache_n, usage.prompt_tokens_details.cached_tokens); the
    backend's index accuracy and learned capacity follow. Backends that report nothing teach nothing.
    Returns the prompt tokens the backend reported reusing (for the attempt's owner to record)."""
    share = a.report.processed_share()
    if a.prefix is None or share is None or blocks is None or not blocks.chars:
        return None
    total = a.report.prompt_tokens or 0
    # A cache kept per slot (llama.cpp) loses a prompt to whichever request takes its slot, however few
    # tokens were sent since: a miss there says nothing of a capacity in tokens (learned from one, a
    # capacity fell to one block after a sibling sent with its prefix's copy busy took the other slot).
    turnover = None if slot_scoped_cache(c) else a.prefix.turnover
    c.prefixes.verify(a.prefix.blocks, turnover, 1.0 - share, BLOCK_CHARS / blocks.chars,
                      blocks.keys[0] if blocks.keys else None, a.prefix.hosted)
    return a.report.prompt_cached if a.report.prompt_cached is not None else round(total * (1 - share))
