"""Shared pieces for benchmarks: simulator fleets and gateway processes on loopback, percentiles."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import redis
import yaml

from app.ports import free_port, use_ports

ROOT = Path(__file__).resolve().parent.parent

# How long a bench's client keeps an idle connection to a gateway for the next request: well under the
# gateway's own keep-alive (server.keep_alive_s, uvicorn closes a connection idle that long), so the
# client drops it first. aiohttp keeps one 15 s and reuses the oldest first: a request sent on a connection
# idle just as long as the gateway's keep-alive races its close and fails before the gateway reads it
# (ServerDisconnectedError, a reset, "Can not write request body"). So did one request of t34s's shared-
# prefix run (seed 61, r0, sent 14.09 s on a connection idle 5.003 s); scripted against a gateway with a
# 0.5 s keep-alive, 4 of 40 requests sent 0.497-0.501 s after the last answer failed, none with this.
# Half the gateway's default keep-alive before it became 75 s: an A/B's base tree may run a gateway from then.
CLIENT_KEEP_ALIVE_S = 2.5


def client_session(total_s: float, headers: dict[str, str] | None = None, limit: int = 100) -> aiohttp.ClientSession:
    """A bench's HTTP client for a gateway: at most `total_s` a request, at most `limit` connections (0: no
    limit), and idle connections dropped before the gateway closes them (CLIENT_KEEP_ALIVE_S)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=CLIENT_KEEP_ALIVE_S),
                                 timeout=aiohttp.ClientTimeout(total=total_s), headers=headers)


def stop_on_signals() -> None:
    """End this bench on SIGTERM or SIGHUP as on Ctrl-C: raise SystemExit where it runs, so the `finally`
    blocks and context managers that own its servers stop them (by default Python dies at once and leaves
    its llama-servers and gateways running, at nice -10). Further such signals are ignored from then on,
    so a second one cannot cut that clean-up short. Call it first thing in a bench's main()."""

    def interrupt(signum: int, frame: object) -> None:
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, interrupt)


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile in milliseconds (linear interpolation); NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return (s[lo] + (s[hi] - s[lo]) * (k - lo)) * 1000



def relative_errors(pairs: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The median signed and absolute relative error of (predicted, measured) pairs (positive:
    over-predicted; every measured value above zero); None for no pairs. The benches' prediction-error
    figure, read alike by each."""
    if not pairs:
        return None
    signed = [(p - m) / m for p, m in pairs]
    return statistics.median(signed), statistics.median(abs(e) for e in signed)


def poisson_arrivals(rng: random.Random, rate: float, n: int) -> list[float]:
    """n open-loop arrival times that offer exactly `rate`: Poisson gaps, scaled so the last arrival comes at
    n / rate. Drawn freely, the offered load moves between repeats by more than a strategy moves it."""
    gaps = [rng.expovariate(1.0) for _ in range(n)]
    scale = n / rate / sum(gaps)
    return list(itertools.accumulate(g * scale for g in gaps))


def port_options(ap: argparse.ArgumentParser) -> None:
    """--port-base and --port-span: every port the run listens on (servers, gateways) from a range of its
    own, for runs side by side; without them, random free ports (app/ports.py)."""
    ap.add_argument("--port-base", type=int, default=None, metavar="PORT",
                    help="take every port this run listens on from PORT up, in order (default: random free ports); "
                         "runs side by side given disjoint ranges never meet")
    ap.add_argument("--port-span", type=int, default=1000, metavar="N", help="with --port-base: the range's size")


def apply_port_options(args: argparse.Namespace) -> None:
    """Act on port_options' arguments: call before anything takes a port."""
    if args.port_base is not None:
        use_ports(args.port_base, args.port_span)


def base_checkout(name: str, base_tree: str | Path | None) -> Path | None:
    """The checkout a bench runs strategy `name`'s gateway from: --base-tree for `NAME@base` (an A/B of two
    commits on one fleet and one schedule), None (this one) for a name without `@`; anything else after
    `@`, or `@base` without --base-tree, stops the bench."""
    _, at, tree = name.partition("@")
    if not at:
        return None
    if tree != "base" or base_tree is None:
        raise SystemExit(f"{name}: only NAME@base, with --base-tree")
    return Path(base_tree)


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def wait_healthy(root: str, proc: subprocess.Popen, timeout: float) -> None:
    """Until `root`/health answers 200: llama-server listens, and answers 503, while it loads its model."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            if httpx.get(f"{root}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{root} not ready after {timeout:.0f} s")
        time.sleep(0.2)


def start_redis(log: Path | None = None, timeout: float = 60) -> tuple[subprocess.Popen, int]:
    """scripts/redis-server (Redis Stack with vector search) on a free loopback port, once it answers PING.
    Fails at once, with the script's exit status, if the script exits (a checkout without .venv, no
    libssl1.1 to fetch), rather than polling a port nothing will ever open."""
    port = free_port()
    args = [str(ROOT / "scripts" / "redis-server"), "--port", str(port)]
    proc = subprocess.Popen(args + (["--logfile", str(log)] if log else []), stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"scripts/redis-server exited with {proc.returncode}")
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"redis-server on {port} not answering after {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class Proc:
    proc: subprocess.Popen
    url: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Fleet(Proc):
    config_path: Path
    backends: dict[str, dict]
    model: str = "m-zero"

    @classmethod
    def start(cls, tmp: Path, backends: dict[str, dict], seed: int = 1, cpus: str | None = None) -> Fleet:
        path = tmp / "fleet.yaml"
        path.write_text(yaml.safe_dump({"simulator": {"seed": seed, "backends": backends}}))
        proc = _spawn(["simulate", "--config", str(path)], tmp / "fleet.log", cpus)
        first = next(iter(backends.values()))
        fleet = cls(proc, f"http://127.0.0.1:{first['port']}", path, backends, first["model"])
        with _stopped_on_failure(fleet):
            for b in backends.values():
                wait_listening(b["port"], proc)
        return fleet

    @classmethod
    def zero_latency(cls, tmp: Path, cpus: str | None = None) -> Fleet:
        """One backend that answers as fast as the machine allows."""
        zero = dict(port=free_port(), model="m-zero", slots=4096, prefill_tokens_per_s=1e12, tpot_ms=0)
        return cls.start(tmp, {"zero": zero}, cpus=cpus)


def start_gateway(
    tmp: Path, fleet: Fleet, cpus: str | None = None, profile: Path | None = None, env: dict[str, str] | None = None,
    models: dict | None = None, extra: dict | None = None, workers: int = 1,
) -> Proc:
    """A gateway in open-auth mode with one alias per fleet backend (`zero` for the zero-latency fleet)."""
    port = free_port()
    backends = {
        name: {"base_url": f"http://127.0.0.1:{b['port']}/v1", "model": b["model"], "max_concurrency": 1024}
        for name, b in fleet.backends.items()
    }
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "auth": {"mode": "open"},
        "backends": backends,
        "models": models or {name: {"backends": [name]} for name in backends},
        **(extra or {}),
    }
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    args = ["serve", "--config", str(path), "--workers", str(workers)]
    gateway = Proc(_spawn(args, tmp / f"gateway-{port}.log", cpus, profile, env), f"http://127.0.0.1:{port}")
    with _stopped_on_failure(gateway):
        wait_listening(port, gateway.proc)
    return gateway


@contextlib.contextmanager
def _stopped_on_failure(proc: Proc) -> Iterator[None]:
    """A process still starting is stopped if the wait for it fails (or a SIGTERM ends the wait): the caller
    never got it to stop."""
    try:
        yield
    except BaseException:
        proc.stop()
        raise


def _spawn(args: list[str], log: Path, cpus: str | None, profile: Path | None = None, env: dict | None = None,
           cwd: Path | None = None) -> subprocess.Popen:
    """`python -m app ARGS` from this checkout, or from the checkout `cwd` (another commit's gateway, for an A/B)."""
    cmd = [sys.executable]
    if profile is not None:
        cmd += ["-m", "pyinstrument", "-r", {".txt": "text", ".pstats": "pstats"}.get(profile.suffix, "html"), "--show-all",
                "-o", str(profile)]
    cmd += ["-m", "app", *args]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    return subprocess.Popen(cmd, cwd=cwd or ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
