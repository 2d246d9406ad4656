"""Contextual alignment: a second verifier for the rewordings the guard cannot prove equal.

The guard (app/cache/guard.py) rejects any changed word it has no rule for, so "How do I stop my cat
from scratching furniture?" misses "How can I keep my cat from scratching the furniture?". Where only a
few of the most common words differ (`guard.unaligned`: no number, negation, past tense or role word,
roles unchanged, rare words equal), this verifier reads each differing word as the model sees it in
its sentence (the encoder's last hidden state, averaged over the word's pieces) and serves the match
when every one of them has a counterpart in the other question at cosine >= `MIN_COSINE`.

Why only common words: in context, siblings and antonyms look alike too ("late"/"early" score ~0.8),
as isolated word vectors did; what keeps traps out is that the words a trap changes are mostly the
rarer ones (the object, the name, the value), which must still match exactly. Measured in the README
("Semantic cache quality"): it serves more paraphrases and lets some antonyms through, so it is off
by default (`cache.semantic.context`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

import numpy as np

from app.cache import guard
from app.cache.embedder import Embedder
from app.cache.verify import Verdict

# Chosen on the tune split of bench/data/semantic_set.jsonl: 0.6 let 4 traps of 335 through there, 0.7 none.
MIN_COSINE = 0.7
_MEMO_MAX = 1024  # cached questions are asked about again and again: their word vectors are kept


def aligned(unaligned: guard.Unaligned, cached_states: list[tuple[str, np.ndarray]],
            asked_states: list[tuple[str, np.ndarray]], min_cosine: float = MIN_COSINE) -> bool:
    """Every differing word has a content word on the other side at cosine >= min_cosine, in context."""
    cached_vec = dict(reversed(cached_states))  # a word's first occurrence
    asked_vec = dict(reversed(asked_states))
    sides = ((unaligned.cached, cached_vec, unaligned.asked_words, asked_vec),
             (unaligned.asked, asked_vec, unaligned.cached_words, cached_vec))
    for words, own, other_words, other in sides:
        others = [other[w] for w in other_words if w in other]
        for w in words:
            if w not in own or not others or max(float(own[w] @ v) for v in others) < min_cosine:
                return False
    return True


class ContextAligner:
    """A `Verifier`: "yes" only for a pair `guard.unaligned` admits whose differing words align in context."""

    name = "context"

    def __init__(self, embedder: Embedder, min_cosine: float = MIN_COSINE) -> None:
        self._embedder = embedder
        self.min_cosine = min_cosine
        self._memo: OrderedDict[str, list[tuple[str, np.ndarray]]] = OrderedDict()

    async def verify(self, query: str, cached: str, timeout_s: float) -> Verdict:
        unaligned = guard.unaligned(cached, query)
        if unaligned is None:
            return Verdict(False, "unaligned")
        # One more encoder pass per question: bounded like an embedding (`embedding.timeout_ms`) and by
        # the caller's time left; late is a no, never a wait on the request's whole deadline.
        deadline = time.monotonic() + min(timeout_s, self._embedder.config.timeout_ms / 1000)
        states = await asyncio.gather(*(self._states(t, deadline) for t in (cached, query)))
        if states[0] is None or states[1] is None:
            return Verdict(False, "timeout")
        if aligned(unaligned, states[0], states[1], self.min_cosine):
            return Verdict(True)
        return Verdict(False, "words")

    async def _states(self, text: str, deadline: float) -> list[tuple[str, np.ndarray]] | None:
        got = self._memo.get(text)
        if got is not None:
            self._memo.move_to_end(text)
            return got
        got = await self._embedder.word_states(text, deadline - time.monotonic())
        if got:
            self._memo[text] = got
            while len(self._memo) > _MEMO_MAX:
                self._memo.popitem(last=False)
        return got or None
