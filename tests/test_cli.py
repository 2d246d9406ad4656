"""`slipstream serve` as an operator runs it: SIGTERM stops the simulator fleet it started, and ports
already taken fail the start with a message that says what to do."""

from __future__ import annotations

import signal
import socket
import subprocess

import httpx
import pytest
import yaml

from tests.support import ROOT, Process, free_port, wait_until, write_yaml


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _config(tmp, gateway_port: int, sim_ports: list[int]):
    names = [f"sim{i}" for i in range(len(sim_ports))]
    return write_yaml(tmp / "gateway.yaml", {
        "server": {"host": "127.0.0.1", "port": gateway_port},
        "auth": {"mode": "open"},
        "backends": {n: {"base_url": f"http://127.0.0.1:{p}/v1", "model": f"m-{n}"} for n, p in zip(names, sim_ports)},
        "models": {"m": {"backends": names}},
        "simulator": {"backends": {n: {"port": p, "model": f"m-{n}", "tpot_ms": 0} for n, p in zip(names, sim_ports)}},
    })


def test_sigterm_stops_the_simulator_fleet(tmp_path):
    port, sims = free_port(), [free_port(), free_port()]
    proc = Process(["serve", "--config", str(_config(tmp_path, port, sims))], tmp_path / "serve.log")
    try:
        proc.wait_listening(port)
        assert all(_listening(p) for p in sims)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=20) == 0
        # The fleet is gone with it: its ports are free for the next start.
        assert wait_until(lambda: not any(_listening(p) for p in sims), timeout=10), proc.log()
    finally:
        proc.stop()


def test_a_taken_simulator_port_fails_the_start_clearly(tmp_path):
    port, sims = free_port(), [free_port(), free_port()]
    with socket.socket() as squatter:  # a stale fleet from an earlier run, say
        squatter.bind(("127.0.0.1", sims[1]))
        squatter.listen()
        run = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "app", "serve", "--config",
                              str(_config(tmp_path, port, sims))], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert f"port {sims[1]} (sim1) already in use" in run.stderr and "--no-simulator" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert not _listening(port) and not _listening(sims[0])


def test_a_taken_gateway_port_fails_before_the_fleet_starts(tmp_path):
    port, sims = free_port(), [free_port()]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        run = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "app", "serve", "--config",
                              str(_config(tmp_path, port, sims))], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert f"port {port} is already in use" in run.stderr
    assert not _listening(sims[0])


def test_no_simulator_uses_what_listens_there(tmp_path):
    # The knowing way to reuse a running fleet: --no-simulator.
    fleet_port, port = free_port(), free_port()
    config = _config(tmp_path, port, [fleet_port])
    fleet = Process(["simulate", "--config", str(config)], tmp_path / "fleet.log")
    gw = Process(["serve", "--config", str(config), "--no-simulator"], tmp_path / "serve.log")
    try:
        fleet.wait_listening(fleet_port)
        gw.wait_listening(port)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=10,
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200
        gw.proc.send_signal(signal.SIGTERM)
        gw.proc.wait(timeout=20)
        assert _listening(fleet_port)  # not ours to stop
    finally:
        gw.stop()
        fleet.stop()


def _can_listen_on_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_an_ipv6_host_serves(tmp_path):
    # The port-taken check probed the host with an IPv4 socket: server.host "::1" ended the start with
    # socket.gaierror's traceback ("Address family for hostname not supported").
    if not _can_listen_on_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    port, sims = free_port(), [free_port()]
    config = _config(tmp_path, port, sims)
    write_yaml(config, {**yaml.safe_load(config.read_text()), "server": {"host": "::1", "port": port}})
    proc = Process(["serve", "--config", str(config)], tmp_path / "serve.log")
    try:
        assert wait_until(lambda: _answers(f"http://[::1]:{port}/healthz") or proc.proc.poll() is not None, timeout=30)
        assert _answers(f"http://[::1]:{port}/healthz"), proc.log()
    finally:
        proc.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_host_that_does_not_resolve_fails_the_start_naming_it(tmp_path):
    port, sims = free_port(), [free_port()]
    config = _config(tmp_path, port, sims)
    run = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "app", "serve", "--config", str(config),
                          "--host", "gateway.invalid"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "cannot start: server.host (or --host) 'gateway.invalid' does not resolve to an address" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert not _listening(sims[0])


def test_a_port_out_of_range_on_the_command_line_is_refused_before_anything_starts(tmp_path):
    # server.port is range-checked; --port was not, and the server listened on 99999 modulo 65536 (34463)
    # while its log said "Uvicorn running on http://127.0.0.1:99999".
    port, sims = free_port(), [free_port()]
    run = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "app", "serve", "--config", str(_config(tmp_path, port, sims)),
                          "--port", "99999"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "argument --port: '99999' is not a port (0-65535)" in run.stderr
    assert not _listening(sims[0]) and not _listening(99999 % 65536)


def test_the_console_hint_names_the_port_the_gateway_really_listens_on(tmp_path):
    # scripts/demo printed http://127.0.0.1:8080/console whatever --port said; serve prints where it listens.
    from app.admission.auth import hash_key
    from tests.conftest import ADMIN_KEY

    port, sims = free_port(), [free_port()]
    config = _config(tmp_path, free_port(), sims)
    write_yaml(config, {**yaml.safe_load(config.read_text()), "auth": {"mode": "open", "admin_keys": [hash_key(ADMIN_KEY)]}})
    proc = Process(["serve", "--config", str(config), "--port", str(port)], tmp_path / "serve.log")
    try:
        proc.wait_listening(port)
        assert f"operator console: http://127.0.0.1:{port}/console" in proc.log()
    finally:
        proc.stop()
