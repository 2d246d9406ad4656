"""Start Slipstream as a target of ../shared/peer-bench/compare.py: one alias over the fake backend,
every default feature on (metrics, Server-Timing, the ring of recent requests), open auth as
bench/overhead.py runs it. `--root` picks the source tree, so two checkouts (before and after a change)
can be measured in one compare.py run:

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
    args = ap.parse_args()
    config = {
        "server": {"host": "127.0.0.1", "port": args.port, "log_level": "warning"},
        "auth": {"mode": "open"},
        "backends": {"fake": {"base_url": f"{args.backend.rstrip('/')}/v1", "model": args.model, "max_concurrency": 1024}},
        "models": {args.model: {"backends": ["fake"]}},
    }
    path = Path(tempfile.mkdtemp(prefix="slipstream-peer-")) / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    os.chdir(args.root)  # `python -m app` imports the tree's own app package
    os.execv(sys.executable, [sys.executable, "-m", "app", "serve", "--config", str(path)])


if __name__ == "__main__":
    main()
