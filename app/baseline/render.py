"""The baseline report as a terminal table, JSON, and a self-contained HTML page with SVG plots."""

from __future__ import annotations

import html
import math

import orjson

from app.baseline.analysis import Report


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


def to_html(report: Report) -> str:
    single = [c for c in report.cells if c.concurrency == 1]
    mid_p = sorted({c.prompt_tokens for c in single})
    by_out = sorted((c for c in single if c.prompt_tokens == _mode([c.prompt_tokens for c in single])), key=lambda c: c.output_tokens)
    by_prompt = sorted((c for c in single if c.output_tokens == _mode([c.output_tokens for c in single])), key=lambda c: c.prompt_tokens)
    conc = sorted((c for c in report.cells if c.output_tokens == by_prompt[0].output_tokens and c.prompt_tokens == _mode(mid_p)),
                  key=lambda c: c.concurrency) if by_prompt else []
    f = report.fit
    plots = [
        _chart("E2E latency vs output length (concurrency 1)", "output tokens", "ms",
               {"p50": [(c.output_tokens, c.e2e_p50 * 1000) for c in by_out],
                "p99": [(c.output_tokens, c.e2e_p99 * 1000) for c in by_out],
                "fit": [(c.output_tokens, (f.a_s + f.b_s_per_prompt_token * c.prompt_tokens + f.c_s_per_output_token * c.output_tokens) * 1000) for c in by_out]}),
        _chart("TTFT vs prompt length (concurrency 1)", "prompt tokens", "ms",
               {"p50": [(c.prompt_tokens, c.ttft_p50 * 1000) for c in by_prompt],
                "p99": [(c.prompt_tokens, c.ttft_p99 * 1000) for c in by_prompt]}),
        _chart("Throughput vs concurrency", "concurrency", "req/s", {"throughput": [(c.concurrency, c.throughput_rps) for c in conc]}),
        _chart("P99 E2E and TPOT vs concurrency", "concurrency", "ms",
               {"E2E p99": [(c.concurrency, c.e2e_p99 * 1000) for c in conc],
                "TPOT p50 x 100": [(c.concurrency, c.tpot_p50 * 100000) for c in conc]}),
    ]
    rows = "".join(
        f"<tr><td>{c.prompt_tokens}</td><td>{c.output_tokens}</td><td>{c.concurrency}</td><td>{c.requests}</td>"
        f"<td>{c.error_rate:.0%}</td><td>{_ms(c.ttft_p50)}</td><td>{_ms(c.ttft_p99)}</td><td>{_ms(c.tpot_p50)}</td>"
        f"<td>{_ms(c.e2e_p50)}</td><td>{_ms(c.e2e_p95)}</td><td>{_ms(c.e2e_p99)}</td><td>{c.throughput_rps:.2f}</td></tr>"
        for c in report.cells)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Latency baseline: {html.escape(report.model)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}}
.grid{{display:grid;grid-template-columns:1fr 1fr;gap:1.5em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ddd;padding:3px 8px;text-align:right}} .fit{{font-size:1.2em;background:#f4f7fb;padding:.8em;border-radius:6px}}</style>
</head><body><h1>Latency baseline</h1>
<p>Target <code>{html.escape(report.target)}</code>, model <code>{html.escape(report.model)}</code>.</p>
<p class="fit">E2E = <b>{f.a_s * 1000:.1f} ms</b> + <b>{f.b_s_per_prompt_token * 1000:.4f} ms</b> &times; prompt tokens +
<b>{f.c_s_per_output_token * 1000:.3f} ms</b> &times; output tokens &nbsp; (R&sup2; {f.r2:.4f}, {f.samples} requests).
{"Throughput flattens past concurrency " + str(report.flattens_at) + "." if report.flattens_at else ""}</p>
<p>Latency is flat: the output-token term dominates. More GPUs do not make one answer faster; routing,
caching and shorter outputs do.</p>
<div class="grid">{"".join(plots)}</div>
<h2>Every cell</h2><table><tr><th>prompt</th><th>output</th><th>conc</th><th>n</th><th>err</th><th>TTFT p50</th><th>TTFT p99</th>
<th>TPOT p50</th><th>E2E p50</th><th>E2E p95</th><th>E2E p99</th><th>req/s</th></tr>{rows}</table>
<p>All times in ms, measured by the client. TPOT = (E2E - TTFT) / (n - 1).</p></body></html>"""


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _chart(title: str, xlabel: str, ylabel: str, series: dict[str, list[tuple[float, float]]]) -> str:
    w, h, pad = 480, 280, 50
    points = [p for s in series.values() for p in s if not math.isnan(p[1])]
    if not points:
        return f"<div><h3>{html.escape(title)}</h3><p>no data</p></div>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(p[1] for p in points) * 1.1 or 1
    sx = (lambda x: pad + (x - x0) / (x1 - x0) * (w - 2 * pad)) if x1 > x0 else (lambda x: w / 2)

    def sy(y: float) -> float:
        return h - pad - y / y1 * (h - 2 * pad)

    parts = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-size="11">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#888"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#888"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">{html.escape(xlabel)}</text>',
             f'<text x="12" y="{pad - 12}">{html.escape(ylabel)}</text>']
    for frac in (0.0, 0.5, 1.0):
        y = y1 * frac
        parts.append(f'<text x="{pad - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    for x in sorted({p[0] for p in points}):
        parts.append(f'<text x="{sx(x):.1f}" y="{h - pad + 14}" text-anchor="middle">{x:g}</text>')
    for k, (name, pts) in enumerate(series.items()):
        pts = [p for p in pts if not math.isnan(p[1])]
        colour = _COLOURS[k % len(_COLOURS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        dash = ' stroke-dasharray="4 3"' if name == "fit" else ""
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in pts]
        parts.append(f'<text x="{w - pad - 80}" y="{pad + 14 * k}" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return f"<div><h3>{html.escape(title)}</h3>{''.join(parts)}</div>"


def _mode(values: list[int]) -> int:
    return max(set(values), key=values.count) if values else 0


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"
