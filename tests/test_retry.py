"""Which failures are retried, which fall back, and how much retrying the budget allows."""

from __future__ import annotations

from app.config import RetryBudget, RetryPolicy
from app.dispatch.decide import (
    RetryBudgetTracker,
    is_context_length,
    is_retryable,
    warrants_fallback,
)
from app.errors import (
    InvalidRequest,
    UpstreamProtocolError,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
    counts_against_backend,
)

POLICY = RetryPolicy()


def status(code: int, message: str = "x") -> UpstreamStatus:
    return UpstreamStatus(message, status=code)


def test_retryable_failures():
    assert is_retryable(UpstreamUnreachable("x"), POLICY)
    assert is_retryable(UpstreamProtocolError("x"), POLICY)
    assert is_retryable(UpstreamTimeout("x", code="first_token_timeout"), POLICY)
    assert is_retryable(UpstreamTimeout("x", code="connect_timeout"), POLICY)
    for code in (429, 500, 502, 503, 504):
        assert is_retryable(status(code), POLICY)


def test_not_retried():
    assert not is_retryable(status(400), POLICY)
    assert not is_retryable(status(404), POLICY)
    assert not is_retryable(UpstreamTimeout("x", code="upstream_timeout"), POLICY)  # a long call: fall back instead
    assert not is_retryable(UpstreamTimeout("x", code="deadline_exceeded"), POLICY)
    assert not is_retryable(InvalidRequest("x"), POLICY)


def test_fallback_on_backend_failures_only():
    assert warrants_fallback(status(503)) and warrants_fallback(status(429))
    assert warrants_fallback(UpstreamTimeout("x", code="upstream_timeout"))
    assert not warrants_fallback(status(400))
    assert not warrants_fallback(UpstreamTimeout("x", code="deadline_exceeded"))


def test_context_length_messages_of_real_servers():
    vllm = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"
    tgi = "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens"
    llamacpp = "the request exceeds the available context size, try increasing it"
    for message, code in ((vllm, 400), (tgi, 422), (llamacpp, 400)):
        assert is_context_length(status(code, message))
    assert not is_context_length(status(400, "temperature must be between 0 and 2"))
    assert not is_context_length(status(500, vllm))


def test_429_and_client_errors_do_not_count_against_a_backend():
    assert not counts_against_backend(status(429))
    assert not counts_against_backend(status(400))
    assert counts_against_backend(status(502))
    assert counts_against_backend(UpstreamTimeout("x", code="first_token_timeout"))


def test_budget_allows_ratio_of_recent_requests_plus_a_floor():
    budget = RetryBudgetTracker(RetryBudget(ratio=0.2, min_per_s=0.1, window_s=10))
    for _ in range(50):
        budget.on_request(now=0)
    granted = sum(budget.try_spend(now=1) for _ in range(100))
    assert granted == 10 + 1  # 20 % of 50, plus 0.1/s over 10 s
    assert budget.denied == 89


def test_budget_refills_as_the_window_slides():
    budget = RetryBudgetTracker(RetryBudget(ratio=0.5, min_per_s=0, window_s=10))
    for _ in range(4):
        budget.on_request(now=0)
    assert sum(budget.try_spend(now=1) for _ in range(5)) == 2
    for _ in range(4):
        budget.on_request(now=20)
    assert sum(budget.try_spend(now=21) for _ in range(5)) == 2
