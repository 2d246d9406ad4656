"""Make both HTML reports from real runs and photograph them in headless Chromium, to look at as a
person would: the `slipstream bench` baseline (against a simulator with known settings) and the policy
what-if (bench/whatif: its workload through round_robin and predicted_latency).

    .venv/bin/python bench/report_screenshots.py --out /tmp/reports     # needs `apt-get install chromium`

Writes OUT/baseline.html, OUT/whatif.html and a PNG of each; prints their paths. Bounded: the bench
sweep is small (a few requests per cell, 10 s per cell at most), the what-if replays 106 requests.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import Process, free_port, write_yaml


def app(*args: str, timeout: float = 300) -> None:
    run = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        sys.exit(f"slipstream {' '.join(args)} failed:\n{run.stderr[-3000:]}")


def baseline(out: Path) -> Path:
    port = free_port()
    config = write_yaml(out / "sim.yaml", {"simulator": {"seed": 1, "backends": {"known": dict(
        port=port, model="known", slots=8, tpot_ms=10, tpot_growth=0.05, prefill_tokens_per_s=4000, network_ms=5)}}})
    sim = Process(["simulate", "--config", str(config)], out / "sim.log")
    try:
        sim.wait_listening(port)
        app("bench", "--target", f"http://127.0.0.1:{port}/v1", "--model", "known", "--prompts", "16,256,1024,4096",
            "--outputs", "10,50,100,200", "--concurrency", "1,2,4,8,16", "--requests", "3", "--max-seconds", "10",
            "--out", str(out / "baseline"))
    finally:
        sim.stop()
    return out / "baseline.html"


def whatif(out: Path) -> Path:
    policies = [str(ROOT / "bench/whatif" / f"{p}.yaml") for p in ("round_robin", "predicted_latency")]
    app("simulate", "--workload", str(ROOT / "bench/whatif/workload.jsonl"), *[a for p in policies for a in ("--policy", p)],
        "--out", str(out / "whatif"))
    return out / "whatif.html"


def screenshot(page: Path, width: int = 1400, height: int = 1900) -> Path:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("no Chromium: apt-get install chromium")
    png = page.with_suffix(".png")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pages = [baseline(out), whatif(out)]
    for page in pages:
        print(f"{page}  ->  {screenshot(page)}")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
