"""Stages cover an attempt exactly, and each says where its figure came from."""

from __future__ import annotations

import pytest

from app.routing.latency_model import LatencyModel
from app.telemetry.stages import json_stages, stream_stages
from app.telemetry.timing import NO_REPORT, BackendReport


def contiguous(stages, start, end):
    assert stages[0].start == pytest.approx(start) and stages[-1].end == pytest.approx(end)
    for a, b in zip(stages, stages[1:]):
        assert a.end == pytest.approx(b.start)
    assert sum(s.duration for s in stages) == pytest.approx(end - start)


def test_stream_with_llamacpp_report():
    st = stream_stages(0.0, 0.002, 0.100, 0.500, BackendReport(prefill_s=0.060), 100, LatencyModel())
    contiguous(st, 0.0, 0.5)
    assert [(s.name, s.source) for s in st] == [
        ("network", "measured"), ("queue", "estimated"), ("prefill", "reported"), ("decode", "measured")]
    assert st[2].duration == pytest.approx(0.060)


def test_stream_without_report_estimates_the_split():
    st = stream_stages(0.0, 0.001, 0.101, 0.300, NO_REPORT, 200, LatencyModel())
    contiguous(st, 0.0, 0.3)
    assert st[1].source == st[2].source == "estimated"
    assert st[2].duration == pytest.approx(200 / 5000)  # the prior prefill rate


def test_json_with_tgi_report():
    r = BackendReport(queue_s=0.012, prefill_s=0.035, decode_s=0.456)
    st = json_stages(0.0, 0.510, r, 31, 20, LatencyModel(), 1)
    contiguous(st, 0.0, 0.510)
    assert [s.source for s in st] == ["measured", "reported", "reported", "reported"]
    assert st[0].duration == pytest.approx(0.007)


def test_json_without_report_is_all_estimates_but_adds_up():
    st = json_stages(1.0, 1.8, NO_REPORT, 100, 30, LatencyModel(), 2)
    contiguous(st, 1.0, 1.8)
    assert {s.source for s in st} == {"estimated"}


def test_reports_larger_than_measured_are_scaled_to_fit():
    st = json_stages(0.0, 0.1, BackendReport(queue_s=0.05, prefill_s=0.05, decode_s=0.05), 10, 10, LatencyModel(), 1)
    contiguous(st, 0.0, 0.1)
