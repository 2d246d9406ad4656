"""Semantic cache quality on labelled pairs: true repeats served against traps answered wrongly.

Data sets, all only reported here, never tuned on except the tune split:
- bench/data/semantic_set.jsonl (bench/data/build_set.py): tune and test splits by topic; the guard's
  rules and thresholds were chosen on `--split tune`;
- bench/data/independent_set.jsonl (bench/data/independent_set.py, `--data independent`): a
  paraphrase-heavy set and a conversation-heavy set on other topics, written by hand for issue 25;
- bench/data/dev_set.jsonl (bench/data/dev_set.py, `--data dev`): free rewordings and hard traps on
  topics of their own, split by topic into `dev-tune` (rules are chosen on it) and `dev-check`.
- bench/data/near_repeat_set.jsonl (bench/data/near_repeats.py, `--data near`): near-repeats (typos,
  shorthand, filler, markup, ...) and traps one letter or one small change away, on topics of their
  own; split by topic into `dev-tune` (rules are chosen on it) and `dev-check`.
- bench/data/conversation_dev.jsonl (bench/data/conversation_dev.py, `--data conversation-dev`): the
  conversations the history rules (app/cache/history.py) were chosen on, with the tune split.

Each pair is scored as the cache decides it (app/cache/service.py): `a` was cached, `b` is asked;
served when the last turns' similarity reaches the threshold, the verifiers confirm, and (in a
conversation) every earlier turn is the same text or matches by the rules of its kind
(app/cache/history.py: similarity at the threshold and, with the guard on, the word rules; earlier
turns alternate user, assistant). "served" is the share of true repeats answered
from the cache, "wrong" the share of traps answered with the cached (wrong) answer, and "unsafe" the
share of the hits served that were wrong.

    python bench/semantic_cache.py                         # test split, shipped defaults
    python bench/semantic_cache.py --split tune            # what the guard was tuned on
    python bench/semantic_cache.py --data independent      # the independent sets (both splits)
    python bench/semantic_cache.py --data dev --split dev-tune   # the development set (or dev-check)
    python bench/semantic_cache.py --data near --split dev-check   # near-repeats (dev-tune | dev-check | all)
    python bench/semantic_cache.py --data conversation-dev # the history rules' development set
    python bench/semantic_cache.py --judge-llama           # + an LLM judge: SmolLM2 on a local llama-server
    python bench/semantic_cache.py --judge-url http://127.0.0.1:8080/v1 --judge-model NAME --judge-key KEY
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache import context, history
from app.cache.category import classify_turns
from app.cache.embedder import OnnxEncoder
from app.cache.guard import HARD_REASONS, mismatch, unaligned
from app.cache.judge import judge_body, read_verdict, yes_probability
from app.cache.normalise import normalise
from app.config import CategoryPolicies, EmbeddingConfig, JudgeConfig, SemanticCachePolicy
from bench.harness import ROOT, free_port, stop_on_signals, wait_healthy

DATA = {"labelled": Path(__file__).resolve().parent / "data" / "semantic_set.jsonl",
        "independent": Path(__file__).resolve().parent / "data" / "independent_set.jsonl",
        "dev": Path(__file__).resolve().parent / "data" / "dev_set.jsonl",
        "near": Path(__file__).resolve().parent / "data" / "near_repeat_set.jsonl",
        "conversation-dev": Path(__file__).resolve().parent / "data" / "conversation_dev.jsonl"}
MAX_WRONG = 0.01
SHIPPED = "guard + context (shipped default)"
THRESHOLDS = np.round(np.arange(0.50, 1.0, 0.02), 2)


def load(data: str, split: str) -> list[dict]:
    pairs = [json.loads(line) for line in DATA[data].read_text().splitlines() if line.strip()]
    return [p for p in pairs if split == "all" or p["split"] == split]


async def judge_all(pairs: list[dict], url: str, judge: JudgeConfig, key: str,
                    concurrency: int) -> tuple[list[bool], list[float | None], list[float]]:
    """Per pair, the judge's verdict as the gateway reads it (app/cache/judge.py; fail closed: no clear
    "yes" is False), its yes-probability (None unless `min_yes_probability` asks for log-probabilities)
    and the call's seconds."""
    sem = asyncio.Semaphore(concurrency)
    headers = {"authorization": f"Bearer {key}"} if key else {}

    async def one(session, p) -> tuple[bool, float | None, float]:
        body = judge_body(judge, p["a"], p["b"])
        async with sem:
            t0 = time.perf_counter()
            try:
                async with session.post(f"{url}/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)) as r:
                    reply = await r.json() if r.status == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                reply = None
            ratio = yes_probability(reply) if judge.min_yes_probability is not None else None
            return bool(read_verdict(reply, judge.min_yes_probability)), ratio, time.perf_counter() - t0

    async with aiohttp.ClientSession(headers=headers) as s:
        got = await asyncio.gather(*(one(s, p) for p in pairs))
    return [g[0] for g in got], [g[1] for g in got], [g[2] for g in got]


def start_llama(tmp_log: Path) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    proc = subprocess.Popen([str(ROOT / "scripts/llama-server"), "--port", str(port), "-c", "4096", "-np", "2",
                             "-t", "1", "--alias", "judge"], stdout=open(tmp_log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=300)
    except RuntimeError as e:
        proc.terminate()
        raise RuntimeError(f"llama-server did not start ({e}): see {tmp_log}") from e
    return proc, url + "/v1", "judge"


class Scored:
    """Per pair: last-turn similarity, guard verdict, and how the earlier turns compare."""

    def __init__(self, pairs: list[dict], encoder: OnnxEncoder, normalised: bool = True) -> None:
        # The last turns as the cache compares them (app/cache/keys.py normalises the asked question,
        # and the cached one was normalised when it was stored).
        if normalised:
            pairs = [{**p, "a": normalise(p["a"]), "b": normalise(p["b"])} for p in pairs]
        self.pairs = pairs
        self.same = np.array([p["label"] == "same" for p in pairs])
        # Each side's category as the cache names it (app/cache/service.py): the normalised last turn,
        # or, when that is general, the earlier user turns' (they alternate user, assistant).
        self.stored_cat = np.array([classify_turns(p["a"], tuple((p.get("context_a") or [])[::2])).value for p in pairs])
        self.asked_cat = np.array([classify_turns(p["b"], tuple((p.get("context_b") or [])[::2])).value for p in pairs])
        a = encoder.encode([p["a"] for p in pairs])
        b = encoder.encode([p["b"] for p in pairs])
        self.sims = np.sum(a * b, axis=1)
        t0 = time.perf_counter()
        self.why = [mismatch(p["a"], p["b"]) for p in pairs]
        self.guard_us = (time.perf_counter() - t0) / len(pairs) * 1e6
        self.guard = np.array([w is None for w in self.why])
        # cache.semantic.context: where the guard is unsure (not for a hard reason), the contextual check.
        states: dict[str, list] = {}

        def in_context(cached: str, asked: str, why: str | None) -> bool:
            if why is None:
                return True
            if why in HARD_REASONS:
                return False
            u = unaligned(cached, asked)
            refused = context.refused_before_reading(cached, asked, u)
            if refused:
                return False
            for t in (cached, asked):
                if t not in states:
                    states[t] = encoder.word_states(t)
            return context.served(cached, asked, u, states[cached], states[asked], refused=refused)

        self.context = np.array([in_context(p["a"], p["b"], w) for p, w in zip(pairs, self.why)])
        # A first-person statement keeping the same facts is served with the guard on, context or not
        # (app/cache/history.py, `same_statement`), where the guard alone is unsure.
        statement = np.array([w in ("words", "order") and history.same_statement(p["a"], p["b"])
                              for p, w in zip(pairs, self.why)])
        self.guard |= statement
        self.context |= statement
        # Earlier turns (alternating user, assistant, as a chat sends them): the lowest similarity over
        # the turns that differ (1.0 when none does), and whether each differing pair passes the word
        # rules of app/cache/history.py without (hist_guard) or with (hist_context) the contextual
        # check. Different lengths never match.
        self.hist_sim = np.ones(len(pairs))
        self.hist_guard = np.ones(len(pairs), bool)
        self.hist_context = np.ones(len(pairs), bool)
        texts: dict[str, np.ndarray] = {}
        for i, p in enumerate(pairs):
            ca, cb = p.get("context_a") or [], p.get("context_b") or []
            if len(ca) != len(cb):
                self.hist_sim[i], self.hist_guard[i], self.hist_context[i] = -1.0, False, False
                continue
            for k, (x, y) in enumerate(zip(ca, cb)):
                if x == y:
                    continue
                for t in (x, y):
                    if t not in texts:
                        texts[t] = encoder.encode([t])[0]
                self.hist_sim[i] = min(self.hist_sim[i], float(texts[x] @ texts[y]))
                need = history.check("user" if k % 2 == 0 else "assistant", x, y)
                self.hist_guard[i] &= need is history.Need.SIMILARITY
                self.hist_context[i] &= need is history.Need.SIMILARITY or (
                    need is history.Need.CONTEXT and in_context(x, y, mismatch(x, y)))

    def served(self, threshold: float | np.ndarray, verified: np.ndarray, guard_history: bool | str = True) -> np.ndarray:
        """threshold: one for all pairs, or one per pair (the category rules). guard_history: True (the
        guard aligns every differing earlier turn), "context" (the guard or the contextual check does),
        False (similarity alone)."""
        aligned = self.hist_context if guard_history == "context" else self.hist_guard if guard_history else True
        history = (self.hist_sim >= threshold) & aligned
        return (self.sims >= threshold) & verified & history


CATEGORIES = ("volatile", "code", "general")


def category_rules(s: Scored, categories: CategoryPolicies, threshold: float, semantic_ttl_s: float,
                   age_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, as app/cache/service.py decides it: the threshold (the stricter of the asked and the
    stored question's category thresholds, each defaulting to the alias's), and whether an entry
    `age_s` old may be served (younger than the stored entry's TTL and than the asked category's)."""
    def ttl(c: str) -> float:
        t = categories.of(c).ttl_s
        return semantic_ttl_s if t is None else t

    def th(c: str) -> float:
        t = categories.of(c).threshold
        return threshold if t is None else t

    thresholds = np.array([max(th(a), th(b)) for a, b in zip(s.asked_cat, s.stored_cat)])
    fresh = np.array([age_s < ttl(a) and age_s < ttl(b) for a, b in zip(s.asked_cat, s.stored_cat)])
    return thresholds, fresh


def per_category(s: Scored, masks: dict[str, np.ndarray]) -> None:
    """Served (true repeats) and wrong (traps) per category of the asked question."""
    print("| asked category | pairs (stored in another category) | " +
          " | ".join(f"{name}: served | wrong" for name in masks) + " |")
    print("|---|---|" + "---|---|" * len(masks))
    for c in CATEGORIES:
        rows = s.asked_cat == c
        if not rows.any():
            continue
        cells = []
        for m in masks.values():
            cells += [f"{int((m & rows & s.same).sum())}/{int((rows & s.same).sum())}",
                      f"{int((m & rows & ~s.same).sum())}/{int((rows & ~s.same).sum())}"]
        print(f"| {c} | {int(rows.sum())} ({int((rows & (s.stored_cat != c)).sum())}) | " + " | ".join(cells) + " |")


def category_sweep(s: Scored, ok: np.ndarray, gh: bool | str, threshold: float) -> None:
    """Each category's own threshold, the others at the alias's: where a category could move."""
    print("| category | its threshold | its true repeats served | its traps wrong | all served | all wrong |\n|---|---|---|---|---|---|")
    for c in CATEGORIES:
        rows = (s.asked_cat == c) | (s.stored_cat == c)
        if not rows.any():
            continue
        for th in THRESHOLDS:
            if not (0.6 <= th <= 0.96):
                continue
            policies = CategoryPolicies.model_validate({c: {"threshold": float(th)}})
            thresholds, _ = category_rules(s, policies, threshold, 3600.0, 0.0)
            m = s.served(thresholds, ok, gh)
            mark = " (alias)" if abs(th - threshold) < 1e-9 else ""
            print(f"| {c} | {th:.2f}{mark} | {int((m & rows & s.same).sum())}/{int((rows & s.same).sum())} | "
                  f"{int((m & rows & ~s.same).sum())}/{int((rows & ~s.same).sum())} | {int((m & s.same).sum())} | "
                  f"{int((m & ~s.same).sum())} |")


def pct(x: float) -> str:
    return f"{x:.1%}"


def summary(name: str, s: Scored, mask: np.ndarray) -> str:
    served, wrong = int((mask & s.same).sum()), int((mask & ~s.same).sum())
    hits = served + wrong
    return (f"| {name} | {served}/{s.same.sum()} = {pct(served / max(1, s.same.sum()))} | "
            f"{wrong}/{(~s.same).sum()} = {pct(wrong / max(1, (~s.same).sum()))} | "
            f"{pct(wrong / hits) if hits else 'no hits'} |")


def per_kind(s: Scored, masks: dict[str, np.ndarray]) -> None:
    kinds: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, p in enumerate(s.pairs):
        kinds[("true repeat" if s.same[i] else "trap", p["kind"])].append(i)
    print("| label | kind | pairs | " + " | ".join(masks) + " |")
    print("|---|---|---|" + "---|" * len(masks))
    for (label, kind), idx in sorted(kinds.items()):
        cells = [f"{int(m[idx].sum())} ({m[idx].mean():.0%})" for m in masks.values()]
        print(f"| {label} | {kind} | {len(idx)} | " + " | ".join(cells) + " |")


def judge_sweep(s: Scored, judged: np.ndarray, yes_p: np.ndarray, chosen: float) -> None:
    """The shipped rule with the judge read at other yes-probability thresholds (at the shipped
    similarity threshold): where the margin between the rewordings and the traps it passes lies.
    `judged`: the pairs the shipped rule puts to the judge and that were asked."""
    asked = judged & ~np.isnan(yes_p)
    print(f"\n## The judge's yes-probability threshold (shipped rule; {int(judged.sum())} pairs judged, "
          f"{int((judged & np.isnan(yes_p)).sum())} of them without a yes/no probability: a miss)\n")
    print("| min_yes_probability | judged rewordings / traps passed | served | wrong |\n|---|---|---|---|")
    t = SemanticCachePolicy().threshold
    for th in sorted({0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, chosen}):
        passed = asked & (np.nan_to_num(yes_p, nan=-1.0) >= th)
        m = s.served(t, s.context | passed, "context")
        mark = " (chosen)" if th == chosen else ""
        print(f"| {th:.2f}{mark} | {int((passed & s.same).sum())} / {int((passed & ~s.same).sum())} | "
              f"{int(m[s.same].sum())} / {int(s.same.sum())} = {m[s.same].mean():.1%} | "
              f"{int(m[~s.same].sum())} / {int((~s.same).sum())} = {m[~s.same].mean():.1%} |")
    for label, rows in (("rewordings", asked & s.same), ("traps", asked & ~s.same)):
        if rows.any():
            print(f"yes-probability of the judged {label}: median {np.median(yes_p[rows]):.3f}, "
                  f"max {np.max(yes_p[rows]):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", choices=list(DATA), default="labelled")
    ap.add_argument("--split", default=None, help="labelled: tune | test | all (default test); "
                    "independent: paraphrase-set | conversation-set | all (default all); dev: dev-tune | dev-check | all; "
                    "near: dev-tune | dev-check | all (default all)")
    ap.add_argument("--quantization", choices=["int8", "fp32"], default=EmbeddingConfig().quantization)
    ap.add_argument("--judge-url")
    ap.add_argument("--judge-model", default="judge")
    ap.add_argument("--judge-key", default="")
    ap.add_argument("--judge-llama", action="store_true", help="start scripts/llama-server (SmolLM2-135M) as the judge")
    ap.add_argument("--judge-concurrency", type=int, default=2)
    ap.add_argument("--judge-min-yes-probability", type=float, default=None,
                    help="read the judge as P(yes) / (P(yes) + P(no)) against this (judge.min_yes_probability); "
                         "also prints the shipped rule at other thresholds, to tune it")
    ap.add_argument("--judge-unsure-only", action="store_true",
                    help="judge only the pairs the shipped rule would ask about (the guard unsure, similarity in band)")
    ap.add_argument("--judge-from", type=float, default=JudgeConfig.model_fields["min_similarity"].default,
                    help="judge only pairs at least this similar (the shipped judge.min_similarity)")
    ap.add_argument("--no-normalise", action="store_true",
                    help="compare the questions as typed (before app/cache/normalise.py)")
    ap.add_argument("--show", type=int, default=15, help="wrong answers to list at the default")
    ap.add_argument("--age-s", type=float, default=1.0,
                    help="seconds between an answer's store and the lookup (the category TTLs apply; default 1: "
                         "a live bench looks up within seconds)")
    ap.add_argument("--category-sweep", action="store_true",
                    help="also print each category's served / wrong at its own threshold (for tuning)")
    args = ap.parse_args()
    if args.judge_min_yes_probability is not None and not 0 < args.judge_min_yes_probability < 1:
        ap.error("--judge-min-yes-probability must lie strictly between 0 and 1")
    split = args.split or ("test" if args.data == "labelled" else "all")

    pairs = load(args.data, split)
    default = SemanticCachePolicy()
    print(f"{args.data} set, {split}: {len(pairs)} pairs, topics: {', '.join(sorted({p['topic'] for p in pairs}))}")
    s = Scored(pairs, OnnxEncoder(args.quantization, threads=2), normalised=not args.no_normalise)
    print(f"embeddings: all-MiniLM-L6-v2 {args.quantization}; similarity of repeats median "
          f"{np.median(s.sims[s.same]):.3f}, of traps median {np.median(s.sims[~s.same]):.3f}; guard {s.guard_us:.0f} us per pair")

    everything = np.ones(len(pairs), bool)
    configs: dict[str, tuple[np.ndarray, bool | str]] = {
        "similarity only": (everything, False), "guard alone (context: false)": (s.guard, True),
        SHIPPED: (s.context, "context")}
    proc = None
    judge_band = None
    if args.judge_llama or args.judge_url:
        url, model = args.judge_url, args.judge_model
        if args.judge_llama:
            proc, url, model = start_llama(Path("/tmp/slipstream-bench-judge.log"))
        try:
            judge_from = args.judge_from
            soft = np.array([w is not None and w not in HARD_REASONS for w in s.why])
            # --judge-unsure-only: only the pairs the shipped rule would put to the judge (fewer calls;
            # no "judge alone" row then).
            todo = [i for i in range(len(pairs)) if s.sims[i] >= judge_from and (soft[i] or not args.judge_unsure_only)]
            t0 = time.perf_counter()
            judge_config = JudgeConfig(alias=model, min_yes_probability=args.judge_min_yes_probability)
            verdicts, ratios, secs = asyncio.run(judge_all([pairs[i] for i in todo], url, judge_config, args.judge_key,
                                                           args.judge_concurrency))
            judge = np.zeros(len(pairs), bool)
            judge[todo] = verdicts
            yes_p = np.full(len(pairs), np.nan)
            yes_p[todo] = [np.nan if r is None else r for r in ratios]
            print(f"judge: {model} at {url}, {len(todo)} calls (similarity >= {judge_from}) in "
                  f"{time.perf_counter() - t0:.0f} s; one call p50 {np.median(secs) * 1000:.0f} ms, "
                  f"p90 {np.percentile(secs, 90) * 1000:.0f} ms (at concurrency {args.judge_concurrency})")
        finally:
            if proc is not None:
                proc.terminate()
        judge_band = soft & judge
        if not args.judge_unsure_only:
            configs["judge alone"] = (judge, False)
        configs["guard, then judge where the guard is unsure (context: false)"] = (s.guard | judge_band, True)
        # The pipeline as shipped (app/cache/service.py): the contextual check first, the judge only where
        # neither the guard nor the contextual check confirmed (a soft reason; never a hard one).
        configs["guard + context, then judge where both are unsure (shipped rule)"] = (s.context | judge_band, "context")
        if args.judge_min_yes_probability is not None:
            asked = np.zeros(len(pairs), bool)
            asked[todo] = True
            judge_sweep(s, soft & asked, yes_p, args.judge_min_yes_probability)

    t = default.threshold
    print(f"\n## At the shipped threshold {t:.2f}\n")
    print("served = true repeats answered from the cache; wrong = traps answered with the cached answer; "
          "unsafe = wrong / hits served\n")
    print("| verifier | served | wrong | unsafe |\n|---|---|---|---|")
    masks = {}
    for name, (ok, gh) in configs.items():
        masks[name] = s.served(t, ok, gh)
        print(summary(name, s, masks[name]))
    print("\nPer kind (true repeats: how many served; traps: how many answered wrongly):\n")
    per_kind(s, masks)

    # Question categories (app/cache/category.py) at the shipped defaults: one threshold and TTL for all
    # ("before") against the category rules (`cache.categories`), entries looked up --age-s after they were stored.
    shipped_ok, shipped_gh = configs[SHIPPED]
    categories = CategoryPolicies()
    thresholds, fresh = category_rules(s, categories, t, default.ttl_s, args.age_s)
    before = s.served(t, shipped_ok, shipped_gh) & (args.age_s < default.ttl_s)
    after = s.served(thresholds, shipped_ok, shipped_gh) & fresh
    rules = ", ".join(f"{c}: ttl_s {categories.of(c).ttl_s}, threshold {categories.of(c).threshold}" for c in CATEGORIES)
    print(f"\n## Per question category, {SHIPPED}, entries {args.age_s:g} s old\n")
    print(f"categories ({rules}; None: the alias's); stored questions: " +
          ", ".join(f"{c} {int((s.stored_cat == c).sum())}" for c in CATEGORIES) + "\n")
    per_category(s, {"one threshold and TTL": before, "category rules (shipped)": after})
    print(f"\ntotal: one threshold and TTL served {int((before & s.same).sum())} wrong {int((before & ~s.same).sum())}; "
          f"category rules served {int((after & s.same).sum())} wrong {int((after & ~s.same).sum())}")
    if args.category_sweep:
        print(f"\n## Per-category threshold sweep ({SHIPPED}; a pair counts for a category when either side is in it)\n")
        category_sweep(s, shipped_ok, shipped_gh, t)

    print(f"\n## Precision across cache-hit ratio (hits / all {len(pairs)} lookups; precision = right hits / hits; "
          "served / wrong as above)\n")
    print("| threshold | guard: hit ratio | precision | served | wrong | similarity only: hit ratio | precision | served | wrong "
          "| guard + context: hit ratio | precision | served | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lowest = None
    for th in THRESHOLDS:
        cells = []
        for ok, gh in ((s.guard, True), (everything, False), (s.context, "context")):
            m = s.served(th, ok, gh)
            hits, right = int(m.sum()), int((m & s.same).sum())
            cells += [f"{hits / len(pairs):.1%}", f"{right / hits if hits else 1:.1%}", f"{m[s.same].mean():.1%}",
                      f"{m[~s.same].mean():.1%}"]
            if gh == "context" and lowest is None and m[~s.same].mean() <= MAX_WRONG:
                lowest = (th, m[s.same].mean(), m[~s.same].mean())
        print(f"| {th:.2f} | " + " | ".join(cells) + " |")
    if lowest:
        print(f"\nguard + context (shipped): lowest threshold with wrong <= {MAX_WRONG:.0%}: {lowest[0]:.2f} (served {lowest[1]:.1%}, wrong {lowest[2]:.1%})")
    m = masks[SHIPPED]
    wrong_list = [(p, sim) for p, sim, hit, same in zip(pairs, s.sims, m, s.same) if hit and not same]
    for p, sim in wrong_list[: args.show]:
        print(f"  wrong ({p['kind']}, {sim:.3f}): {p['a']!r} ~ {p['b']!r}" +
              (f" after {p['context_a'][0]!r} / {p['context_b'][0]!r}" if p.get("context_a") else ""))
    return 1 if m[~s.same].mean() > MAX_WRONG else 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
