"""Filler vectors for the cache benches: a semantic index of `n` entries that is not the bench's own.

Two kinds:

- `perturbed` (the default): the int8 model's embeddings of the 5,510 distinct questions in
  bench/data/*.jsonl, each filler one of them plus noise drawn from their own covariance, scaled so a
  filler keeps a similarity of about 0.83 to its question (a related but different question: below
  any serving threshold). Real embeddings share a mean direction and spread over ~115 effective
  dimensions (participation ratio of the covariance's eigenvalues); these fillers keep both (~115).
- `random`: unit vectors drawn uniformly (isotropic: ~354 effective dimensions, any two nearly
  orthogonal). Harder on an HNSW graph than real embeddings, and kept for comparison with older figures.

Fillers within `AVOID_SIMILARITY` of a vector in `avoid` (the bench's own questions and their
rewordings) are dropped and drawn again, so the bench's lookups are not crowded out of their top k by
near copies of their own question. The pool's embeddings are cached beside the model
(`<cache>/slipstream/bench/`): ~12 s to make once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
KINDS = ("perturbed", "random")
AVOID_SIMILARITY = 0.8
NOISE = 0.7  # times a draw from the pool's covariance: similarity ~0.83 to the filler's question


def pool_texts() -> list[str]:
    """Every distinct question (both sides of every pair) in the labelled sets."""
    texts: set[str] = set()
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            texts.update(row[k] for k in ("a", "b") if isinstance(row.get(k), str))
    return sorted(texts)


def pool_vectors(quantization: str = "int8") -> np.ndarray:
    """The pool's embeddings (float32 unit rows), from the cache when the texts have not changed."""
    from app.cache.embedder import OnnxEncoder, model_id
    from app.cache.onnx_export import cache_dir

    texts = pool_texts()
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache_dir().parent / "bench" / f"filler-pool-{model_id(quantization)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    encoder = OnnxEncoder(quantization, threads=1)
    vectors = np.concatenate([encoder.encode(texts[i:i + 32]) for i in range(0, len(texts), 32)]).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def filler_vectors(kind: str, n: int, avoid: np.ndarray | None = None, chunk: int = 2000,
                   seed: int = 0) -> Iterator[np.ndarray]:
    """`n` float32 unit vectors in chunks of at most `chunk` rows."""
    if kind not in KINDS:
        raise ValueError(f"filler kind {kind!r}: one of {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    if kind == "perturbed":
        pool = pool_vectors()
        values, vectors = np.linalg.eigh(np.cov(pool.T))
        mix = (vectors * np.sqrt(np.clip(values, 0, None))).astype(np.float32).T  # a normal draw @ mix ~ N(0, cov)
    made = 0
    while made < n:
        size = min(chunk, n - made)
        if kind == "perturbed":
            rows = pool[rng.integers(len(pool), size=size)]
            rows = rows + NOISE * (rng.standard_normal((size, pool.shape[1])).astype(np.float32) @ mix)
        else:
            rows = rng.standard_normal((size, 384)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        if avoid is not None and len(avoid):
            rows = rows[(rows @ avoid.T).max(axis=1) < AVOID_SIMILARITY]
        if len(rows):
            made += len(rows)
            yield rows


def effective_dimensions(vectors: np.ndarray) -> float:
    """The covariance's participation ratio: how many dimensions the vectors really spread over."""
    values = np.linalg.eigvalsh(np.cov(vectors.T))
    return float(values.sum() ** 2 / (values ** 2).sum())
