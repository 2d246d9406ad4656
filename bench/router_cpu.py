"""The router's CPU per request inside the gateway (issue 24: it must not add to the gateway's overhead),
on ../shared/peer-bench's fake backend and load generator, each strategy's gateway against another's in
one run.

Every target is a gateway (bench/peer_gateway.py) with three backends behind its alias (names for the
same zero-latency fake server), so the router has a real choice to make; targets differ by strategy and,
optionally, by source tree (a clone before a change). All run at once, pinned to CPU 0; the load
generator and the fake backend share CPU 1 (peer-bench's placement). A single run's figure moves with
whatever else the shared box does, so the comparison is built to survive that:

- runs are short and alternate in blocks, A B B A (with more targets, A B C C B A), every cell's runs
  back to back: a load that climbs or falls through a block weighs on each target alike, and the
  block's difference (the mean of its two half-differences against the first target) cancels a linear
  drift;
- the figure is the median of the blocks' differences, with their range: one noisy block moves it little;
- each run records the gateway's CPU (schedstat of its process group, as compare.py reads it), the
  load average, and the CPU the rest of the box used meanwhile (all CPU time the kernel counted, less
  this bench's processes): a block run while others were busy shows as such;
- it is bounded in time: no block starts once `--budget-s` would be passed.

    python bench/router_cpu.py --port 44000 --out /tmp/rc     # la (latency_aware) against li (least_inflight)
    python bench/router_cpu.py --target la=latency_aware --target li=least_inflight \\
        --target base-la=latency_aware@/path/to/clone --modes json,stream --conc 16,64 --blocks 6 --seconds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_BENCH = ROOT.parent / "shared" / "peer-bench"
CLK = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgid: int) -> float:
    """CPU seconds so far of the live processes of a process group (compare.py's reading: schedstat)."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            if int(fields[2]) != pgid:
                continue
            try:
                for tid in os.listdir(f"/proc/{d}/task"):
                    with open(f"/proc/{d}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0]) / 1e9
            except OSError:
                total += (int(fields[11]) + int(fields[12])) / CLK
        except (OSError, ValueError, IndexError):
            continue
    return total


def box_busy_s() -> float:
    """CPU seconds every process on the box has used (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK


def own_cpu_s() -> float:
    """This bench's CPU and its finished children's (the load generator runs)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Proc:
    """A process started in its own session; stopped through its process group only."""

    def __init__(self, argv: list[str], log: Path, cwd: str | None = None) -> None:
        self.log = open(log, "ab")  # closed in stop()
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, cwd=cwd)
        self.pgid = self.p.pid

    def cpu(self) -> float:
        return group_cpu_s(self.pgid)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.pgid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.pgid, signal.SIGKILL)
                self.p.wait(5)
        self.log.close()


def ready(url: str, timeout_s: float) -> bool:
    body = json.dumps({"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "ping"}]}).encode()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                         headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return True
        except Exception:  # noqa: BLE001, S110 - not up yet
            pass
        time.sleep(0.3)
    return False


def loadgen(a: argparse.Namespace, url: str, mode: str, conc: int, seconds: float, warmup: int, label: str) -> dict:
    argv = ["taskset", "-c", a.client_cpus, a.python, str(a.peer_bench / "loadgen.py"), url, "-n", "1000000",
            "-c", str(conc), "--warmup", str(warmup), "--model", "fake-model", "--max-tokens", "16",
            "--max-seconds", str(seconds), "--label", label]
    if mode == "stream":
        argv.append("--stream")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 3 + 60)
    if out.returncode != 0:
        return {"failed": out.stderr[-500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", action="append", default=[],
                    help="NAME=STRATEGY[@ROOT] (default: li=least_inflight la=latency_aware); the first is the reference")
    ap.add_argument("--modes", default="json,stream")
    ap.add_argument("--conc", default="16,64")
    ap.add_argument("--blocks", type=int, default=6, help="ABBA blocks per cell")
    ap.add_argument("--seconds", type=float, default=2.0, help="each run's length")
    ap.add_argument("--budget-s", type=float, default=420.0, help="no block starts past this (start-up not counted)")
    ap.add_argument("--port", type=int, default=44000, help="the fake backend's port; gateways take the next ones")
    ap.add_argument("--backends", type=int, default=3)
    ap.add_argument("--peer-bench", type=Path, default=PEER_BENCH)
    ap.add_argument("--python", default=None, help="for the backend and the load generator (default: peer-bench's harness venv)")
    ap.add_argument("--gateway-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--out", type=Path, default=Path("bench/results") / time.strftime("router-cpu-%Y%m%d-%H%M%S"))
    a = ap.parse_args()
    harness = Path(os.environ.get("PEERS_DIR", "/tmp/peers")) / "harness-venv" / "bin" / "python"
    a.python = a.python or (str(harness) if harness.exists() else sys.executable)
    a.out.mkdir(parents=True, exist_ok=True)
    specs = a.target or ["li=least_inflight", "la=latency_aware"]
    targets = []
    for k, spec in enumerate(specs):
        name, _, rest = spec.partition("=")
        strategy, _, root = rest.partition("@")
        targets.append({"name": name, "strategy": strategy, "root": Path(root or ROOT).resolve(), "port": a.port + 1 + k})
    modes, concs = a.modes.split(","), [int(c) for c in a.conc.split(",")]
    procs: list[Proc] = []
    rows: list[dict] = []
    try:
        backend_url = f"http://127.0.0.1:{a.port}"
        backend = Proc(["taskset", "-c", a.client_cpus, a.python, str(a.peer_bench / "fake_backend.py"), "--port", str(a.port),
                        "--models", "fake-model"], a.out / "backend.log")
        procs.append(backend)
        if not ready(backend_url, 20):
            raise SystemExit("the fake backend did not start")
        for t in targets:
            root = t["root"]
            py = root / ".venv" / "bin" / "python"
            argv = ["taskset", "-c", a.gateway_cpus, str(py if py.exists() else sys.executable), str(root / "bench" / "peer_gateway.py"),
                    "--root", str(root), "--port", str(t["port"]), "--backend", backend_url, "--backends", str(a.backends),
                    "--strategy", t["strategy"]]
            t["proc"] = Proc(argv, a.out / f"{t['name']}.log")
            procs.append(t["proc"])
            t["url"] = f"http://127.0.0.1:{t['port']}"
        for t in targets:
            if not ready(t["url"], 90):
                raise SystemExit(f"{t['name']} did not start (see {a.out}/{t['name']}.log)")
            for mode in modes:  # warm: imports, pools, the latency models
                loadgen(a, t["url"], mode, 8, 2.0, 300, t["name"])
        print(f"targets: {', '.join(t['name'] + '=' + t['strategy'] + '@' + str(t['root']) for t in targets)}; "
              f"{a.backends} backends each; runs of {a.seconds} s; load {os.getloadavg()[0]:.2f}", flush=True)
        start = time.monotonic()
        per_block = len(modes) * len(concs) * 2 * len(targets) * (a.seconds + 0.6)
        with open(a.out / "runs.jsonl", "a") as out:
            for block in range(a.blocks):
                if block and time.monotonic() - start + per_block > a.budget_s:
                    print(f"stopping after {block} blocks: the next would pass --budget-s {a.budget_s}", flush=True)
                    break
                # A B ... B A, the targets' order turned every other block (so none is always first).
                seq = targets if block % 2 == 0 else targets[::-1]
                for mode in modes:
                    for conc in concs:
                        for half, t in enumerate(seq + seq[::-1]):
                            gw0, be0, box0, own0 = t["proc"].cpu(), backend.cpu(), box_busy_s(), own_cpu_s()
                            others0 = sum(x["proc"].cpu() for x in targets if x is not t)
                            t0 = time.monotonic()
                            r = loadgen(a, t["url"], mode, conc, a.seconds, 20, t["name"])
                            wall = time.monotonic() - t0
                            gw = t["proc"].cpu() - gw0
                            ours = gw + backend.cpu() - be0 + own_cpu_s() - own0 + sum(x["proc"].cpu() for x in targets if x is not t) - others0
                            if "failed" in r or not r.get("ok"):
                                print(f"b{block} {mode} c{conc} {t['name']}: FAILED {r.get('failed') or r.get('error_kinds')}", flush=True)
                                continue
                            done = r["ok"] + r["errors"] + 20
                            row = {"block": block, "half": half // len(seq), "mode": mode, "conc": conc, "target": t["name"],
                                   "gw_cpu_us": round(gw / done * 1e6, 1), "rps": r["rps"], "errors": r["errors"],
                                   "p50_ms": r["lat_ms"]["p50"], "load1": os.getloadavg()[0],
                                   "foreign_cores": round(max(0.0, box_busy_s() - box0 - ours) / wall, 2)}
                            rows.append(row)
                            out.write(json.dumps(row) + "\n")
                            out.flush()
                            print(f"b{block} {mode:<6} c{conc:<3} {t['name']:<8} gw {row['gw_cpu_us']:6.1f} us/req  "
                                  f"rps {r['rps']:6.0f}  load {row['load1']:.2f}  others {row['foreign_cores']:.2f} cores", flush=True)
        print(f"measured for {time.monotonic() - start:.0f} s", flush=True)
    finally:
        for p in reversed(procs):
            p.stop()
    text = summary(rows, targets, modes, concs)
    (a.out / "summary.md").write_text(text)
    print(text)
    return 0


def summary(rows: list[dict], targets: list[dict], modes: list[str], concs: list[int]) -> str:
    ref = targets[0]["name"]
    lines = [(f"Gateway CPU per request (us), median of runs; each other target against {ref}: the median of the blocks' "
              "differences (each the mean of its two halves'), with their range, and the ratio of the medians."), "",
             "| mode | c | " + " | ".join(t["name"] for t in targets) + " | " +
             " | ".join(f"{t['name']} - {ref} (range)" for t in targets[1:]) + " | load | others (cores) |",
             "|---|---|" + "---|" * (2 * len(targets) - 1) + "---|---|"]
    for mode in modes:
        for conc in concs:
            cell = [r for r in rows if r["mode"] == mode and r["conc"] == conc]
            if not cell:
                continue
            meds = {t["name"]: statistics.median([r["gw_cpu_us"] for r in cell if r["target"] == t["name"]] or [float("nan")])
                    for t in targets}
            diffs = []
            for t in targets[1:]:
                per_block = []
                for b in sorted({r["block"] for r in cell}):
                    halves = []
                    for h in (0, 1):
                        x = [r["gw_cpu_us"] for r in cell if r["block"] == b and r["half"] == h and r["target"] == t["name"]]
                        y = [r["gw_cpu_us"] for r in cell if r["block"] == b and r["half"] == h and r["target"] == ref]
                        if x and y:
                            halves.append(x[0] - y[0])
                    if halves:
                        per_block.append(sum(halves) / len(halves))
                if per_block:
                    diffs.append(f"{statistics.median(per_block):+.1f} ({min(per_block):+.0f}..{max(per_block):+.0f}), "
                                 f"{meds[t['name']] / meds[ref]:.3f}x")
                else:
                    diffs.append("-")
            loads = [r["load1"] for r in cell]
            others = [r["foreign_cores"] for r in cell]
            lines.append(f"| {mode} | {conc} | " + " | ".join(f"{meds[t['name']]:.1f}" for t in targets) + " | " +
                         " | ".join(diffs) + f" | {min(loads):.2f}-{max(loads):.2f} | {statistics.median(others):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
