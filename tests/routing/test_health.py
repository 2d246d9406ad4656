"""The breaker ejects on consecutive failures or an error rate, and readmits through one probe."""

from __future__ import annotations

from app.config import BreakerConfig
from app.routing.health import Breaker, BreakerState

CFG = BreakerConfig(consecutive_failures=3, error_rate=0.5, min_requests=10, window_s=10, cooldown_s=1, max_cooldown_s=3)


def test_consecutive_failures_eject():
    b = Breaker(CFG)
    for t in range(2):
        b.record(False, now=t)
    assert b.state is BreakerState.CLOSED
    b.record(False, now=2)
    assert b.state is BreakerState.OPEN
    assert not b.available(2.5)


def test_a_success_resets_the_consecutive_count():
    b = Breaker(CFG)
    for t, ok in enumerate([False, False, True, False, False]):
        b.record(ok, now=t)
    assert b.state is BreakerState.CLOSED


def test_error_rate_over_window_ejects():
    b = Breaker(CFG)
    for t, ok in enumerate([True, False] * 5):
        b.record(ok, now=t * 0.1)
    assert b.state is BreakerState.OPEN


def test_old_failures_age_out_of_the_window():
    b = Breaker(CFG)
    for t, ok in enumerate([False, True] * 4):
        b.record(ok, now=t)
    b.record(True, now=100)
    b.record(True, now=100)
    assert b.state is BreakerState.CLOSED


def test_half_open_admits_one_probe_and_closes_on_success():
    b = Breaker(CFG)
    for t in range(3):
        b.record(False, now=t)
    assert b.available(3.1)  # cooldown 1 s elapsed
    b.on_chosen(3.1)
    assert b.state is BreakerState.HALF_OPEN
    assert not b.available(3.2)  # one probe at a time
    b.record(True, now=3.3)
    assert b.state is BreakerState.CLOSED and b.available(3.4)


def test_failed_probe_reopens_with_a_longer_cooldown_up_to_the_cap():
    b = Breaker(CFG)
    for t in range(3):
        b.record(False, now=t)
    until = []
    now = 2.0
    for _ in range(4):
        until.append(b.open_until - now)
        now = b.open_until
        b.on_chosen(now)
        b.record(False, now=now)
    assert until == [1, 2, 3, 3]


def test_state_changes_are_reported():
    changes = []
    b = Breaker(CFG, on_change=lambda old, new: changes.append(new.value))
    for t in range(3):
        b.record(False, now=t)
    b.on_chosen(10)
    b.record(True, now=10)
    assert changes == ["open", "half_open", "closed"]
