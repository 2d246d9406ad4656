"""Semantic cache quality on the labelled set: repeats served against wrong answers, per verifier.

The set (bench/data/semantic_set.jsonl, built by bench/data/build_set.py) holds true repeats and
traps, split into tune and test by topic. Each pair is scored as if `a` were cached and `b` asked:
served when similarity >= threshold, the scopes match (multi-turn pairs need the same earlier turns)
and every verifier confirms. "served" is the share of true repeats answered from cache; "wrong" the
share of traps answered with the cached (wrong) answer.

    python bench/semantic_cache.py                    # test split, shipped defaults, no judge
    python bench/semantic_cache.py --split tune       # what thresholds were chosen on
    python bench/semantic_cache.py --judge-llama      # adds an LLM judge: SmolLM2 on a local llama-server
    python bench/semantic_cache.py --judge-url http://127.0.0.1:8080/v1 --judge-model NAME --judge-key KEY
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.embedder import OnnxEncoder  # noqa: E402
from app.cache.guard import mismatch  # noqa: E402
from app.cache.judge import judge_messages, parse_verdict  # noqa: E402
from app.config import EmbeddingConfig, SemanticCachePolicy  # noqa: E402
from bench.harness import ROOT, free_port  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "semantic_set.jsonl"
MAX_WRONG = 0.01
THRESHOLDS = np.round(np.arange(0.50, 1.0, 0.02), 2)


def load(split: str) -> list[dict]:
    pairs = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return [p for p in pairs if split == "all" or p["split"] == split]


async def judge_all(pairs: list[dict], url: str, model: str, key: str, concurrency: int) -> list[bool]:
    """The judge's verdict on every pair (fail closed: no clear "yes" is False)."""
    sem = asyncio.Semaphore(concurrency)
    headers = {"authorization": f"Bearer {key}"} if key else {}

    async def one(session, p) -> bool:
        body = {"model": model, "messages": judge_messages(p["a"], p["b"]), "temperature": 0, "max_tokens": 1}
        async with sem:
            try:
                async with session.post(f"{url}/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)) as r:
                    return bool(parse_verdict(await r.json()) if r.status == 200 else False)
            except (aiohttp.ClientError, TimeoutError):
                return False

    async with aiohttp.ClientSession(headers=headers) as s:
        return list(await asyncio.gather(*(one(s, p) for p in pairs)))


def start_llama(tmp_log: Path) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    proc = subprocess.Popen([str(ROOT / "scripts/llama-server"), "--port", str(port), "-c", "4096", "-np", "2",
                             "-t", "1", "--alias", "judge"], stdout=open(tmp_log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return proc, url + "/v1", "judge"
        except Exception:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"llama-server did not start: see {tmp_log}")


def rates(mask: np.ndarray, same: np.ndarray) -> tuple[float, float]:
    return float(mask[same].mean()), float(mask[~same].mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=["tune", "test", "all"], default="test")
    ap.add_argument("--quantization", choices=["int8", "fp32"], default=EmbeddingConfig().quantization)
    ap.add_argument("--judge-url")
    ap.add_argument("--judge-model", default="judge")
    ap.add_argument("--judge-key", default="")
    ap.add_argument("--judge-llama", action="store_true", help="start scripts/llama-server (SmolLM2-135M) as the judge")
    ap.add_argument("--judge-concurrency", type=int, default=2)
    ap.add_argument("--judge-from", type=float, default=0.70, help="judge only pairs at least this similar")
    ap.add_argument("--show", type=int, default=15, help="wrong answers to list at the default")
    args = ap.parse_args()

    pairs = load(args.split)
    same = np.array([p["label"] == "same" for p in pairs])
    scoped = np.array([p.get("context_a") == p.get("context_b") for p in pairs])
    print(f"{args.split} split: {len(pairs)} pairs ({same.sum()} true repeats, {(~same).sum()} traps), "
          f"topics: {', '.join(sorted({p['topic'] for p in pairs}))}")

    encoder = OnnxEncoder(args.quantization, threads=2)
    a = encoder.encode([p["a"] for p in pairs])
    b = encoder.encode([p["b"] for p in pairs])
    sims = np.sum(a * b, axis=1)
    t0 = time.perf_counter()
    guard = np.array([mismatch(p["a"], p["b"]) is None for p in pairs])
    guard_us = (time.perf_counter() - t0) / len(pairs) * 1e6
    print(f"embeddings: all-MiniLM-L6-v2 {args.quantization}; similarity of repeats median {np.median(sims[same]):.3f}, "
          f"of traps median {np.median(sims[~same]):.3f} (max {sims[~same].max():.3f}); guard {guard_us:.0f} us per pair")

    configs = {"similarity only": np.ones(len(pairs), bool), "guard": guard}
    proc = None
    if args.judge_llama or args.judge_url:
        url, model = args.judge_url, args.judge_model
        if args.judge_llama:
            proc, url, model = start_llama(Path("/tmp/slipstream-bench-judge.log"))
        try:
            todo = [i for i in range(len(pairs)) if sims[i] >= args.judge_from and scoped[i]]
            t0 = time.perf_counter()
            verdicts = asyncio.run(judge_all([pairs[i] for i in todo], url, model, args.judge_key, args.judge_concurrency))
            judge = np.zeros(len(pairs), bool)
            judge[todo] = verdicts
            print(f"judge: {model} at {url}, {len(todo)} calls in {time.perf_counter() - t0:.0f} s")
        finally:
            if proc is not None:
                proc.terminate()
        configs["judge"] = judge
        configs["guard+judge"] = guard & judge

    print("\nserved = true repeats answered from cache; wrong = traps answered with the cached answer\n")
    print("| threshold | " + " | ".join(f"{n}: served / wrong" for n in configs) + " |")
    print("|---|" + "---|" * len(configs))
    lowest: dict[str, tuple] = {}
    for t in THRESHOLDS:
        cells = []
        for name, ok in configs.items():
            if "judge" in name and t < args.judge_from:
                cells.append("not judged")
                continue
            served, wrong = rates((sims >= t) & scoped & ok, same)
            cells.append(f"{served:.1%} / {wrong:.1%}")
            if name not in lowest and wrong <= MAX_WRONG:
                lowest[name] = (t, served, wrong)
        print(f"| {t:.2f} | " + " | ".join(cells) + " |")
    print()
    for name, (t, served, wrong) in lowest.items():
        print(f"lowest threshold with wrong <= {MAX_WRONG:.0%}, {name}: {t:.2f} (served {served:.1%}, wrong {wrong:.1%})")

    default = SemanticCachePolicy()
    print(f"\nshipped defaults: threshold {default.threshold:.2f}, verifiers: guard"
          + (" (judge off by default)" if "judge" not in configs else ""))
    failed = False
    for name in [n for n in ("guard", "guard+judge", "judge", "similarity only") if n in configs]:
        mask = (sims >= default.threshold) & scoped & configs[name]
        served, wrong = rates(mask, same)
        print(f"  {name:16s} served {served:.1%} of {same.sum()} repeats, wrong {wrong:.1%} of {(~same).sum()} traps "
              f"({int((mask & ~same).sum())} wrong answers)")
        failed |= name == "guard" and wrong > MAX_WRONG
    mask = (sims >= default.threshold) & scoped & guard
    kinds = Counter(p["kind"] for p in pairs)
    served_by_kind = Counter(p["kind"] for p, m in zip(pairs, mask) if m)
    print("\nby kind at the default (guard): " + ", ".join(
        f"{k} {served_by_kind[k]}/{n}" for k, n in sorted(kinds.items(), key=lambda kv: (kv[0].startswith("multi"), kv[0]))))
    wrong_list = [(p, s) for p, s, m, sm in zip(pairs, sims, mask, same) if m and not sm]
    for p, s in wrong_list[: args.show]:
        print(f"  wrong ({p['kind']}, {s:.3f}): {p['a']!r} ~ {p['b']!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
