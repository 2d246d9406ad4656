"""Stages cover an attempt, each says where its figure came from, and a reported figure is never rescaled."""

from __future__ import annotations

import itertools

import pytest

from app.routing.latency_model import LatencyModel
from app.telemetry.stages import first_byte_stages, json_stages, stream_stages
from app.upstream.adapters import NO_REPORT, BackendReport


def contiguous(stages, start, end):
    assert stages[0].start == pytest.approx(start) and stages[-1].end == pytest.approx(end)
    for a, b in itertools.pairwise(stages):
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


def test_reports_are_never_rescaled():
    st = json_stages(0.0, 0.1, BackendReport(queue_s=0.05, prefill_s=0.05, decode_s=0.05), 10, 10, LatencyModel(), 1)
    by = {s.name: s for s in st}
    assert by["prefill"].duration == pytest.approx(0.05) and by["decode"].duration == pytest.approx(0.05)
    assert by["network"].duration == 0.0


def test_llamacpp_json_keeps_its_reported_figures_and_labels_the_rest():
    # 1.2 s measured; llama.cpp says 200 ms prefill and 340 ms decode; queue was not reported.
    st = json_stages(0.0, 1.2, BackendReport(prefill_s=0.2, decode_s=0.34), 100, 40, LatencyModel(), 2)
    contiguous(st, 0.0, 1.2)
    by = {s.name: s for s in st}
    assert by["prefill"].duration == pytest.approx(0.2) and by["prefill"].source == "reported"
    assert by["decode"].duration == pytest.approx(0.34) and by["decode"].source == "reported"
    assert by["network"].duration == pytest.approx(0.002) and by["network"].source == "estimated"
    assert by["queue"].source == "estimated" and by["queue"].duration == pytest.approx(1.2 - 0.002 - 0.54)


def test_headers_at_slot_assignment_are_network_then_queue():
    # llama.cpp: headers at 800 ms (the wait for a slot), first event 60 ms later.
    model = LatencyModel()
    model.observe_network(0.001, now=0)
    st = stream_stages(0.0, 0.8, 0.86, 1.5, BackendReport(prefill_s=0.05), 100, model, headers_at_slot=True)
    contiguous(st, 0.0, 1.5)
    by = {s.name: s for s in st}
    assert by["network"].duration < 0.005 and by["network"].source == "estimated"
    assert by["queue"].duration == pytest.approx(0.8, abs=0.005) and by["queue"].source == "measured"
    assert by["prefill"].duration == pytest.approx(0.05) and by["prefill"].source == "reported"
    assert by["unattributed"].duration == pytest.approx(0.01)


def test_first_byte_split_on_llamacpp_shows_queue_not_network():
    st = first_byte_stages(0.0, 0.797, 0.85, True, LatencyModel())
    assert [s.name for s in st] == ["network", "queue", "prefill"]
    assert st[0].duration <= 0.002 and st[1].duration > 0.79


def test_headers_seen_late_shorten_the_queue_not_the_reported_prefill():
    # Headers and first event arrived in one read (a busy gateway): the window is 1 ms, the report 20 ms.
    st = stream_stages(0.0, 0.500, 0.501, 0.9, BackendReport(prefill_s=0.020), 100, LatencyModel(), headers_at_slot=True)
    contiguous(st, 0.0, 0.9)
    by = {s.name: s for s in st}
    assert by["prefill"].duration == pytest.approx(0.020) and by["prefill"].end == pytest.approx(0.501)
    assert by["queue"].end == pytest.approx(0.481)
