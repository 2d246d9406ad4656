"""Cost of a shared prefix index in Redis on the routing path: one MGET of a prompt's block keys (the
lookup) and one pipelined SET EX per block (the record), per routing decision, on a real Redis on
loopback; against the in-process index (hash, match, record).

    python bench/prefix_index_cost.py
"""
import hashlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import redis

from app.protocols import CHAT
from app.routing.prefix_index import BackendPrefixes, prompt_blocks
from bench.harness import start_redis

p, port = start_redis()
r = redis.Redis(port=port)
keys = [hashlib.blake2b(str(i).encode(), digest_size=12).digest() for i in range(17)]  # a ~2 KB prompt: 17 blocks
look, rec = [], []
for i in range(2000):
    t = time.perf_counter(); r.mget([b"px:" + k for k in keys]); look.append(time.perf_counter() - t)
    t = time.perf_counter()
    with r.pipeline(transaction=False) as pl:
        for k in keys:
            pl.set(b"px:" + k, b"backend-1", ex=120)
        pl.execute()
    rec.append(time.perf_counter() - t)
def q(v, f): return sorted(v)[int(f * (len(v) - 1))] * 1e6
print("redis shared-index cost per routing decision (2000 decisions, 17-block prompt, loopback, shared 2-core box):")
print(f"  lookup MGET   p50 {q(look,.5):.0f} us  p99 {q(look,.99):.0f} us")
print(f"  record SET EX p50 {q(rec,.5):.0f} us  p99 {q(rec,.99):.0f} us")
body = {"messages": [{"role": "system", "content": "x" * 2100}, {"role": "user", "content": "hi"}]}
idx = BackendPrefixes()
pb = prompt_blocks(CHAT.prefix_text(body))
t = time.perf_counter()
for i in range(2000):
    pb = prompt_blocks(CHAT.prefix_text(body)); idx.match(pb.keys, 0.0); idx.record(pb.keys, 0.0, 0.0)
print(f"  in-process index (hash + match + record) per decision: {(time.perf_counter() - t) / 2000 * 1e6:.0f} us")
p.terminate(); p.wait()
