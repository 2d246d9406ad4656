"""The lexical guard's cost per pair (app/cache/guard.py): `mismatch` and `unaligned` over every pair of
the labelled sets, memoised (a cached question's tokens are kept) and cold (questions seen first).

    flock /tmp/bench.lock .venv/bin/python bench/guard_cost.py                 # this tree's guard
    flock /tmp/bench.lock .venv/bin/python bench/guard_cost.py --against 65faa77   # and that commit's, interleaved
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache import guard

DATA = Path(__file__).resolve().parent / "data"


def load_guard(rev: str):
    src = subprocess.run(["git", "show", f"{rev}:app/cache/guard.py"], capture_output=True, text=True, check=True).stdout
    fd, path = tempfile.mkstemp(suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"guard_{rev}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", help="a git revision whose guard is timed too, round by round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    pairs = [(r["a"], r["b"]) for f in ("semantic_set", "dev_set", "independent_set")
             for r in map(json.loads, (DATA / f"{f}.jsonl").read_text().splitlines())]
    guards = {"this tree": guard} | ({args.against: load_guard(args.against)} if args.against else {})
    for g in guards.values():
        for a, b in pairs:
            g.mismatch(a, b)
            g.unaligned(a, b)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, g in guards.items():
            for fn in ("mismatch", "unaligned"):
                t0 = time.perf_counter()
                for a, b in pairs:
                    getattr(g, fn)(a, b)
                times.setdefault((name, fn), []).append((time.perf_counter() - t0) / len(pairs) * 1e6)
    # The contextual check's own refusals (app/cache/context.py), asked where the guard hands over no words,
    # before any model pass: this tree only.
    from app.cache import context
    for a, b in pairs:
        context.soft_refused(a, b)
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for a, b in pairs:
            context.soft_refused(a, b)
        times.setdefault(("this tree", "context.soft_refused"), []).append((time.perf_counter() - t0) / len(pairs) * 1e6)
    print(f"{len(pairs)} pairs, load average {os.getloadavg()[0]:.2f}; median of {args.rounds} rounds, us per pair")
    for (name, fn), ts in times.items():
        print(f"  {name}: {fn} {sorted(ts)[len(ts) // 2]:.1f} (memoised)")
    for name, g in guards.items():
        cold = []
        for _ in range(3):
            g.tokens.cache_clear()
            g._stem.cache_clear()
            g._spell.cache_clear()
            wn = getattr(g, "wordnet", None)  # the word meanings it asks (app/cache/wordnet.py), where it has them
            if wn is not None:
                for memo in (wn.synonyms, wn.one_sense, wn.opposed, wn.polar):
                    memo.cache_clear()
            t0 = time.perf_counter()
            for a, b in pairs[:1000]:
                g.mismatch(a, b)
                g.unaligned(a, b)
            cold.append((time.perf_counter() - t0) / 1000 * 1e6)
        print(f"  {name}: mismatch + unaligned {sorted(cold)[1]:.1f} (cold)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
