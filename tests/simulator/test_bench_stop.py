"""A bench stopped with SIGTERM (as `timeout` and job control stop it) stops every server it started: none of
its simulators, gateways or llama-servers outlives it (left running at nice -10 they skew every later timing
on the box)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import wait_until

ROOT = Path(__file__).resolve().parent.parent.parent


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent, state, start time) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """Every living process under `root`: pid -> start time (to tell it from a later process given the pid)."""
    stats = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    out: dict[int, int] = {}
    parents = {root}
    while True:
        found = {pid: st[2] for pid, st in stats.items() if st and st[0] in parents and pid not in out and st[1] != "Z"}
        if not found:
            return out
        out.update(found)
        parents = set(found)


def _alive(started: dict[int, int]) -> dict[int, int]:
    return {pid: t for pid, t in started.items() if (st := _stat(pid)) is not None and st[2] == t and st[1] != "Z"}


def _stop_with_sigterm(tmp_path: Path, args: list[str], servers: int) -> None:
    """Start the bench, wait until `servers` processes of its own run and a moment into its work, SIGTERM it,
    and check that it exits and leaves nothing it started running."""
    log = tmp_path / "bench.log"
    bench = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    started: dict[int, int] = {}
    try:
        def serving() -> bool:
            started.update(_descendants(bench.pid))
            return len(_alive(started)) >= servers or bench.poll() is not None
        assert wait_until(serving, timeout=180, interval=0.2) and bench.poll() is None, log.read_text()
        time.sleep(2)  # into its work (requests under way, or the calibration)
        started.update(_descendants(bench.pid))
        bench.send_signal(signal.SIGTERM)
        bench.wait(timeout=90)
        assert bench.returncode != 0, log.read_text()  # stopped, not finished
        # Each process it started is stopped (a moment for what a gateway itself started).
        assert wait_until(lambda: not _alive(started), timeout=5), f"left running: {_alive(started)}"
    finally:
        if bench.poll() is None:
            bench.kill()
        for pid in _alive(started):
            os.kill(pid, signal.SIGKILL)


def test_prefix_routing_stopped_with_sigterm_stops_its_simulated_fleet_and_gateway(tmp_path):
    _stop_with_sigterm(tmp_path, ["bench/prefix_routing.py", "--backend", "sim", "--backends", "2", "--workloads",
                                  "shared", "--strategies", "least_inflight", "--seconds", "120", "--rate", "0.5"], 2)
