"""Policy what-if: replay a recorded workload through the real gateway against simulated backends,
once per policy, and compare.

A policy is a gateway config file with a `simulator` section (the fleet to replay against) and the
routing to try (strategies, fallbacks, hedging, timeouts). The workload is JSONL, one request a line:
{"t": arrival seconds, "prompt_tokens": 200, "max_tokens": 100, "stream": true, "model": "alias"}.
"""

from __future__ import annotations

import asyncio
import html
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import uvicorn

from app.config import GatewayConfig, load_config
from app.http.server import create_app
from app.ports import free_port
from app.telemetry.workload import Arrival, parse_workload
from app.tools.charts import CSS, line_chart
from app.tools.simulator.fleet import start_fleet


@dataclass
class Outcome:
    arrival: float
    ok: bool
    ttft: float | None = None
    e2e: float | None = None


@dataclass
class PolicyRun:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)


def read_workload(path: str | Path) -> list[Arrival]:
    return parse_workload(Path(path).read_text(), str(path))


async def replay(policy_path: str, workload: list[Arrival]) -> PolicyRun:
    """Start the policy's fleet and gateway in this process, replay the workload open-loop, stop both."""
    config: GatewayConfig = load_config(policy_path)
    if config.simulator is None or not config.simulator.backends:
        raise ValueError(f"{policy_path}: a policy needs a simulator section (the fleet to replay against)")
    runners = await start_fleet(config.simulator)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    default_model = next(iter(config.models))
    run = PolicyRun(Path(policy_path).stem)
    try:
        async with aiohttp.ClientSession(headers={"authorization": "Bearer what-if"}) as session:
            start = time.perf_counter()

            async def one(a: Arrival) -> None:
                await asyncio.sleep(max(0.0, start + a.t - time.perf_counter()))
                body = {"model": a.model or default_model, "max_tokens": a.max_tokens, "stream": a.stream, "ignore_eos": True,
                        "messages": [{"role": "user", "content": "x" * (4 * a.prompt_tokens)}]}
                t0 = time.perf_counter()
                first = None
                try:
                    async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                        async for _ in r.content.iter_any():
                            if first is None:
                                first = time.perf_counter() - t0
                        data = await r.read()
                        ok = r.status == 200 and not (a.stream and b'"error"' in data)
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                e2e = time.perf_counter() - t0
                run.outcomes.append(Outcome(a.t, ok, first if a.stream else None, e2e if ok else None))

            await asyncio.gather(*(one(a) for a in workload))
    finally:
        server.should_exit = True
        await serving
        for runner in runners:
            await runner.cleanup()
    return run


@dataclass
class Comparison:
    """One row per policy, and the E2E percentiles per time window, for the table and the plot."""

    rows: list[tuple[str, int, int, str, str, str, str, str]]
    series: dict[str, list[tuple[float, float]]]

    def table(self) -> str:
        lines = ["| policy | requests | errors | TTFT p50 / p99 ms | E2E p50 / p95 / p99 ms |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {req} | {err} | {t50} / {t99} | {e50} / {e95} / {e99} |"
                  for n, req, err, t50, t99, e50, e95, e99 in self.rows]
        return "\n".join(lines)

    def html_table(self) -> str:
        head = ("<tr><th>policy</th><th>requests</th><th>errors</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th>"
                "<th>E2E p50 ms</th><th>E2E p95 ms</th><th>E2E p99 ms</th></tr>")
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in self.rows)
        return f'<table class="report">{head}{body}</table>'

    def svg(self) -> str:
        return line_chart("E2E latency percentiles over the replay", "seconds into the workload", "ms", self.series,
                          log_x=False)


def compare(runs: list[PolicyRun], windows: int = 10) -> Comparison:
    """Per policy: request and error counts, TTFT and E2E percentiles, and E2E p50/p99 per time window."""
    rows, series = [], {}
    for run in runs:
        e2e = sorted(o.e2e for o in run.outcomes if o.e2e is not None)
        ttft = sorted(o.ttft for o in run.outcomes if o.ttft is not None)
        errors = sum(1 for o in run.outcomes if not o.ok)
        rows.append((run.name, len(run.outcomes), errors, _p(ttft, 50), _p(ttft, 99), _p(e2e, 50), _p(e2e, 95), _p(e2e, 99)))
        end = max((o.arrival for o in run.outcomes), default=0) or 1
        for q in (50, 99):
            points = []
            for w in range(windows):
                lo, hi = end * w / windows, end * (w + 1) / windows
                values = sorted(o.e2e for o in run.outcomes if o.e2e is not None and lo <= o.arrival < hi + (w == windows - 1))
                if values:
                    points.append((round(hi, 1), _q(values, q) * 1000))
            series[f"{run.name} p{q}"] = points
    return Comparison(rows, series)


def _q(values: list[float], q: float) -> float:
    k = (len(values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _p(values: list[float], q: float) -> str:
    return f"{_q(values, q) * 1000:.0f}" if values else "-"


def run_whatif(workload_path: str, policies: list[str], out: str) -> str:
    """Replay the workload once per policy, print the table, write OUT.html with the plot."""
    workload = read_workload(workload_path)

    async def main() -> list[PolicyRun]:
        return [await replay(p, workload) for p in policies]

    runs = asyncio.run(main())
    result = compare(runs)
    table = result.table()
    medians = {r.name: statistics.median([o.e2e for o in r.outcomes if o.e2e] or [math.nan]) for r in runs}
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Policy what-if</title>"
            f"<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} {CSS}</style></head><body>"
            f"<h1>Policy what-if: {len(workload)} requests</h1>"
            f"<p>The same workload replayed through each policy against the same simulated fleet. Times are "
            f"measured by the replaying client, in ms.</p>{result.html_table()}{result.svg()}</body></html>")
    Path(f"{out}.html").write_text(page, encoding="utf-8")
    return f"{table}\n\nmedian E2E: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in medians.items()) + f"\nplot: {out}.html"
