"""429s and x-ratelimit-* headers carry OpenAI's names and formats."""

from __future__ import annotations

from app.admission.headers import duration, rate_limited, ratelimit_headers
from app.admission.limits import BUDGET, CONCURRENT, REQUESTS, TOKENS, Check, CheckState, Decision


def test_durations_are_go_style_as_openai_sends_them():
    assert duration(0.017) == "17ms"
    assert duration(1) == "1s"
    assert duration(1.5) == "1.5s"
    assert duration(360) == "6m0s"
    assert duration(3723) == "1h2m3s"


def test_headers_report_the_tightest_limit_of_each_kind():
    states = [
        CheckState(Check(REQUESTS, "t", 100, "tenant a"), 50, 30),
        CheckState(Check(REQUESTS, "k", 10, "key k"), 2.7, 44.5),
        CheckState(Check(TOKENS, "t", 1000, "tenant a"), -20, 61),
    ]
    h = ratelimit_headers(states)
    assert h["x-ratelimit-limit-requests"] == "10" and h["x-ratelimit-remaining-requests"] == "2"
    assert h["x-ratelimit-reset-requests"] == "44.5s"
    assert h["x-ratelimit-remaining-tokens"] == "0" and h["x-ratelimit-reset-tokens"] == "1m1s"


def test_a_429_names_the_limit_and_says_when():
    check = Check(TOKENS, "t", 1000, "tenant acme")
    err = rate_limited(Decision(False, [CheckState(check, 10, 59)], check, retry_after_s=2.4), 50)
    body = err.body()["error"]
    assert err.status == 429 and body["code"] == "rate_limit_exceeded" and body["type"] == "tokens"
    assert "tokens per minute (tenant acme)" in body["message"] and "2.4s" in body["message"]
    assert err.headers["retry-after"] == "3" and err.headers["retry-after-ms"] == "2400"
    assert err.headers["x-should-retry"] == "true" and err.headers["x-ratelimit-remaining-tokens"] == "10"


def test_a_request_over_the_whole_limit_is_told_not_to_retry():
    check = Check(TOKENS, "t", 1000, "tenant acme")
    err = rate_limited(Decision(False, [], check, never=True), 5000)
    assert err.headers["x-should-retry"] == "false" and "retry-after" not in err.headers
    assert "Request too large" in err.message


def test_a_spent_budget_is_insufficient_quota_until_the_period_ends():
    check = Check(BUDGET, "t", 10_000, "tenant acme", "day")
    err = rate_limited(Decision(False, [], check, retry_after_s=7200), 100)
    assert err.status == 429 and err.code == "insufficient_quota" and "daily token budget" in err.message
    assert err.headers["retry-after"] == "7200" and err.headers["x-should-retry"] == "false"


def test_a_concurrency_refusal_asks_to_come_back_in_a_second():
    check = Check(CONCURRENT, "c", 2, "key 1a2b")
    err = rate_limited(Decision(False, [], check), 1)
    assert err.type == "concurrent_requests" and err.headers["retry-after"] == "1"
