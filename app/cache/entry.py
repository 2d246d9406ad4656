"""A cached answer as stored: the complete response body and when it stops being fresh."""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson

from app.cache.category import Category

_CATEGORIES = frozenset(c.value for c in Category)


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    body: dict  # a complete chat.completion or text_completion object
    created: float  # wall-clock seconds
    fresh_until: float  # after this it may only be served stale (when every backend fails)
    # The stored question's category (app/cache/category.py), fixed when it was stored; entries written
    # before categories existed read as "general", which is how they were cached.
    category: str = "general"

    def to_bytes(self) -> bytes:
        return orjson.dumps({"v": 1, "body": self.body, "created": self.created, "fresh_until": self.fresh_until,
                             "category": self.category})

    @classmethod
    def from_bytes(cls, data: bytes) -> CachedAnswer | None:
        """None for anything unreadable: a corrupt entry is a miss, never an error."""
        try:
            d = orjson.loads(data)
            if d.get("v") != 1 or not isinstance(d.get("body"), dict):
                return None
            category = d.get("category", "general")
            return cls(d["body"], float(d["created"]), float(d["fresh_until"]),
                       category if category in _CATEGORIES else "general")
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return None

    @property
    def fresh(self) -> bool:
        return time.time() < self.fresh_until


@dataclass(frozen=True, slots=True)
class Hit:
    answer: CachedAnswer
    kind: str  # "hit" | "semantic-hit" | "stale"
    similarity: float | None = None
    verifier: str | None = None  # for a semantic hit: the verifiers that confirmed it
