"""The reports' SVG charts: round ticks, every series drawn, and a legend beside the plot, not over it."""

from __future__ import annotations

import re

import pytest

from app.tools.charts import line_chart, nice_ticks, tick_label


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1234.5) == [0, 250, 500, 750, 1000, 1250]
    assert nice_ticks(0, 0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(0, 7) == [0, 2, 4, 6, 8]
    assert nice_ticks(0, 0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    for hi in (3.3, 17, 99.9, 12345, 0.0042):
        ticks = nice_ticks(0, hi)
        assert ticks[0] <= 0 and ticks[-1] >= hi and 2 <= len(ticks) <= 8


def test_tick_labels_have_only_the_decimals_the_step_needs():
    assert [tick_label(v, 250) for v in (0, 250, 1250)] == ["0", "250", "1,250"]
    assert [tick_label(v, 0.1) for v in (0, 0.1, 0.3)] == ["0", "0.1", "0.3"]
    assert tick_label(2.5, 2.5) == "2.5"


def _numbers(svg: str, anchor: str) -> list[str]:
    return re.findall(rf'text-anchor="{anchor}" fill="#444">([^<]+)<', svg)


def test_chart_draws_every_series_with_a_legend_outside_the_plot():
    series = {"round_robin p50": [(1.0, 120.0), (2.0, 180.5), (3.0, 1333.3)],
              "predicted_latency p99": [(1.0, 90.0), (2.0, 100.0), (3.0, 95.0)]}
    svg = line_chart("E2E", "seconds", "ms", series, log_x=False)
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 6
    plot = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    right_edge = float(plot.group(1)) + float(plot.group(2))
    legend = re.findall(r'<text x="([\d.]+)" y="[\d.]+">(round_robin p50|predicted_latency p99)</text>', svg)
    assert len(legend) == 2 and all(float(x) > right_edge for x, _ in legend)
    width = float(re.search(r'<svg width="([\d.]+)"', svg).group(1))
    assert all(float(x) + 7 * len(name) <= width for x, name in legend)  # the legend fits in the picture
    assert _numbers(svg, "end") == ["0", "500", "1,000", "1,500"]


def test_a_doubling_sweep_gets_a_log_axis_with_a_tick_per_setting():
    svg = line_chart("TTFT", "prompt tokens", "ms", {"p50": [(16, 10), (256, 30), (1024, 90), (4096, 400)]})
    assert "(log scale)" in svg
    assert _numbers(svg, "middle")[:4] == ["16", "256", "1,024", "4,096"]


def test_empty_and_single_point_series():
    assert "no data" in line_chart("t", "x", "y", {"a": []})
    svg = line_chart("t", "x", "y", {"a": [(1, 5.0)]})
    assert svg.count("<circle") == 1 and "<polyline" not in svg


def test_a_time_axis_ends_with_the_data_and_ticks_round_values():
    svg = line_chart("E2E", "seconds", "ms", {"a": [(2.0, 1.0), (7.3, 2.0), (20.2, 3.0)]}, log_x=False)
    assert _numbers(svg, "middle") == ["5", "10", "15", "20"]
    circles = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    plot = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    assert max(circles) == pytest.approx(float(plot.group(1)) + float(plot.group(2)), abs=0.2)  # last point on the edge
