"""The learned figures of a backend's latency model (app/routing/latency_model.py)."""

from __future__ import annotations

import pytest

from app.routing.latency_model import Decaying, LatencyModel, Prior


@pytest.mark.parametrize(("prior", "tau_s", "fed"), [(200.0, 60.0, 24.0), (0.002, 10.0, 0.001), (0.0, 10.0, 0.25)])
def test_a_figure_fed_steadily_reads_what_it_is_fed_not_a_blend_with_its_prior(prior, tau_s, fed):
    figure = Decaying(prior, tau_s)
    for t in range(1, 601):
        figure.add(fed, float(t))
    assert figure.get(600.0) == pytest.approx(fed, rel=1e-6)


def test_a_figure_left_unfed_relaxes_to_its_prior_and_a_new_sample_after_the_gap_takes_over():
    figure = Decaying(200.0, 60.0)
    for t in range(1, 61):
        figure.add(24.0, float(t))
    assert 24.0 < figure.get(90.0) < 200.0
    assert figure.get(60.0 + 3600.0) == pytest.approx(200.0, rel=1e-6)
    figure.add(30.0, 60.0 + 3600.0)
    assert figure.get(60.0 + 3600.0) == pytest.approx(30.0, rel=1e-6)


def test_answers_of_steady_length_are_predicted_at_that_length():
    model = LatencyModel(Prior(output_tokens=200.0))
    for t in range(1, 601):
        model.output_tokens.add(24.0, float(t))
    assert model.output_tokens.get(600.0) == pytest.approx(24.0, rel=1e-3)
