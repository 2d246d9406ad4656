"""Semantic cache quality: hit rate on paraphrases and false-hit rate on near-misses, across thresholds.

The labelled set (bench/data/semantic_pairs.jsonl, built by hand for this project) holds paraphrase
pairs and near-miss pairs that differ in a number, entity, unit, negation, polarity word, language or
code identifier. Each pair is scored with the gateway's own embedding model and guard, as if `a` were
cached and `b` asked.

    python bench/semantic_cache.py
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.embedder import OnnxEncoder  # noqa: E402
from app.cache.guard import mismatch  # noqa: E402
from app.config import SemanticCachePolicy  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "semantic_pairs.jsonl"
MAX_FALSE_HITS = 0.01


def main() -> int:
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    model = OnnxEncoder("int8", threads=2)
    a = model.encode([p["a"] for p in pairs])
    b = model.encode([p["b"] for p in pairs])
    sims = np.sum(a * b, axis=1)
    same = np.array([p["label"] == "paraphrase" for p in pairs])
    guarded = np.array([mismatch(p["a"], p["b"]) is None for p in pairs])
    kinds = Counter(p["kind"] for p in pairs)
    print(f"{len(pairs)} pairs: {dict(kinds)}")
    print(f"similarity, paraphrases: median {np.median(sims[same]):.3f}, min {sims[same].min():.3f}")
    print(f"similarity, near-misses: median {np.median(sims[~same]):.3f}, max {sims[~same].max():.3f}")
    print(f"guard lets through {guarded[same].mean():.1%} of paraphrases and {guarded[~same].mean():.1%} of near-misses\n")

    print("| threshold | hit rate (no guard) | false hits (no guard) | hit rate (guard) | false hits (guard) |")
    print("|---|---|---|---|---|")
    best = None
    for t in np.round(np.arange(0.60, 1.0, 0.02), 2):
        match = sims >= t
        hit_ng, false_ng = match[same].mean(), match[~same].mean()
        hit_g, false_g = (match & guarded)[same].mean(), (match & guarded)[~same].mean()
        print(f"| {t:.2f} | {hit_ng:.1%} | {false_ng:.1%} | {hit_g:.1%} | {false_g:.1%} |")
        if best is None and false_g <= MAX_FALSE_HITS:
            best = (t, hit_g, false_g)
    default = SemanticCachePolicy().threshold
    match = (sims >= default) & guarded
    print(f"\nlowest threshold with false hits <= {MAX_FALSE_HITS:.0%} (guard on): {best[0]:.2f} "
          f"(hit rate {best[1]:.1%}, false hits {best[2]:.1%})")
    print(f"configured default {default:.2f}: hit rate {match[same].mean():.1%}, false hits {match[~same].mean():.1%}")
    leaks = [p for p, m, s in zip(pairs, match, same) if m and not s]
    for p in leaks:
        print(f"  false hit ({p['kind']}): {p['a']!r} ~ {p['b']!r}")
    return 0 if match[~same].mean() <= MAX_FALSE_HITS else 1


if __name__ == "__main__":
    sys.exit(main())
