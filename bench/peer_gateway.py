"""Start Slipstream as a target of ../shared/peer-bench/compare.py: one alias over the fake backend,
every default feature on (metrics, Server-Timing, the ring of recent requests), open auth as
bench/overhead.py runs it. `--root` picks the source tree, so two checkouts (before and after a change)
can be measured in one compare.py run. `--backends N --strategy S` puts N backends (all the same fake
server, under different names) behind the alias, so the router has a real choice to make and its CPU per
request shows against another strategy's in one run (issue 24: the router must not add to the overhead):

    "slipstream": {"cmd": ["{tree}/.venv/bin/python", "{tree}/bench/peer_gateway.py", "--root", "{tree}",
                   "--port", "{port}", "--backend", "{backend}"], "model": "fake-model", "headers": []}
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="the source tree to run")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", required=True, help="the fake backend's base URL, without /v1")
    ap.add_argument("--model", default="fake-model", help="the alias, and the backend's model name")
    ap.add_argument("--backends", type=int, default=1, help="how many backends (names for the same fake server)")
    ap.add_argument("--strategy", default=None, help="the alias's routing strategy (default: the gateway's default)")
    args = ap.parse_args()
    base_url = f"{args.backend.rstrip('/')}/v1"
    names = ["fake"] if args.backends == 1 else [f"fake{i}" for i in range(args.backends)]
    alias: dict[str, object] = {"backends": names}
    if args.strategy:
        alias["strategy"] = args.strategy
    config = {
        "server": {"host": "127.0.0.1", "port": args.port, "log_level": "warning"},
        "auth": {"mode": "open"},
        "backends": {n: {"base_url": base_url, "model": args.model, "max_concurrency": 1024} for n in names},
        "models": {args.model: alias},
    }
    path = Path(tempfile.mkdtemp(prefix="slipstream-peer-")) / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    os.chdir(args.root)  # `python -m app` imports the tree's own app package
    os.execv(sys.executable, [sys.executable, "-m", "app", "serve", "--config", str(path)])


if __name__ == "__main__":
    main()
