"""bench/real_backends.py's schedule and its NAME@base strategies (no servers started)."""

import random
import statistics

import pytest

from bench.harness import base_checkout
from bench.real_backends import LONG_WORDS, alias, schedule, spread


def test_the_schedule_offers_exactly_the_rate_asked_and_the_mix_as_drawn_evenly():
    # 20 arrivals at 0.41 req/s drawn freely came at 0.62 req/s with 329 words a prompt for 275 (s24m's run C).
    for seed in range(20):
        arrivals, lengths = schedule(random.Random(seed), 0.41, 20, "mixed")
        assert arrivals == sorted(arrivals) and arrivals[0] > 0
        assert abs(arrivals[-1] - 20 / 0.41) < 1e-9  # the mean gap is 1 / rate
        assert sum(w >= LONG_WORDS for w in lengths) == 10
        assert statistics.fmean(lengths) == pytest.approx((50 + 500) / 2, abs=1)
        assert all(20 <= w <= 80 or LONG_WORDS <= w <= 800 for w in lengths)
    assert schedule(random.Random(3), 0.41, 20, "mixed") == schedule(random.Random(3), 0.41, 20, "mixed")
    _, short = schedule(random.Random(3), 0.5, 11, "unequal")
    assert sorted(short) == spread(20, 80, 11) and statistics.fmean(short) == pytest.approx(50, abs=0.5)


def test_a_strategy_at_base_runs_its_own_alias_on_the_other_checkouts_gateway():
    assert base_checkout("latency_aware@base", "/tmp/main") and not base_checkout("latency_aware", "/tmp/main")
    assert alias("latency_aware@base") == alias("latency_aware")
    assert alias("latency_aware:e2e@base")["stream_objective"] == "e2e"
    with pytest.raises(SystemExit):
        base_checkout("latency_aware@base", None)  # no --base-tree
    with pytest.raises(SystemExit):
        base_checkout("latency_aware@head", "/tmp/main")
