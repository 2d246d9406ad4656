"""Command line: `slipstream serve | simulate | check | hash-key`."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from app.config import ConfigError, GatewayConfig, load_config, load_simulator_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slipstream", description="OpenAI-compatible, latency-aware LLM gateway")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", required=True, help="gateway config file (YAML)")
    serve.add_argument("--host", help="override server.host")
    serve.add_argument("--port", type=_port, help="override server.port")
    serve.add_argument(
        "--no-simulator", action="store_true", help="do not start the config's simulator fleet (it runs elsewhere)"
    )
    serve.add_argument(
        "--workers", type=int, default=1,
        help="uvicorn worker processes (default 1; prefer one process per replica, see README)",
    )

    simulate = sub.add_parser("simulate", help="run the simulated backend fleet of a config file, or a policy what-if")
    simulate.add_argument("--config", help="config file with a `simulator` section (serve its fleet)")
    simulate.add_argument("--workload", help="JSONL workload to replay through each --policy (what-if mode)")
    simulate.add_argument("--policy", action="append", default=[], help="gateway config with a simulator section; repeat")
    simulate.add_argument("--out", default="whatif", help="what-if: writes OUT.html with the plot")

    bench = sub.add_parser("bench", help="measure an OpenAI-compatible endpoint: TTFT, TPOT, E2E, and the E2E = a + b p + c n fit")
    bench.add_argument("--target", required=True, help="base URL up to /v1, e.g. http://127.0.0.1:8000/v1")
    bench.add_argument("--model", required=True)
    bench.add_argument("--api-key", default=None, help="bearer key (or set SLIPSTREAM_BENCH_API_KEY)")
    bench.add_argument("--prompts", default="16,256,1024,4096", help="prompt lengths in tokens")
    bench.add_argument("--outputs", default="10,50,100,200", help="output lengths in tokens")
    bench.add_argument("--concurrency", default="1,2,4,8,16")
    bench.add_argument("--requests", type=int, default=8, help="requests per cell (per client at concurrency > 1)")
    bench.add_argument("--max-seconds", type=float, default=30, help="time limit per cell")
    bench.add_argument("--out", default="baseline", help="writes OUT.json and OUT.html")
    bench.add_argument("--warm", action="store_true",
                       help="repeat one prompt per cell (measures the server's prefix cache); default: a distinct "
                            "prompt per request, so every prefill is cold")

    check = sub.add_parser("check", help="validate a config file and exit")
    check.add_argument("--config", required=True)

    hash_key = sub.add_parser("hash-key", help="print the key_sha256 to store in config for a client key")
    hash_key.add_argument("key")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "check":
            config = load_config(args.config)
            print(f"{args.config}: ok ({len(config.backends)} backends, {len(config.models)} models)")
            return 0
        from app.admission.auth import hash_key as digest

        print(digest(args.key))
        return 0
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1


def _port(text: str) -> int:
    # server.port is range-checked by the config; --port, which overrides it, was not, and the server took
    # 99999 modulo 65536: it listened on 34463 while its log said "running on ...:99999".
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


class StartupError(Exception):
    """The server cannot start as asked (a port already taken); the message says what to do."""


class _Terminated(Exception):
    """SIGTERM arrived: unwind so that the simulator fleet is stopped on the way out."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    # server.log_level governs the gateway's own lines too (slipstream.*), not only uvicorn's.
    logging.getLogger().setLevel(config.server.log_level.upper())
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again; with the default
    # action that kills the process before any cleanup. This handler turns it into an exception, so
    # the `finally` below stops the fleet and its ports are free for the next start.
    signal.signal(signal.SIGTERM, _on_sigterm)
    fleet = None
    try:
        if _listening(_connect_host(host), port):
            raise StartupError(f"port {port} is already in use: is another gateway running? Stop it or pass --port")
        if config.simulator is not None and config.simulator.backends and not args.no_simulator:
            fleet = _spawn_fleet(args.config, config)
        # The server's imports (about a second of CPU) run while the fleet starts on the other core.
        import uvicorn

        from app.http import intake
        from app.http.fastpath import FastPath
        from app.http.server import create_app

        if fleet is not None:
            _wait_fleet(fleet, args.config, config)
        if config.auth.admin_keys:
            # Where it really listens (--host and --port included): scripts/demo's hint said 8080 whatever was passed.
            shown = _connect_host(host)
            shown = f"[{shown}]" if ":" in shown else shown
            print(f"operator console: http://{shown}:{port}/console", file=sys.stderr, flush=True)
        if args.workers > 1:
            # Workers import the app themselves, each from the config file named here.
            os.environ["SLIPSTREAM_CONFIG"] = os.path.abspath(args.config)
            app: str | FastPath = "app.http.server:app_from_environment"
        else:
            app = create_app(config, config_path=args.config)
        uvicorn.run(
            app,
            factory=args.workers > 1,
            workers=args.workers,
            host=host,
            port=port,
            loop="uvloop" if _has("uvloop") else "asyncio",
            # Bounded intake (app/http/intake.py) on httptools; h11 bounds the header size itself.
            http=intake.configure(config.server) if _has("httptools") else "h11",
            h11_max_incomplete_event_size=config.server.max_header_bytes,
            # uvicorn takes float seconds at run time (loop.call_later), though its annotations say int.
            timeout_keep_alive=config.server.keep_alive_s,  # type: ignore[arg-type]
            log_level=config.server.log_level,
            access_log=config.server.access_log,
            backlog=2048,
            proxy_headers=False,
            timeout_graceful_shutdown=config.server.shutdown_grace_s,  # type: ignore[arg-type]
        )
    except _Terminated:
        return 0  # a requested, clean stop
    finally:
        if fleet is not None:
            _stop(fleet)
    return 0


def _stop(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.tools.baseline.analysis import analyse
    from app.tools.baseline.render import table, to_html, to_json
    from app.tools.baseline.sweep import SweepPlan, run_sweep

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    plan = SweepPlan(ints(args.prompts), ints(args.outputs), ints(args.concurrency), args.requests, args.max_seconds,
                     warm=args.warm)
    key = args.api_key or os.environ.get("SLIPSTREAM_BENCH_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else None
    results = asyncio.run(run_sweep(args.target, args.model, plan, headers))
    report = analyse(args.target, args.model, results)
    print(table(report))
    f = report.fit
    print(f"fit quality: {f.quality} (E2E R^2 {f.r2:.3f}, median error {f.median_error:.1%}; TTFT = "
          f"{f.ttft_a_s * 1000:.1f} ms + {f.ttft_b_s_per_prompt_token * 1000:.3f} ms x processed prompt tokens, "
          f"R^2 {f.ttft_r2:.3f}); prior TPOT {f.tpot_s * 1000:.2f} ms (measured median)"
          + ("; warm: prompts repeat, prefill is the server's cache" if args.warm else ""))
    Path(f"{args.out}.json").write_bytes(to_json(report))
    Path(f"{args.out}.html").write_text(to_html(report), encoding="utf-8")
    print(f"\nwrote {args.out}.json and {args.out}.html (use the JSON as backends.<name>.latency_prior)")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from app.tools.simulator.fleet import run_fleet

    if args.workload:
        from app.tools.whatif import run_whatif

        if not args.policy:
            raise ConfigError("what-if mode needs at least one --policy")
        print(run_whatif(args.workload, args.policy, args.out))
        return 0
    if not args.config:
        raise ConfigError("simulate needs --config (a fleet to serve) or --workload with --policy files")
    config = load_simulator_config(args.config)
    if _has("uvloop"):
        import uvloop

        uvloop.install()
    try:
        asyncio.run(run_fleet(config))
    except KeyboardInterrupt:
        pass
    return 0


def _spawn_fleet(path: str, config: GatewayConfig) -> subprocess.Popen:
    """Start the simulator fleet in a child process (its own core); _wait_fleet waits until it listens.

    A port already taken fails the start: answering from a stale fleet (a gateway that was killed
    without stopping its own) would serve another config's backends without saying so.
    """
    sim = config.simulator
    assert sim is not None
    busy = [f"{p} ({name})" for name, b in sim.backends.items() if _listening(_connect_host(sim.host), p := b.port)]
    if busy:
        raise StartupError(
            f"{path}: simulator: port {', '.join(busy)} already in use: a fleet from an earlier run may still be "
            "listening. Stop that process, or pass --no-simulator to use whatever listens there as the backends."
        )
    return subprocess.Popen([sys.executable, "-m", "app", "simulate", "--config", path], env=os.environ.copy(),
                            # prctl only, in the child before it starts any thread
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)  # noqa: PLW1509


def _wait_fleet(child: subprocess.Popen, path: str, config: GatewayConfig) -> None:
    sim = config.simulator
    assert sim is not None
    deadline = time.monotonic() + 15
    ports = [b.port for b in sim.backends.values()]
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise StartupError(f"{path}: simulator: the fleet exited with status {child.returncode}")
        if all(_listening(_connect_host(sim.host), p) for p in ports):
            return
        time.sleep(0.02)
    _stop(child)
    raise StartupError(f"{path}: simulator: the fleet did not start listening on {ports} within 15 s")


def _die_with_parent() -> None:
    """In the fleet's process: end when the gateway process ends, however it ends (even SIGKILL)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def _listening(host: str, port: int) -> bool:
    # Every address the host resolves to, in its own family: an IPv6 host (::1) in an IPv4 socket, or a
    # name that does not resolve, ended the start with socket.gaierror's traceback.
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise StartupError(f"server.host (or --host) {host!r} does not resolve to an address: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as s:
            s.settimeout(0.2)
            if s.connect_ex(address) == 0:
                return True
    return False


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
