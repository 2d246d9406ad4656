"""The retry/fallback decision is a pure function: each row is (error, situation) -> what to do."""

from __future__ import annotations

import pytest

from app.config import RetryPolicy
from app.dispatch.decide import Action, Situation, decide, is_poison
from app.errors import (
    InvalidRequest,
    Overloaded,
    UpstreamMisconfigured,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
)

POLICY = RetryPolicy(max_attempts=3, backoff_base_s=0.1, backoff_max_s=1.0)


def situation(**kw) -> Situation:
    base = dict(attempts=1, policy=POLICY, remaining_s=float("inf"), budget_left=True, other_backend=True,
                all_limited=False, next_alias="small", context_fallback=None, jitter=0.5)
    return Situation(**{**base, **kw})


def status(code: int, message: str = "x", retry_after: str | None = None) -> UpstreamStatus:
    err = UpstreamStatus(message, status=code)
    if retry_after:
        err.headers["retry-after"] = retry_after
    return err


CONTEXT = status(400, "This model's maximum context length is 4096 tokens")

TABLE = [
    # error, situation overrides, expected action, expected wait
    (UpstreamUnreachable("down"), {}, Action.RETRY_OTHER, 0.05),
    (UpstreamUnreachable("down"), {"other_backend": False}, Action.RETRY_SAME, 0.05),
    (UpstreamUnreachable("down"), {"attempts": 2}, Action.RETRY_OTHER, 0.1),
    (UpstreamUnreachable("down"), {"attempts": 3}, Action.FALL_BACK, 0.0),
    (UpstreamUnreachable("down"), {"attempts": 3, "next_alias": None}, Action.GIVE_UP, 0.0),
    (UpstreamUnreachable("down"), {"budget_left": False}, Action.FALL_BACK, 0.0),
    (UpstreamUnreachable("down"), {"remaining_s": 0.0}, Action.GIVE_UP, 0.0),
    (UpstreamUnreachable("down"), {"remaining_s": 0.01}, Action.RETRY_OTHER, 0.01),  # the wait never outlasts it
    (status(503), {}, Action.RETRY_OTHER, 0.05),
    (status(400), {}, Action.GIVE_UP, 0.0),  # the request's fault: nothing else would answer it
    (status(404), {}, Action.GIVE_UP, 0.0),
    (InvalidRequest("nested too deep"), {}, Action.GIVE_UP, 0.0),
    (CONTEXT, {}, Action.GIVE_UP, 0.0),
    (CONTEXT, {"context_fallback": "long"}, Action.FALL_BACK, 0.0),
    # Retry-After binds only when every backend is cooling down; one past the deadline means no retry.
    (status(429, retry_after="0.7"), {}, Action.RETRY_OTHER, 0.05),
    (status(429, retry_after="0.7"), {"all_limited": True}, Action.RETRY_OTHER, 0.7),
    (status(429, retry_after="5"), {"all_limited": True, "remaining_s": 2.0}, Action.FALL_BACK, 0.0),
    (UpstreamTimeout("late", code="first_token_timeout"), {}, Action.RETRY_OTHER, 0.05),
    (UpstreamTimeout("late", code="upstream_timeout"), {}, Action.FALL_BACK, 0.0),  # the total is spent
    (UpstreamTimeout("late", code="deadline_exceeded"), {}, Action.GIVE_UP, 0.0),
    (UpstreamMisconfigured("bad key"), {}, Action.RETRY_OTHER, 0.05),  # another backend may hold a good key
    (Overloaded("full"), {}, Action.FALL_BACK, 0.0),
]


@pytest.mark.parametrize("err,overrides,action,wait", TABLE, ids=[f"{type(r[0]).__name__}-{i}" for i, r in enumerate(TABLE)])
def test_decision_table(err, overrides, action, wait):
    d = decide(err, situation(**overrides))
    assert d.action is action
    assert d.wait_s == pytest.approx(wait)


def test_fallback_names_its_target_and_reason():
    d = decide(status(503), situation(attempts=3))
    assert (d.target, d.reason) == ("small", "status_503")
    d = decide(CONTEXT, situation(context_fallback="long"))
    assert (d.target, d.reason) == ("long", "context_length")


def test_poison_is_the_same_5xx_on_every_backend():
    assert is_poison([("a", status(500)), ("b", status(500))])
    assert not is_poison([("a", status(500))])  # one backend alone cannot tell the request from the backend
    assert not is_poison([("a", status(500)), ("b", status(503))])
    assert is_poison([("a", status(501))])  # an endpoint the server does not implement
    adapter_says = status(500)
    adapter_says.request_caused = True
    assert is_poison([("a", adapter_says)])
