"""bench/dispatch_frontier.py: two servers sharing each batch as llama.cpp does, and the rules placing calls."""

import pytest

from bench.dispatch_frontier import Shape, figures, rules, schedule, simulate

SHAPE = Shape(slots=2, slow=2.5, batch_slowdown=1.5, work=(1.0, 1.0), prefill=0.1, seconds=10)
RULES = {r.name: r for r in rules()}


def test_a_call_alone_ends_after_its_work_at_its_servers_speed():
    quick = simulate(RULES["least_inflight"], SHAPE, [(0.0, 1.0)])
    assert quick[0].ended == pytest.approx(1.0) and quick[0].first_token == pytest.approx(0.1)
    # Two at once: least_inflight sends the second to the idle throttled server, 2.5x slower.
    both = simulate(RULES["least_inflight"], SHAPE, [(0.0, 1.0), (0.0, 1.0)])
    assert [c.server for c in both] == [0, 1]
    assert both[1].ended == pytest.approx(2.5)


def test_calls_running_together_share_the_server_at_the_batch_slowdown():
    calls = simulate(RULES["predicted_end"], SHAPE, [(0.0, 1.0), (0.0, 1.0)])
    # Both on the quick server (1.5 s at a batch of two beats 2.5 s alone on the throttled one).
    assert [c.server for c in calls] == [0, 0]
    assert [c.ended for c in calls] == [pytest.approx(1.5), pytest.approx(1.5)]


def test_a_late_bound_call_waits_at_the_gateway_for_the_first_slot_to_free():
    # Both quick slots busy at 0, the throttled one free: late_bound(1) holds the third call (one waiting is not
    # more than 1) until a quick slot frees at 1.5 s; late_bound(0) sends it to the throttled slot at once.
    arrivals = [(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]
    held = simulate(RULES["late_bound(1)"], SHAPE, arrivals)
    assert held[2].server == 0 and held[2].ended == pytest.approx(2.5)
    at_once = simulate(RULES["late_bound(0)"], SHAPE, arrivals)
    assert [c.server for c in at_once] == [0, 0, 1] and at_once[2].ended == pytest.approx(2.5)


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_ends_every_call_of_a_loaded_schedule(name):
    arrivals = schedule(SHAPE, 0.85, seed=3)
    calls = simulate(RULES[name], SHAPE, arrivals)
    assert len(calls) == len(arrivals) and all(c.ended is not None and c.first_token is not None for c in calls)
    f = figures(calls)
    assert 0 < f.p50_e2e <= f.p99_e2e and 0 <= f.quick_share <= 1
