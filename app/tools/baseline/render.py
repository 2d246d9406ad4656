"""The baseline report as a terminal table, JSON, and a self-contained HTML page with SVG plots."""

from __future__ import annotations

import html
import math

import orjson

from app.tools.baseline.analysis import Report
from app.tools.charts import CSS, line_chart


def table(report: Report) -> str:
    head = "| prompt | output | conc | n | err | TTFT p50/p95/p99 ms | TPOT p50 ms | E2E p50/p95/p99 ms | prefill tok/s | decode tok/s | req/s |"
    lines = [head, "|" + "---|" * 11]
    for c in report.cells:
        lines.append(
            f"| {c.prompt_tokens} | {c.output_tokens} | {c.concurrency} | {c.requests} | {c.error_rate:.0%} | "
            f"{_ms(c.ttft_p50)} / {_ms(c.ttft_p95)} / {_ms(c.ttft_p99)} | {_ms(c.tpot_p50)} | "
            f"{_ms(c.e2e_p50)} / {_ms(c.e2e_p95)} / {_ms(c.e2e_p99)} | {_num(c.prefill_tokens_per_s)} | "
            f"{_num(c.decode_tokens_per_s)} | {c.throughput_rps:.2f} |")
    f = report.fit
    lines.append("")
    lines.append(f"fit: E2E = {f.a_s * 1000:.1f} ms + {f.b_s_per_prompt_token * 1000:.4f} ms x prompt_tokens "
                 f"+ {f.c_s_per_output_token * 1000:.3f} ms x output_tokens   (R^2 {f.r2:.4f}, {f.samples} requests)")
    lines.append(f"throughput flattens past concurrency {report.flattens_at}" if report.flattens_at
                 else "throughput still grew at the highest concurrency tried")
    return "\n".join(lines)


def to_json(report: Report) -> bytes:
    return orjson.dumps({**report.to_dict(), "prior": report.prior()}, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def concurrency_cells(report: Report) -> list:
    """The concurrency sweep: the (prompt, output) cell measured at the most concurrency levels,
    its concurrency-1 measurement included, in order of concurrency."""
    groups: dict[tuple[int, int], list] = {}
    for c in report.cells:
        groups.setdefault((c.prompt_tokens, c.output_tokens), []).append(c)
    if not groups:
        return []
    best = max(groups.values(), key=lambda cs: (len({c.concurrency for c in cs}), -min(c.concurrency for c in cs)))
    return sorted(best, key=lambda c: c.concurrency)


def to_html(report: Report) -> str:
    single = [c for c in report.cells if c.concurrency == 1]
    by_out = sorted((c for c in single if c.prompt_tokens == _mode([c.prompt_tokens for c in single])), key=lambda c: c.output_tokens)
    by_prompt = sorted((c for c in single if c.output_tokens == _mode([c.output_tokens for c in single])), key=lambda c: c.prompt_tokens)
    conc = concurrency_cells(report)
    where = f" (prompt {conc[0].prompt_tokens}, output {conc[0].output_tokens} tokens)" if conc else ""
    f = report.fit
    plots = [
        line_chart("E2E latency vs output length (concurrency 1)", "output tokens", "ms",
                   {"p50": [(c.output_tokens, c.e2e_p50 * 1000) for c in by_out],
                    "p99": [(c.output_tokens, c.e2e_p99 * 1000) for c in by_out],
                    "fit": [(c.output_tokens, (f.a_s + f.b_s_per_prompt_token * c.prompt_tokens + f.c_s_per_output_token * c.output_tokens) * 1000) for c in by_out]},
                   log_x=False),  # linear, as the fit is: a straight line should look straight
        line_chart("TTFT vs prompt length (concurrency 1)", "prompt tokens", "ms",
                   {"p50": [(c.prompt_tokens, c.ttft_p50 * 1000) for c in by_prompt],
                    "p99": [(c.prompt_tokens, c.ttft_p99 * 1000) for c in by_prompt]}),
        line_chart(f"Throughput vs concurrency{where}", "concurrent clients", "requests/s",
                   {"throughput": [(c.concurrency, c.throughput_rps) for c in conc]}),
        line_chart(f"E2E latency vs concurrency{where}", "concurrent clients", "ms",
                   {"p50": [(c.concurrency, c.e2e_p50 * 1000) for c in conc],
                    "p99": [(c.concurrency, c.e2e_p99 * 1000) for c in conc]}),
        line_chart(f"Time per output token vs concurrency{where}", "concurrent clients", "ms per token",
                   {"TPOT p50": [(c.concurrency, c.tpot_p50 * 1000) for c in conc]}),
    ]
    rows = "".join(
        f"<tr><td>{c.prompt_tokens}</td><td>{c.output_tokens}</td><td>{c.concurrency}</td><td>{c.requests}</td>"
        f"<td>{c.error_rate:.0%}</td><td>{_ms(c.ttft_p50)}</td><td>{_ms(c.ttft_p99)}</td><td>{_ms(c.tpot_p50)}</td>"
        f"<td>{_ms(c.e2e_p50)}</td><td>{_ms(c.e2e_p95)}</td><td>{_ms(c.e2e_p99)}</td><td>{c.throughput_rps:.2f}</td></tr>"
        for c in report.cells)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Latency baseline: {html.escape(report.model)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}}
.grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:1.5em}}
.fit{{font-size:1.2em;background:#f4f7fb;padding:.8em;border-radius:6px}} {CSS}</style>
</head><body><h1>Latency baseline</h1>
<p>Target <code>{html.escape(report.target)}</code>, model <code>{html.escape(report.model)}</code>.</p>
<p class="fit">E2E = <b>{f.a_s * 1000:.1f} ms</b> + <b>{f.b_s_per_prompt_token * 1000:.4f} ms</b> &times; prompt tokens +
<b>{f.c_s_per_output_token * 1000:.3f} ms</b> &times; output tokens &nbsp; (R&sup2; {f.r2:.4f}, {f.samples} requests; fit {html.escape(f.quality)}).
{"Throughput flattens past concurrency " + str(report.flattens_at) + "." if report.flattens_at else ""}</p>
<div class="grid">{"".join(plots)}</div>
<h2>Every cell</h2><table class="report"><tr><th>prompt</th><th>output</th><th>conc</th><th>n</th><th>err</th><th>TTFT p50</th><th>TTFT p99</th>
<th>TPOT p50</th><th>E2E p50</th><th>E2E p95</th><th>E2E p99</th><th>req/s</th></tr>{rows}</table>
<p>All times in ms, measured by the client. TPOT = (E2E - TTFT) / (n - 1).</p></body></html>"""


def _mode(values: list[int]) -> int:
    return max(set(values), key=values.count) if values else 0


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"
