"""Self-contained SVG line charts for the HTML reports (bench baseline, policy what-if): round axis
ticks, light grid lines, labelled axes, and a legend beside the plot, never over the lines."""

from __future__ import annotations

import html
import itertools
import math

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
_FONT = 12
_CHAR_W = 7.0  # average glyph width at _FONT px, for sizing the legend
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 64, 16, 16, 48
_PLOT_W, _PLOT_H = 420, 240


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 x 10^k apart) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(lo / step) * step
    ticks, k = [], 0
    while True:
        value = start + k * step
        ticks.append(round(value, 12))
        if value >= hi - step * 1e-9:
            return ticks
        k += 1


def tick_label(value: float, step: float) -> str:
    """A tick's text, with only as many decimals as the step needs, and thousands grouped."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if step >= 1 and float(step).is_integer():
        decimals = 0
    elif decimals == 0 and not float(step).is_integer():
        decimals = 1
    text = f"{value:,.{decimals}f}"
    return "0" if text.strip("-0.,") == "" else text


def line_chart(title: str, xlabel: str, ylabel: str, series: dict[str, list[tuple[float, float]]],
               log_x: bool | None = None, dashed: frozenset[str] = frozenset({"fit"})) -> str:
    """One chart as an HTML <figure> with an inline SVG. NaN points are skipped.

    `log_x`: a base-2 x axis with a tick at every x value (the sweeps double their lengths); by default
    it is chosen when x spans a factor of 16 or more.
    """
    series = {name: [(x, y) for x, y in pts if not (math.isnan(x) or math.isnan(y))] for name, pts in series.items()}
    points = [p for pts in series.values() for p in pts]
    head = f'<figure class="chart"><figcaption>{html.escape(title)}</figcaption>'
    if not points:
        return head + "<p>no data</p></figure>"
    xs = sorted({x for x, _ in points})
    if log_x is None:
        log_x = xs[0] > 0 and xs[-1] / xs[0] >= 16
    fx = (lambda v: math.log2(v)) if log_x else (lambda v: v)
    yt = nice_ticks(0.0, max(y for _, y in points) or 1.0)
    if log_x:
        xt, x_lo, x_hi = xs, fx(xs[0]), fx(xs[-1])
    elif len(xs) <= 6 and all(float(x).is_integer() for x in xs):
        xt, x_lo, x_hi = xs, xs[0], xs[-1]  # a few measured settings: tick each one
    else:
        # Round ticks inside the data's range; the axis ends where the data does, not at the next tick.
        xt = [t for t in nice_ticks(min(xs), max(xs)) if min(xs) - 1e-9 <= t <= max(xs) + 1e-9] or xs
        x_lo, x_hi = min(xs[0], xt[0]), max(xs[-1], xt[-1])
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    legend_w = 28 + _CHAR_W * max(len(name) for name in series)
    width = _PAD_L + _PLOT_W + _PAD_R + legend_w
    height = _PAD_T + _PLOT_H + _PAD_B
    left, bottom = _PAD_L, _PAD_T + _PLOT_H

    def sx(v: float) -> float:
        return left + (fx(v) - x_lo) / (x_hi - x_lo) * _PLOT_W

    def sy(v: float) -> float:
        return bottom - (v - yt[0]) / (yt[-1] - yt[0]) * _PLOT_H

    out = [(f'<svg width="{width:.0f}" height="{height}" viewBox="0 0 {width:.0f} {height}" '
            f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="{_FONT}" role="img">'),
           f"<title>{html.escape(title)}</title>"]
    ystep = yt[1] - yt[0] if len(yt) > 1 else 1.0
    for v in yt:
        y = sy(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + _PLOT_W}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{tick_label(v, ystep)}</text>')
    xstep = min((b - a for a, b in itertools.pairwise(xt)), default=1.0)
    for v in xt:
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" y1="{_PAD_T}" x2="{x:.1f}" y2="{bottom}" stroke="#f0f0f0"/>')
        label = f"{v:,.0f}" if log_x or float(v).is_integer() else tick_label(v, xstep)
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#444">{label}</text>')
    out.append(f'<rect x="{left}" y="{_PAD_T}" width="{_PLOT_W}" height="{_PLOT_H}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{left + _PLOT_W / 2:.1f}" y="{height - 8}" text-anchor="middle">'
               f"{html.escape(xlabel)}{' (log scale)' if log_x else ''}</text>")
    out.append(f'<text transform="translate(16 {_PAD_T + _PLOT_H / 2:.1f}) rotate(-90)" text-anchor="middle">'
               f"{html.escape(ylabel)}</text>")
    legend_x = left + _PLOT_W + 14
    for k, (name, pts) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        dash = ' stroke-dasharray="5 4"' if name in dashed else ""
        if len(pts) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(pts))
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in pts]
        ly = _PAD_T + 8 + 18 * k
        out.append(f'<line x1="{legend_x}" y1="{ly}" x2="{legend_x + 18}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{legend_x + 24}" y="{ly + 4}">{html.escape(name)}</text>')
    out.append("</svg>")
    return head + "".join(out) + "</figure>"


CSS = """figure.chart{margin:1em 0 0} figure.chart figcaption{font-weight:600;margin:0 0 .3em}
table.report{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
table.report th,table.report td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.report th{background:#f4f4f4} table.report td:first-child,table.report th:first-child{text-align:left}"""
