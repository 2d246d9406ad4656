"""What an attempt's end says of its backend (a failure, a busy backend, a wait routing priced, or
nothing against it), and the breaker: it ejects on consecutive failures or an error rate, and readmits
through one probe."""

from __future__ import annotations

import pytest

from app.config import BreakerConfig
from app.errors import FirstTokenTimeout, InvalidRequest, UpstreamStatus, UpstreamTimeout, UpstreamUnreachable
from app.routing.health import PRICED_SHARE, Breaker, BreakerState, Verdict, verdict

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


def test_a_first_token_timeout_on_a_wait_predicted_near_the_limit_is_the_wait_routing_priced():
    # Queued behind long prefills routing had booked there: 45 s predicted, no first token by 60 s. That
    # slowness is in the prediction already; counted as a failure too, it was charged twice.
    assert verdict(FirstTokenTimeout("slow", 60.0), predicted_wait_s=45.0) is Verdict.PRICED_WAIT
    assert verdict(FirstTokenTimeout("slow", 60.0), predicted_wait_s=PRICED_SHARE * 60.0) is Verdict.PRICED_WAIT
    assert verdict(FirstTokenTimeout("slow", 60.0), predicted_wait_s=90.0) is Verdict.PRICED_WAIT


def test_a_first_token_timeout_far_beyond_its_prediction_is_a_failure():
    # How a hung backend looks: a prefill of a second predicted, nothing in a minute.
    assert verdict(FirstTokenTimeout("hung", 60.0), predicted_wait_s=1.2) is Verdict.FAILED
    assert verdict(FirstTokenTimeout("hung", 60.0), predicted_wait_s=0.0) is Verdict.FAILED  # no queue, no prefill
    assert verdict(FirstTokenTimeout("hung", 60.0), predicted_wait_s=0.49 * 60.0) is Verdict.FAILED
    assert verdict(FirstTokenTimeout("hung", 60.0), predicted_wait_s=None) is Verdict.FAILED  # nothing predicted


@pytest.mark.parametrize(("err", "seen"), [
    (None, Verdict.SOUND),
    (UpstreamStatus("busy", status=429), Verdict.BUSY),
    (UpstreamStatus("broken", status=503), Verdict.FAILED),
    (UpstreamUnreachable("refused"), Verdict.FAILED),
    (UpstreamTimeout("slow", code="upstream_timeout"), Verdict.FAILED),
    (UpstreamTimeout("spent", code="stream_idle_timeout"), Verdict.FAILED),
    (UpstreamTimeout("the client's budget", code="deadline_exceeded"), Verdict.SOUND),
    (InvalidRequest("bad request"), Verdict.SOUND),
])
def test_other_ends_are_judged_as_before_whatever_was_predicted(err, seen):
    # Only a first-token timeout is weighed against the prediction: a wait cut off mid-stream or at the
    # whole attempt's limit is not the queue routing priced.
    assert verdict(err, predicted_wait_s=500.0) is seen


def test_a_first_token_timeout_says_which_limit_it_reached():
    err = FirstTokenTimeout("slow", 12.5)
    assert err.limit_s == 12.5 and err.code == "first_token_timeout" and err.status == 504
    assert isinstance(err, UpstreamTimeout)
    assert err.message == "backend slow sent no first token within 12.5s"


def test_an_inconclusive_probe_lets_the_next_call_probe_and_counts_nothing():
    b = Breaker(CFG)
    for t in range(3):
        b.record(False, now=t)
    b.on_chosen(3.1)
    assert not b.available(3.2)  # the probe is out
    b.inconclusive()  # it ended in a wait routing priced: no news of the backend's health
    assert b.state is BreakerState.HALF_OPEN and b.available(3.3)
    b.on_chosen(3.3)
    b.record(True, now=3.4)
    assert b.state is BreakerState.CLOSED


def test_an_inconclusive_end_while_closed_neither_resets_nor_adds_to_the_failures():
    b = Breaker(CFG)
    b.record(False, now=0)
    b.record(False, now=1)
    b.inconclusive()
    assert b.state is BreakerState.CLOSED
    b.record(False, now=2)  # the third failure in a row: the priced wait between them did not reset the count
    assert b.state is BreakerState.OPEN
