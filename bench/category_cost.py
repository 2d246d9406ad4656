"""What classifying a question costs (app/cache/category.py), per question, on the labelled sets' questions.

Every cached request is classified once, before the exact lookup (app/cache/service.py `plan`), so this
is added to every cacheable request, hit or miss. Prints the mean per question over all questions of
bench/data (each repeat), its median over repeats, the slowest single questions, long prompts (read
only up to MAX_CHARS), and how the questions fall into categories.

    python bench/category_cost.py                 # 7 repeats
    python bench/category_cost.py --repeats 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.category import MAX_CHARS, classify, classify_turns

DATA = Path(__file__).resolve().parent / "data"
SETS = ("semantic_set", "dev_set", "independent_set", "near_repeat_set", "conversation_dev")


# Inputs that made a pattern rescan from every position (each was 5-7 ms before it was bounded; session
# notes t29v), and repeated words and quotes of every kind.
ADVERSARIAL = {
    "unclosed curly quotes": "\u201c" * 3000,
    "unclosed guillemets": "\u00ab" * 3000,
    "SELECT without FROM": "SELECT " * 400,
    "calls without a closing parenthesis": "a.b(" * 700,
    "repeated 'is the'": "is the " * 400,
    "repeated quoted words": '"a ' * 1000,
    "repeated single-quoted words": "'a " * 1000,
    "repeated backticked words": "`a " * 1000,
    "write and 1,200 words": "write " + "x " * 1200,
    "repeated words": "word " * 500,
}


def questions() -> dict[str, list[str]]:
    out = {}
    for name in SETS:
        pairs = [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]
        out[name] = sorted({p["a"] for p in pairs} | {p["b"] for p in pairs})
    return out


def per_question_us(texts: list[str], repeats: int) -> list[float]:
    """Mean microseconds per question, one figure per repeat over all of `texts`."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for t in texts:
            classify(t)
        runs.append((time.perf_counter() - t0) / len(texts) * 1e6)
    return runs


def slowest(texts: list[str], n: int = 3) -> list[tuple[float, str]]:
    timed = []
    for t in texts:
        best = min(_once(t) for _ in range(5))
        timed.append((best, t))
    return sorted(timed, reverse=True)[:n]


def _once(text: str) -> float:
    t0 = time.perf_counter()
    classify(text)
    return (time.perf_counter() - t0) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    sets = questions()
    everything = [q for qs in sets.values() for q in qs]
    print(f"{len(everything)} questions from {', '.join(SETS)}\n")
    print("| set | questions | mean chars | us per question (median of repeats) | min | max | volatile | code | general |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, qs in [*sets.items(), ("all", everything)]:
        runs = per_question_us(qs, args.repeats)
        cats = Counter(classify(q).value for q in qs)
        print(f"| {name} | {len(qs)} | {statistics.mean(len(q) for q in qs):.0f} | {statistics.median(runs):.1f} | "
              f"{min(runs):.1f} | {max(runs):.1f} | {cats['volatile']} | {cats['code']} | {cats['general']} |")
    print("\nslowest single questions (best of 5, us):")
    for us, q in slowest(everything):
        print(f"  {us:.1f} us  {q[:90]!r}")
    filler = "How do I configure the network settings on my home server so that it keeps a fixed address? "
    print("\nlong prompts (best of 20, us): only the first", MAX_CHARS, "characters are read")
    for size in (1_000, MAX_CHARS, 100_000):
        text = (filler * (size // len(filler) + 1))[:size]
        print(f"  {size:>7} chars: {min(_once(text) for _ in range(20)):.1f} us")
    print("\nadversarial prompts of 2,048+ characters (best of 10, us): what a client can make one request cost")
    for name, text in ADVERSARIAL.items():
        print(f"  {min(_once(text) for _ in range(10)):8.1f} us  {name}")
    many = ("is the " * 400,) * 1000
    t0 = time.perf_counter()
    classify_turns("ok", many)
    print(f"  {(time.perf_counter() - t0) * 1e6:8.1f} us  a general follow-up after 1,000 earlier turns of 2,800 characters")
    turns = tuple(everything[:8])
    t0 = time.perf_counter()
    for _ in range(200):
        classify_turns("And in London?", turns)
    print(f"\na general follow-up after 8 earlier user turns (classify_turns): {(time.perf_counter() - t0) / 200 * 1e6:.1f} us")
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
