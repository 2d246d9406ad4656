"""Policy what-if: a workload replayed through the real router against simulated backends, per policy."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.support import ROOT, free_port


def policy(path, strategy: str, ports: dict[str, int]) -> str:
    fleet = {"seed": 1, "backends": {
        "fast": {"port": ports["fast"], "model": "m", "slots": 2, "tpot_ms": 5, "prefill_tokens_per_s": 1e6},
        "slow": {"port": ports["slow"], "model": "m", "slots": 8, "tpot_ms": 20, "prefill_tokens_per_s": 1e6}}}
    cfg = {"auth": {"mode": "open"},
           "backends": {n: {"base_url": f"http://127.0.0.1:{p}/v1", "model": "m"} for n, p in ports.items()},
           "models": {"fleet": {"backends": ["fast", "slow"], "strategy": strategy}}, "simulator": fleet}
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_whatif_compares_policies(tmp_path):
    ports = {"fast": free_port(), "slow": free_port()}
    workload = tmp_path / "w.jsonl"
    workload.write_text("\n".join(json.dumps({"t": i * 0.05, "prompt_tokens": 20, "max_tokens": 10, "stream": i % 2 == 0})
                                  for i in range(30)))
    a = policy(tmp_path / "rr.yaml", "round_robin", ports)
    b = policy(tmp_path / "pl.yaml", "predicted_latency", ports)
    r = subprocess.run([sys.executable, "-m", "app", "simulate", "--workload", str(workload), "--policy", a, "--policy", b,
                        "--out", str(tmp_path / "cmp")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith(("| rr", "| pl"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "30" and cells[2] == "0"  # every request answered
    page = (tmp_path / "cmp.html").read_text()
    assert "<svg" in page and "rr p99" in page and "pl p99" in page


def test_whatif_needs_policies(tmp_path):
    (tmp_path / "w.jsonl").write_text('{"t": 0}\n')
    r = subprocess.run([sys.executable, "-m", "app", "simulate", "--workload", str(tmp_path / "w.jsonl")],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs at least one --policy" in r.stderr
