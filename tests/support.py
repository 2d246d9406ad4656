"""Helpers for tests: free loopback ports and real gateway / simulator processes."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import redis
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}: {read_log(proc)}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s: {read_log(proc)}")


def read_log(proc: subprocess.Popen) -> str:
    path = getattr(proc, "log_path", None)
    return Path(path).read_text()[-4000:] if path and Path(path).exists() else ""


class Process:
    """A `python -m app ...` child with its output in a log file; stopped with SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", *args],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.proc.log_path = str(log_path)  # type: ignore[attr-defined]

    def wait_listening(self, port: int) -> None:
        wait_listening(port, self.proc)

    def log(self) -> str:
        return Path(self.log_path).read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_simulated(tmp: Path, backends: dict[str, dict], seed: int) -> tuple[dict[str, int], Process]:
    """`slipstream simulate` serving `backends` (name: its simulator settings) on free loopback ports, once
    each answers: their ports by name, and the process (stop it when done)."""
    ports = {n: free_port() for n in backends}
    path = write_yaml(tmp / "sim.yaml", {"simulator": {"seed": seed, "backends": {
        n: dict(port=ports[n], **spec) for n, spec in backends.items()}}})
    proc = Process(["simulate", "--config", str(path)], tmp / "sim.log")
    for port in ports.values():
        proc.wait_listening(port)
    return ports, proc


def sim_stats(port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/sim/stats", timeout=5).json()


def set_faults(port: int, **faults: float) -> None:
    httpx.put(f"http://127.0.0.1:{port}/sim/faults", json=faults, timeout=5).raise_for_status()


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class RedisServer:
    """A redis-server process (with RediSearch) on a loopback port; can be stopped and restarted."""

    def __init__(self, tmp, *options: str) -> None:
        self.port = free_port()
        self.log = tmp / f"redis-{self.port}.log"
        self.options = options  # more redis-server options, e.g. "--enable-debug-command", "local"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(ROOT / "scripts" / "redis-server"), "--port", str(self.port), "--logfile", str(self.log),
             *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        client = redis.Redis(port=self.port)
        proc = self.proc
        # A script that exits (no .venv, no libssl1.1) ends the wait at once instead of after the timeout.
        assert wait_until(lambda: proc.poll() is not None or _pings(client), timeout=10) and proc.poll() is None, \
            f"scripts/redis-server exited with {proc.returncode}; log: {self.log.read_text() if self.log.exists() else ''}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def _pings(client: redis.Redis) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


class LlamaServer:
    """A real llama.cpp `llama-server` (SmolLM2-135M, CPU) on a loopback port, built and started by
    scripts/llama-server (the build is cached in ~/.cache/slipstream)."""

    def __init__(self, tmp: Path, slots: int = 1, ctx: int = 2048, threads: int = 1, alias: str = "smollm2",
                 extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.slots, self.ctx, self.alias = slots, ctx, alias
        self.log_path = tmp / f"llama-{self.port}.log"
        self.args = [str(ROOT / "scripts" / "llama-server"), "--port", str(self.port), "-c", str(ctx),
                     "-np", str(slots), "-t", str(threads), "--metrics", "--slots", "--alias", alias, *extra]
        self.proc: subprocess.Popen | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def start(self, timeout: float = 120.0) -> LlamaServer:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.root}/health", timeout=1).status_code == 200:  # 503 while loading
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llama-server not ready after {timeout}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def busy_slots(self) -> int:
        """Slots generating now, from the server's own /slots."""
        slots = httpx.get(f"{self.root}/slots", timeout=5).json()
        return sum(1 for s in slots if s.get("is_processing", s.get("state", 0) != 0))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def llama_server_paths() -> tuple[str, str]:
    """Build llama-server if needed (about 7 min on 2 cores, once) and return (binary, model)."""
    out = subprocess.run([str(ROOT / "scripts" / "llama-server"), "--print-paths"], capture_output=True, text=True,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/llama-server failed: {out.stderr[-4000:]}")
    binary, model = out.stdout.split()[-2:]
    return binary, model


@contextlib.asynccontextmanager
async def loopback_chat(chat) -> AsyncIterator[str]:
    """A loopback HTTP server answering POST /v1/chat/completions with the handler `chat`; yields its base URL
    (what a bench's client is pointed at in place of a gateway)."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def make_ca_and_leaf(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) as PEM files: a CA made for this test, and a certificate
    it signed for localhost and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slipstream test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths
