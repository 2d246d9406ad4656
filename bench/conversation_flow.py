"""Conversations as a chat client plays them, end to end through the gateway (issue 25, "Conversations").

bench/semantic_cache.py scores labelled pairs with the replies the data gives. Here the replies are
the model's: for each conversation of a labelled set, a first client sends the user's statement,
appends the reply it got and asks the follow-up (both cached); then every variant of the set is
played the same way by another client (`Cache-Control: no-store`, so variants never serve each
other): its statement (the same, reworded, or a trap's), the reply the gateway gives for it (from the
cache when the statement hits, else the model's own), then its follow-up. A true repeat is served
when that follow-up hits; a trap is answered wrongly when it does. Both are split by whether the
variant's statement was itself served from the cache (its reply is then the cached one).

    python bench/conversation_flow.py --backend sim                       # simulated backend
    flock /tmp/bench.lock python bench/conversation_flow.py --backend llama  # SmolLM2-135M on llama-server
    python bench/conversation_flow.py --data independent --split conversation-set

Variants that differ only in the reply are left out (the reply is the model's here). Ports: --port,
--port+1 (gateway, backend).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
import openai
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.harness import ROOT, stop_on_signals, wait_healthy, wait_listening

DATA = {"conversation-dev": ROOT / "bench/data/conversation_dev.jsonl", "independent": ROOT / "bench/data/independent_set.jsonl"}
SYSTEM = "You are a helpful assistant. Answer in one short sentence."


def gateway_config(port: int, backend_port: int, backend: str) -> dict:
    config: dict = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "open"},
        "backends": {"b": {"base_url": f"http://127.0.0.1:{backend_port}/v1", "flavor": "llamacpp", "model": "m",
                           "max_concurrency": 4}},
        # The shipped semantic defaults (threshold, guard, contextual alignment), switched on.
        "models": {"m": {"backends": ["b"], "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}}}},
    }
    if backend == "sim":
        config["simulator"] = {"host": "127.0.0.1", "seed": 7, "backends": {"b": {
            "port": backend_port, "model": "m", "slots": 8, "prefill_tokens_per_s": 100000, "tpot_ms": 0}}}
    return config


def variants(pairs: list[dict]) -> dict[tuple[str, str, str], list[tuple[str, str, str, str]]]:
    """(first statement, its reply in the data, follow-up) -> [(label, kind, statement, follow-up)], one per
    distinct variant (the reply left to the model)."""
    out: dict = defaultdict(dict)
    for p in pairs:
        ca, cb = p.get("context_a") or [], p.get("context_b") or []
        if len(ca) != 2 or len(cb) != 2:
            continue
        key = (ca[0], ca[1], p["a"])
        v = (cb[0], p["b"])
        if v == (ca[0], p["a"]) or v in out[key]:
            continue  # only the reply differs: nothing to play
        out[key][v] = (p["label"], p["kind"], cb[0], p["b"])
    return {k: list(v.values()) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["sim", "llama"], default="sim")
    ap.add_argument("--data", choices=list(DATA), default="conversation-dev")
    ap.add_argument("--split", default=None, help="independent: conversation-set (default)")
    ap.add_argument("--port", type=int, default=21650)
    ap.add_argument("--max-tokens", type=int, default=0, help="a bound on each reply (0: none; a reply cut there is not cached)")
    ap.add_argument("--limit", type=int, default=0, help="play only the first N conversations")
    args = ap.parse_args()
    split = args.split or ("conversation-set" if args.data == "independent" else None)
    pairs = [json.loads(line) for line in DATA[args.data].read_text().splitlines() if line.strip()]
    pairs = [p for p in pairs if split is None or p["split"] == split]
    convs = variants(pairs)
    if args.limit:
        convs = dict(list(convs.items())[: args.limit])

    tmp = Path(tempfile.mkdtemp(prefix="conv-flow-"))
    procs = []
    port, backend_port = args.port, args.port + 1
    try:
        if args.backend == "llama":
            procs.append(subprocess.Popen([str(ROOT / "scripts/llama-server"), "--port", str(backend_port), "-c", "4096",
                                           "-np", "2", "-t", "2", "--alias", "m"],
                                          stdout=open(tmp / "llama.log", "w"), stderr=subprocess.STDOUT))
            wait_healthy(f"http://127.0.0.1:{backend_port}", procs[-1], timeout=300)
        (tmp / "gw.yaml").write_text(yaml.safe_dump(gateway_config(port, backend_port, args.backend)))
        procs.append(subprocess.Popen([str(ROOT / ".venv/bin/slipstream"), "serve", "--config", str(tmp / "gw.yaml")],
                                      stdout=open(tmp / "gw.log", "w"), stderr=subprocess.STDOUT))
        wait_listening(port, procs[-1], timeout=120)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=120)

        def say(messages: list, seed: int, store: bool) -> tuple[str, str, str]:
            bound = {"max_tokens": args.max_tokens} if args.max_tokens else {}
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, temperature=0, seed=seed, **bound,
                extra_headers={} if store else {"cache-control": "no-store"})
            r = raw.parse()
            return raw.headers.get("x-slipstream-cache", ""), r.choices[0].message.content or "", r.choices[0].finish_reason

        def flush() -> None:
            httpx.post(f"http://127.0.0.1:{port}/admin/cache/flush", timeout=10)
            time.sleep(0.05)

        counts: dict = defaultdict(lambda: [0, 0, 0, 0])  # (label, kind) -> [played, follow-up hit, statement hit, both]
        stored = truncated = 0
        t0 = time.perf_counter()
        for seed, ((statement, _, follow_up), plays) in enumerate(convs.items(), start=1):
            sys_turn = {"role": "system", "content": SYSTEM}
            first = [sys_turn, {"role": "user", "content": statement}]
            _, reply, finish = say(first, seed, True)
            flush()
            _, _, finish2 = say([*first, {"role": "assistant", "content": reply}, {"role": "user", "content": follow_up}],
                                seed, True)
            flush()
            stored += finish2 == "stop"
            truncated += finish != "stop"
            for label, kind, st, fu in plays:
                msgs = [sys_turn, {"role": "user", "content": st}]
                s1, reply_b, _ = say(msgs, seed, False)
                s2, _, _ = say([*msgs, {"role": "assistant", "content": reply_b}, {"role": "user", "content": fu}], seed, False)
                c = counts[(label, kind)]
                first_hit, follow_hit = s1 in ("hit", "semantic-hit"), s2 in ("hit", "semantic-hit")
                c[0] += 1
                c[1] += follow_hit
                c[2] += first_hit
                c[3] += first_hit and follow_hit
        secs = time.perf_counter() - t0
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()

    print(f"{args.data} {split or ''}, backend {args.backend}: {len(convs)} conversations, "
          f"{sum(c[0] for c in counts.values())} variants played in {secs:.0f} s; first conversations with the "
          f"follow-up's answer stored: {stored}/{len(convs)} (a reply cut at max_tokens is never stored; "
          f"first replies cut: {truncated})\n")
    print("| label | kind | played | follow-up served from the cache | statement served from the cache | both |")
    print("|---|---|---|---|---|---|")
    totals: dict = defaultdict(lambda: [0, 0])
    for (label, kind), (n, hit, first, both) in sorted(counts.items()):
        print(f"| {'true repeat' if label == 'same' else 'trap'} | {kind} | {n} | {hit} | {first} | {both} |")
        totals[label][0] += n
        totals[label][1] += hit
    for label, (n, hit) in sorted(totals.items()):
        print(f"\n{'true repeats served' if label == 'same' else 'traps answered wrongly'}: {hit}/{n}"
              f" = {hit / max(1, n):.1%}", end="")
    print()
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
