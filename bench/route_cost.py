"""What the router itself costs per decision: building the route context (the prompt's block keys), the
strategy's ranking over the candidates, taking the lease (prediction, in-flight book, prefix index) and
giving it back, for each strategy, in-process (no network), with 3 llama.cpp-flavoured backends and a
~2 KB chat prompt (one of 8 system prompts plus a question). Wall and CPU microseconds per decision.

    python bench/route_cost.py                 # 20000 decisions per strategy
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.config import BackendConfig, ModelAlias
from app.dispatch.loop import route_context, with_policy
from app.protocols.chat import CHAT
from app.routing.router import Router
from app.upstream.adapters import Adapter, adapter_for

STRATEGIES = ("latency_aware", "prefix_aware", "predicted_latency", "least_inflight", "round_robin")


@dataclass
class Backend:
    # The router reads the name, the configuration and the adapter: no network needed to decide.
    name: str
    config: BackendConfig
    adapter: Adapter


async def run(strategy: str, n: int, bodies: list[bytes]) -> tuple[float, float]:
    backends = {f"b{i}": Backend(f"b{i}", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp",
                                                        max_concurrency=64), adapter_for("llamacpp"))
                for i in range(3)}
    spec = ModelAlias(backends=tuple(backends), strategy=strategy)
    router = Router(backends, {"m": spec}, 1.0)  # type: ignore[arg-type]
    rng = random.Random(1)
    held = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(n):
        req = CHAT.parse(bodies[rng.randrange(len(bodies))])
        ctx = with_policy(route_context(req), spec)
        held.append(await router.acquire("m", ctx=ctx))
        if len(held) > 6:  # a few requests in flight, as under load
            held.pop(0).release()
    for lease in held:
        lease.release()
    return (time.perf_counter() - wall0) / n * 1e6, (time.process_time() - cpu0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=20000)
    args = ap.parse_args()
    import orjson

    rng = random.Random(2)
    words = "account balance refund policy invoice customer payment schedule review escalate ticket".split()
    systems = [" ".join(rng.choice(words) for _ in range(300)) for _ in range(8)]
    bodies = [orjson.dumps({"model": "m", "stream": True, "max_tokens": 64, "messages": [
        {"role": "system", "content": s}, {"role": "user", "content": f"question {k}"}]}) for s in systems for k in range(4)]
    print(f"router cost per decision, {args.decisions} decisions per strategy, 3 backends, ~2 KB prompts; "
          f"load average {os.getloadavg()[0]:.1f} (shared 2-core box)")
    for s in STRATEGIES:
        wall, cpu = asyncio.run(run(s, args.decisions, bodies))
        print(f"  {s:<18} wall {wall:6.1f} us   CPU {cpu:6.1f} us per decision (parse + context + choose + lease + release)")


if __name__ == "__main__":
    main()
