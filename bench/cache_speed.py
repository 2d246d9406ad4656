"""Cache speed, in one run: what a semantic hit adds over an exact hit, end to end through the gateway.

Starts its own Redis Stack server, a zero-latency simulator and a gateway pinned to one core
(`--cpus`, default "0"; the simulator gets the other core). One alias has the exact and semantic
caches on (shipped defaults: int8 embeddings, threshold, guard, float16 vectors in Redis). The semantic
index holds the seeded questions plus `--entries` filler vectors in the same scope, so KNN searches a
full index: real questions' embeddings perturbed (`--fillers perturbed`, the default) or uniform random
vectors (`--fillers random`, harder on the HNSW graph); see bench/fillers.py.
Requests alternate at c=1: an exact hit (a seeded question again), a semantic hit (a reworded
seeded question that the guard confirms: case, politeness, frames, typos), a judged lookup and a miss.
A judged lookup goes to a second alias whose judge (an alias answered "yes" at once by a stub server in
this process) is asked because the guard cannot align one added word ("... quickly?"): each such
question is new, so no verdict is cached, and its cost over a semantic hit is the judge call's
round trip through the gateway, the floor under any real model's own time. Each request is timed end
to end by the client, `--repeats` times over (medians of the repeats are the figures); then the parts
are timed in process on one thread: embedding, KNN, guard.

    python bench/cache_speed.py                          # 100k entries, 300 requests of each kind
    python bench/cache_speed.py --entries 5000 --requests 200 --repeats 3
    python bench/cache_speed.py --fillers random --vector-type float32   # as measured before 2026-12-05
    python bench/cache_speed.py --entries 5000 --requests 200 --repeats 3 --busy   # under a controlled load

`--busy` is the controlled load of the loaded figures: one busy process (numpy 512x512 matrix products on
one BLAS thread, never sleeping) pinned to each core this process may use, started 5 s before the timed
rounds and stopped after the parts. They are this process's children (the same session, so the same
scheduler autogroup as the gateway). The load average then reads 2 plus whatever else runs.

With `--judge-url` the judge is a real model instead of the stub: any OpenAI-compatible server you
started (a llama-server with the judge GGUF, say; `--judge-flavor llamacpp`), asked through the gateway
as a judged lookup asks it, with `--judge-timeout-ms` and `--judge-min-yes-probability` as the judge's
settings. A real judge may refuse: the "judged lookup" row then times every lookup that asked it,
whatever the verdict (a refusal costs the same call, then the backend), and the verdicts are counted.

    python bench/cache_speed.py --entries 5000 --requests 100 --repeats 1 \
        --judge-url http://127.0.0.1:8090/v1 --judge-flavor llamacpp --judge-min-yes-probability 0.73

Its temporary folder (Redis's and the gateway's logs) is removed at the end unless the run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.cache.embedder import OnnxEncoder, model_id
from app.cache.guard import mismatch
from app.cache.redis_store import VECTOR_TYPES, RedisStore, connect
from app.config import EmbeddingConfig, SemanticCachePolicy
from bench.fillers import KINDS as FILLER_KINDS
from bench.fillers import effective_dimensions, filler_vectors
from bench.harness import Fleet, free_port, percentile, start_gateway, start_redis, stop_on_signals, wait_listening

PREFIX = "slipstream:"
TOPICS = ["reset my router", "bake sourdough bread", "renew a passport", "train a puppy", "fix a flat tire",
          "learn to swim", "clean a cast iron pan", "plant tomatoes", "write a cover letter", "jump start a car",
          "remove a stripped screw", "brew cold coffee", "back up an iPhone", "tie a bow tie", "unclog a drain",
          "paint a ceiling", "lower my electricity bill", "start a compost pile", "sharpen a kitchen knife",
          "change a bike chain"]
# Rewordings the guard confirms (case, politeness, question frames, a typo): all different texts.
VARIANTS = [lambda q: q.lower(), lambda q: "Please tell me: " + q, lambda q: q + " Thanks!",
            lambda q: q.replace("How do I", "What's the way to"), lambda q: q.upper(),
            lambda q: "Quick question: " + q.lower(), lambda q: q.replace("How do I", "How can I"),
            lambda q: "Hi! " + q.replace("How do I", "What are the steps to")]
# One added word the guard cannot align (after the last shared word), so the judge is asked; each
# question asked once, so every judged lookup calls the judge.
JUDGED_WORDS = ["quickly", "safely", "easily", "properly", "correctly", "cheaply", "fast", "today", "alone", "now",
                "better", "myself", "yourself", "carefully", "efficiently", "again", "well", "right", "smoothly", "manually"]
JUDGED = "judged lookup"
KINDS = {"exact hit": "hit", "semantic hit": "semantic-hit", JUDGED: "semantic-hit", "miss (zero-latency backend)": "miss"}


def _text(value: object) -> str:
    """A Redis reply as text (the client returns bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def body(content: str, model: str = "cached") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 16}


async def post(s: aiohttp.ClientSession, url: str, content: str, model: str = "cached") -> tuple[float, str | None]:
    t0 = time.perf_counter()
    async with s.post(f"{url}/v1/chat/completions", json=body(content, model)) as r:
        await r.read()
        status = r.headers.get("x-slipstream-cache")
        if status == "semantic-hit" and r.headers.get("x-slipstream-cache-verifier") == "judge":
            status = "judged"
        return time.perf_counter() - t0, status


async def cache_counters(s: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The gateway's slipstream_cache_* counters (errors, embedding timeouts, rejections ...)."""
    async with s.get(f"{url}/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("slipstream_cache_") and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


YES_SERVER = """
import json, sys
from aiohttp import web
async def yes(request):
    await request.read()
    return web.json_response({"id": "j", "object": "chat.completion", "created": 0, "model": "yes",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "yes"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
app = web.Application()
app.router.add_post("/v1/chat/completions", yes)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def start_yes_judge(cpus: str | None) -> tuple[subprocess.Popen, int]:
    """A stub model that answers every judge question "yes" at once (on the simulator's core)."""
    port = free_port()
    cmd = [sys.executable, "-c", YES_SERVER, str(port)]
    proc = subprocess.Popen(["taskset", "-c", cpus, *cmd] if cpus else cmd)
    wait_listening(port, proc)
    return proc, port


BUSY = """
import numpy as np
a = np.random.rand(512, 512)
while True:
    a = (a @ a) / 512.0
"""


def start_busy(warm_s: float = 5.0) -> list[subprocess.Popen]:
    """One never-sleeping process pinned to each core of this process (`--busy`), running for `warm_s` first."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", BUSY], env=env)
             for c in sorted(os.sched_getaffinity(0))]
    time.sleep(warm_s)
    return procs


def own_vectors() -> np.ndarray:
    """The bench's seeded questions and their rewordings, embedded: fillers keep away from them."""
    questions = [f"How do I {t}?" for t in TOPICS]
    texts = questions + [v(q) for q in questions for v in VARIANTS]
    return OnnxEncoder(EmbeddingConfig().quantization, threads=1).encode(texts)


def fill(port: int, scope: str, entries: int, fillers: str, vector_type: str, avoid: np.ndarray) -> tuple[float, float]:
    """`entries` filler vectors in the gateway's scope and model index, written as the gateway writes
    them; returns the seconds taken and the fillers' effective dimensions (from the first chunk)."""
    client = redis.Redis(port=port)
    t0 = time.perf_counter()
    dtype, suffix = VECTOR_TYPES[vector_type]
    prefix = f"{PREFIX}sem:{model_id(EmbeddingConfig().quantization)}{suffix}:"
    dims = 0.0
    for vecs in filler_vectors(fillers, entries, avoid):
        dims = dims or effective_dimensions(vecs)
        pipe = client.pipeline(transaction=False)
        for v in vecs:
            key = f"{prefix}{scope[:16]}:{uuid.uuid4().hex}"
            pipe.hset(key, mapping={"scope": scope, "vec": v.astype(dtype).tobytes(), "query": "filler", "answer": b"{}"})
            pipe.pexpire(key, 3_600_000)
        pipe.execute()
    return time.perf_counter() - t0, dims


async def through_gateway(url: str, port: int, entries: int, requests: int, repeats: int, fillers: str,
                          vector_type: str, verdicts: Counter[str]) -> list[dict[str, list[float]]]:
    """One dict of end-to-end times per repeat, by kind of request; the index is filled once. A real
    judge's verdicts on the judged lookups are counted into `verdicts` (served: "judged", refused: "miss")."""
    questions = [f"How do I {t}?" for t in TOPICS]
    runs: list[dict[str, list[float]]] = []
    async with aiohttp.ClientSession(headers={"authorization": "Bearer bench"}) as s:
        for q in questions:
            await post(s, url, q)
            await post(s, url, q, "judged")
        await asyncio.sleep(1.0)  # background writes
        client = redis.Redis(port=port)
        scopes = {_text(client.hget(k, "scope")) for k in client.scan_iter(f"{PREFIX}sem:*", count=1000)}
        fill_s, avoid = 0.0, own_vectors()
        for scope in sorted(scopes):
            took, dims = fill(port, scope, entries, fillers, vector_type, avoid)
            fill_s += took
        while int(_info(client, "indexing")):
            await asyncio.sleep(0.2)
        print(f"filled {entries} extra entries ({fillers} fillers, {dims:.0f} effective dimensions; {vector_type} "
              f"vectors) in each of the {len(scopes)} aliases' scopes in {fill_s:.1f} s; "
              f"Redis used_memory {client.info('memory')['used_memory'] / 2**20:.0f} MiB")
        asked = 0
        for _ in range(repeats):
            out: dict[str, list[float]] = {name: [] for name in KINDS}
            unexpected: Counter[tuple[str, str | None]] = Counter()
            before = await cache_counters(s, url)
            for i in range(requests):
                q = questions[i % len(questions)]
                variant = VARIANTS[(i // len(questions)) % len(VARIANTS)](q)
                judged = q[:-1] + f" {JUDGED_WORDS[(asked // len(questions)) % len(JUDGED_WORDS)]}" \
                    + (f" {JUDGED_WORDS[(asked // len(questions) // len(JUDGED_WORDS)) % len(JUDGED_WORDS)]}?"
                       if asked >= len(questions) * len(JUDGED_WORDS) else "?")
                asked += 1
                fresh = f"Tell me something new: {uuid.uuid4().hex}"
                for name, content, model, want in (
                        ("exact hit", q, "cached", "hit"), ("semantic hit", variant, "cached", "semantic-hit"),
                        (JUDGED, judged, "judged", "judged"), ("miss (zero-latency backend)", fresh, "cached", "miss")):
                    try:
                        dt, status = await post(s, url, content, model)
                    except aiohttp.ServerDisconnectedError:  # a keep-alive connection closed under us: not timed
                        dt, status = 0.0, "disconnected"
                    if name == JUDGED and status in ("judged", "miss"):
                        verdicts[status] += 1  # a refusal asked the judge too: the same lookup, timed alike
                    if status == want or (name == JUDGED and status == "miss" and verdicts["real"]):
                        out[name].append(dt)
                    else:
                        unexpected[name, status] += 1
            if unexpected:
                after = await cache_counters(s, url)
                moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
                print(f"{sum(unexpected.values())} requests did not get the expected cache status (left out of the "
                      f"figures): {', '.join(f'{n} {k} got {st}' for (k, st), n in sorted(unexpected.items()))}; "
                      f"gateway counters in the round: {moved}")
            runs.append(out)
    return runs


def _info(client: redis.Redis, field: str) -> Any:
    """A field of FT.INFO for the one semantic index (RESP2 or RESP3 reply)."""
    index = next(_text(i) for i in client.execute_command("FT._LIST"))
    raw = client.execute_command("FT.INFO", index)
    info = dict(zip(raw[::2], raw[1::2])) if isinstance(raw, list) else raw
    return info.get(field.encode(), info.get(field, 0))


async def parts(port: int, requests: int, vector_type: str) -> dict[str, list[float]]:
    """The semantic lookup's parts on one thread: embedding (int8 and fp32), KNN, guard per candidate."""
    store = RedisStore(connect(f"redis://127.0.0.1:{port}/0", 5.0), PREFIX, model_id(EmbeddingConfig().quantization),
                       vector_type=vector_type)
    client = redis.Redis(port=port)
    key = next(client.scan_iter(f"{PREFIX}sem:*", count=1000))
    scope = _text(client.hget(key, "scope"))
    encoders = {q: OnnxEncoder(q, threads=1) for q in ("int8", "fp32")}
    out: dict[str, list[float]] = {"embedding int8 (1 thread)": [], "embedding fp32 (1 thread)": [],
                                   "KNN (Redis, scoped, k=4)": [], "guard (per candidate)": [],
                                   "cpu: embedding int8": [], "cpu: embedding fp32": [], "cpu: guard (per candidate)": []}
    for i in range(requests):
        q = TOPICS[i % len(TOPICS)]
        text = VARIANTS[i % len(VARIANTS)](f"How do I {q}?") + f" ({i})"  # never the same text twice
        for name, enc in encoders.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            vec = enc.encode([text])[0]
            out[f"embedding {name} (1 thread)"].append(time.perf_counter() - t0)
            out[f"cpu: embedding {name}"].append(time.thread_time() - c0)
        t0 = time.perf_counter()
        await store.nearest(scope, vec, 4)
        out["KNN (Redis, scoped, k=4)"].append(time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.thread_time()
        mismatch(f"How do I {q}? ({i})", text)
        out["guard (per candidate)"].append(time.perf_counter() - t0)
        out["cpu: guard (per candidate)"].append(time.thread_time() - c0)
    await store.aclose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds through the same gateway; figures are their medians")
    ap.add_argument("--cpus", default="0", help="cores for the gateway (taskset); the simulator gets the rest")
    ap.add_argument("--fillers", choices=FILLER_KINDS, default="perturbed", help="what fills the index (bench/fillers.py)")
    ap.add_argument("--vector-type", choices=["float16", "float32"], default="float16", help="cache.redis_vector_type")
    ap.add_argument("--busy", action="store_true",
                    help="controlled load: a busy process pinned to each core during the timed rounds and the parts")
    ap.add_argument("--judge-url", help="a real judge: an OpenAI-compatible base URL (.../v1) instead of the yes stub")
    ap.add_argument("--judge-model", default="judge", help="the model name the judge server is asked for")
    ap.add_argument("--judge-flavor", default="openai", help="the judge backend's flavor (llamacpp for llama-server)")
    ap.add_argument("--judge-timeout-ms", type=float, help="semantic.judge.timeout_ms (default: the shipped one)")
    ap.add_argument("--judge-min-yes-probability", type=float, help="semantic.judge.min_yes_probability (default: off)")
    args = ap.parse_args()
    vector_type = args.vector_type.upper()
    tmp = Path(tempfile.mkdtemp(prefix="slipstream-cache-bench-"))
    redis_proc, port = start_redis(tmp / "redis.log")
    other = "1" if args.cpus == "0" else None
    fleet = Fleet.zero_latency(tmp, cpus=other)
    judge_proc = None
    if args.judge_url:
        judge_backend = {"base_url": args.judge_url, "model": args.judge_model, "flavor": args.judge_flavor}
    else:
        judge_proc, judge_port = start_yes_judge(other)
        judge_backend = {"base_url": f"http://127.0.0.1:{judge_port}/v1", "model": "yes"}
    judge: dict[str, Any] = {"alias": "yes-judge", "min_similarity": 0.75}
    if args.judge_timeout_ms is not None:
        judge["timeout_ms"] = args.judge_timeout_ms
    if args.judge_min_yes_probability is not None:
        judge["min_yes_probability"] = args.judge_min_yes_probability
    # finish_reason "length" allowed: the zero-latency backend cuts answers at max_tokens.
    cache = {"exact": {"enabled": True}, "semantic": {"enabled": True}, "finish_reasons": ["stop", "length"]}
    judged = {**cache, "semantic": {"enabled": True, "judge": judge}}
    models = {"cached": {"backends": ["zero"], "cache": cache}, "judged": {"backends": ["zero"], "cache": judged},
              "yes-judge": {"backends": ["yes"]}}
    extra = {"cache": {"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0", "embedding": {"threads": 1},
                       "redis_vector_type": args.vector_type}}
    extra["backends"] = {"zero": {"base_url": f"http://127.0.0.1:{fleet.backends['zero']['port']}/v1", "model": fleet.model},
                         "yes": judge_backend}
    gw = start_gateway(tmp, fleet, cpus=args.cpus, models=models, extra=extra)
    busy: list[subprocess.Popen] = []
    ok = False
    try:
        busy = start_busy() if args.busy else []
        load = [os.getloadavg()[0]]
        verdicts: Counter[str] = Counter(real=int(bool(args.judge_url)))
        runs = asyncio.run(through_gateway(gw.url, port, args.entries, args.requests, args.repeats, args.fillers, vector_type,
                                           verdicts))
        load.append(os.getloadavg()[0])
        rows = asyncio.run(parts(port, args.requests, vector_type))
        ok = True
    finally:
        for p in busy:
            p.kill()
            p.wait()
        gw.stop()
        fleet.stop()
        if judge_proc is not None:
            judge_proc.terminate()
        redis_proc.terminate()
        redis_proc.wait(10)
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {tmp}", file=sys.stderr)
    print(f"\nshipped defaults: {EmbeddingConfig().quantization} embeddings, threshold "
          f"{SemanticCachePolicy().threshold}, guard; {args.entries} {args.fillers} fillers, {vector_type} vectors; "
          f"gateway on core(s) {args.cpus}; "
          + (f"{len(busy)} busy processes (--busy), one pinned to each core; " if busy else "")
          + f"load average {load[0]:.2f} -> {load[1]:.2f} over the timed rounds\n")
    med = lambda xs: statistics.median(xs)
    print(f"End to end, medians of {len(runs)} rounds ({' / '.join(str(len(r['exact hit'])) for r in runs)} exact hits timed)\n")
    print("| what | p50 ms | p90 ms | p99 ms | p50 per round |\n|---|---|---|---|---|")
    for name in KINDS:
        p50s = [percentile(r[name], 50) for r in runs]
        print(f"| {name} | {med(p50s):.2f} | {med([percentile(r[name], 90) for r in runs]):.2f} | "
              f"{med([percentile(r[name], 99) for r in runs]):.2f} | {' / '.join(f'{x:.2f}' for x in p50s)} |")
    judge_desc = (f"a real judge at {args.judge_url} (model {args.judge_model}): {verdicts['judged']} served, "
                  f"{verdicts['miss']} refused or failed" if args.judge_url else "the yes stub")
    print(f"\njudged lookups asked {judge_desc}")
    for name, target in (("semantic hit", " (target <= 3 ms)"), (JUDGED, "")):
        added = {p: [percentile(r[name], p) - percentile(r["exact hit"], p) for r in runs] for p in (50, 90)}
        ratio = [percentile(r[name], 50) / percentile(r["exact hit"], 50) for r in runs]
        print(f"\na {name} adds {med(added[50]):.2f} ms p50 over an exact hit{target}, {med(added[90]):.2f} ms p90 "
              f"(per round: p50 {' / '.join(f'{x:+.2f}' for x in added[50])}; ratio {' / '.join(f'{x:.2f}x' for x in ratio)})")
    # A drift check: the same difference in each half of every round.
    halves = [percentile(r[k][h], 50) for r in runs for h in (slice(None, len(r["exact hit"]) // 2), slice(len(r["exact hit"]) // 2, None))
              for k in ("semantic hit",)]
    exact_halves = [percentile(r["exact hit"][h], 50) for r in runs
                    for h in (slice(None, len(r["exact hit"]) // 2), slice(len(r["exact hit"]) // 2, None))]
    print("semantic minus exact, p50 by half round: " + " / ".join(f"{a - b:+.2f}" for a, b in zip(halves, exact_halves)))
    print("\nParts, in this process on one thread\n\n| what | p50 ms | p90 ms | n |\n|---|---|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {percentile(values, 50):.2f} | {percentile(values, 90):.2f} | {len(values)} |")
    cpu = {name: percentile(v, 50) for name, v in rows.items() if name.startswith("cpu:")}
    if cpu:
        # On a shared machine wall time includes waiting for a core; CPU time is what the lookup costs.
        total = cpu["cpu: embedding int8"] + cpu["cpu: guard (per candidate)"] + percentile(rows["KNN (Redis, scoped, k=4)"], 50)
        print(f"CPU cost of a semantic hit's parts on one core: embedding int8 {cpu['cpu: embedding int8']:.2f} ms + "
              f"guard {cpu['cpu: guard (per candidate)']:.2f} ms (the first candidate) + KNN "
              f"{percentile(rows['KNN (Redis, scoped, k=4)'], 50):.2f} ms (wall, Redis) = {total:.2f} ms p50")
    return 0


if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
