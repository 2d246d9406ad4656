"""What the portable llama-server build costs against a native one: prefill and decode tokens per second.

scripts/llama-server builds a portable binary (AVX2/FMA/F16C baseline, no AMX: see the script for why). This
bench builds the native variant beside it (SLIPSTREAM_LLAMA_BUILD=native, its own cache folder key), starts each
binary on one loopback port in turn, and sends the same prompt to each, all in one run. The figures are
llama.cpp's own `timings` (reported by the server, not measured by us): prompt_per_second and
predicted_per_second, median over --repeats. The native binary runs with --no-repack (without it, it segfaults
on AMX CPUs); the portable one runs both ways, to show what --no-repack costs it.

    python bench/llama_build.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import wait_healthy
from tests.support import free_port

PROMPT = ("Here is a short passage about rivers. " * 24) + "\nSummarise the passage in one sentence:"


def paths(variant: str) -> tuple[str, str]:
    env = {**os.environ, "SLIPSTREAM_LLAMA_BUILD": variant}
    out = subprocess.run([str(ROOT / "scripts" / "llama-server"), "--print-paths"], env=env, check=True,
                         capture_output=True, text=True, timeout=3600)
    binary, model = out.stdout.split()[-2:]
    return binary, model


def run(binary: str, model: str, extra: list[str], repeats: int, threads: int, n_predict: int) -> dict[str, float]:
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-build-", suffix=".log", delete=False)
    proc = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "2048", "-np", "1",
                             "-t", str(threads), "--cache-reuse", "0", *extra], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, proc, timeout=120)
        except RuntimeError as e:
            raise SystemExit(f"{binary} {' '.join(extra)}: {e}: see {log.name}") from e
        prefill, decode = [], []
        for i in range(repeats + 1):
            # cache_prompt off and a distinct first word: every run prefills the whole prompt.
            body = {"prompt": f"Run {i}. {PROMPT}", "n_predict": n_predict, "cache_prompt": False, "temperature": 0,
                    "ignore_eos": True}
            t = httpx.post(f"{base}/completion", json=body, timeout=300).json()["timings"]
            if i == 0:
                continue  # warm-up
            prefill.append(t["prompt_per_second"])
            decode.append(t["predicted_per_second"])
        return {"prefill": statistics.median(prefill), "decode": statistics.median(decode),
                "prompt_n": t["prompt_n"], "predicted_n": t["predicted_n"]}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-predict", type=int, default=64)
    args = ap.parse_args()
    portable, model = paths("portable")
    native, _ = paths("native")
    rows = [
        ("portable, --no-repack (what the tests run)", portable, ["--no-repack"]),
        ("portable, repack on", portable, []),
        ("native, --no-repack", native, ["--no-repack"]),
    ]
    print(f"load average before: {os.getloadavg()[0]:.2f}; threads {args.threads}; "
          f"median of {args.repeats} runs; figures are llama.cpp's reported timings")
    results = {}
    for name, binary, extra in rows:
        results[name] = r = run(binary, model, extra, args.repeats, args.threads, args.n_predict)
        print(f"{name:44s} prefill {r['prefill']:8.1f} tok/s  decode {r['decode']:7.1f} tok/s  "
              f"({r['prompt_n']} prompt, {r['predicted_n']} generated tokens)")
    base = results["native, --no-repack"]
    for name, r in results.items():
        print(f"{name:44s} prefill {r['prefill'] / base['prefill']:.2f}x native  decode {r['decode'] / base['decode']:.2f}x native")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
