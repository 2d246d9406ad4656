"""The set-up scripts a fresh machine runs first (scripts/llama-server, scripts/redis-server).

A binary that cannot serve must stop the set-up with one message naming it, how it died, and its last log
lines; the real binary, built portable, must pass the same check. The crashing binary here is a stand-in
shell script (a real AMX crash needs an AMX CPU and the old native build, which we no longer make)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

from tests.support import ROOT

SCRIPT = ROOT / "scripts" / "llama-server"


def _fake(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_a_binary_that_segfaults_stops_the_smoke_check_with_one_clear_message(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 'echo "load_tensors: loading model"\necho "ggml_backend_amx_mul_mat"\nkill -SEGV $$\n')
    out = subprocess.run([str(SCRIPT), "--smoke", str(fake)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert f"smoke check FAILED: {fake} was killed by signal 11 (SEGV)" in out.stderr
    assert "ggml_backend_amx_mul_mat" in out.stderr  # the last log lines come with it


def test_a_binary_that_exits_names_its_exit_code(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 'echo "error: unknown argument"\nexit 3\n')
    out = subprocess.run([str(SCRIPT), "--smoke", str(fake)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert f"{fake} exited with code 3" in out.stderr
    assert "unknown argument" in out.stderr


def test_the_built_server_passes_the_smoke_check_and_starts_without_repacking() -> None:
    binary, _model = subprocess.run([str(SCRIPT), "--print-paths"], capture_output=True, text=True, check=True,
                                   timeout=3600).stdout.split()
    # The cache key names the version, the variant and a digest of the build flags; never -march=native.
    assert "-x86-64" in Path(binary).parent.parent.name
    out = subprocess.run([str(SCRIPT), "--smoke", binary], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "smoke check passed" in out.stderr
    assert subprocess.run([str(SCRIPT), "--print-args"], capture_output=True, text=True,
                          check=True).stdout.split() == ["--no-repack"]


def test_redis_server_takes_its_mirror_from_this_machines_apt_sources() -> None:
    # No mirror or registry host is written in the script: it reads the machine's own sources.
    text = (ROOT / "scripts" / "redis-server").read_text()
    assert not re.search(r"https?://", text)
    env = {**os.environ}
    out = subprocess.run(["bash", "-c", 'source <(sed -n "/^debian_mirror()/,/^}/p" scripts/redis-server); debian_mirror'],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0 and out.stdout.strip().startswith(("http://", "https://")), out
