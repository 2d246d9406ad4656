"""How long `scripts/demo` takes to be ready once set up: wall time to /readyz 200, and the CPU time the
gateway and its simulator fleet spent getting there (the honest figure on a shared machine).

    .venv/bin/python bench/startup.py --runs 5

Needs the demo's simulator ports (config/demo.yaml) free; the gateway port is picked free.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its live children."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def one_start() -> tuple[float, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(ROOT / "scripts/demo"), "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                sys.exit(f"scripts/demo exited with {proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() - t0 > 60:
                sys.exit("not ready within 60 s")
            time.sleep(0.01)
        return time.perf_counter() - t0, _cpu_s(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    walls, cpus = [], []
    for i in range(args.runs):
        wall, cpu = one_start()
        walls.append(wall)
        cpus.append(cpu)
        print(f"start {i + 1}: ready in {wall:.2f} s wall, {cpu:.2f} s CPU (gateway + fleet)")
    print(f"median: {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU "
          f"over {args.runs} starts; load average at start {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
