"""Rate-limit state for the client: its headers (named by the client protocol), and the 429 that names the limit.

OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` with every answer; the resets
are Go-style durations ("1s", "6m0s", "17ms"). On a 429 the SDKs honour `retry-after-ms`, then
`Retry-After`, and `x-should-retry` before their own rules.
"""

from __future__ import annotations

import math

from app.admission.limits import BUDGET, CONCURRENT, REQUESTS, TOKENS, CheckState, Decision
from app.errors import RateLimited
from app.protocols import CHAT, ClientProtocol, LimitFigure
from app.protocols.openai import duration

_WHAT = {
    REQUESTS: "requests per minute",
    TOKENS: "tokens per minute",
    CONCURRENT: "concurrent requests",
    BUDGET: "token budget",
}
# The SDKs wait at most about a minute on their own; past that, tell them not to retry.
_SDK_MAX_WAIT_S = 60.0


def limit_figures(states: list[CheckState]) -> list[LimitFigure]:
    """The tightest request and token limits that apply, as the client protocol names them in headers."""
    out = []
    for kind in (REQUESTS, TOKENS):
        mine = [s for s in states if s.check.kind == kind]
        if not mine:
            continue
        tight = min(mine, key=lambda s: s.remaining / s.check.limit)
        out.append(LimitFigure(kind, tight.check.limit, max(0, math.floor(tight.remaining)), tight.reset_s))
    return out


def ratelimit_headers(states: list[CheckState], protocol: ClientProtocol = CHAT) -> dict[str, str]:
    """The rate-limit headers (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*) of the limits."""
    return protocol.ratelimit_headers(limit_figures(states))


def rate_limited(decision: Decision, requested_tokens: int, protocol: ClientProtocol = CHAT) -> RateLimited:
    """The 429 for a refused admission: names the limit and scope, says when to come back."""
    check = decision.denied
    assert check is not None
    what = _WHAT[check.kind]
    if check.kind == BUDGET:
        what = {"day": "daily", "month": "monthly"}.get(check.period, check.period) + " token budget"
    requested = 1 if check.kind in (REQUESTS, CONCURRENT) else requested_tokens
    if decision.never:
        message = (f"Request too large for {what} ({check.scope}): limit {check.limit}, requested {requested}. "
                   "Reduce the prompt or max_tokens.")
    else:
        message = f"Rate limit reached for {what} ({check.scope}): limit {check.limit}, requested {requested}."
        if check.kind == BUDGET:
            message = f"Token budget exhausted: {what} ({check.scope}) of {check.limit} tokens, requested {requested}."
    wait = decision.retry_after_s
    if wait is None and not decision.never:
        wait = 1.0  # a concurrency slot: when one frees is unknown
    headers = ratelimit_headers(decision.states, protocol)
    if wait is not None and not decision.never:
        message += f" Please try again in {duration(wait)}."
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
    retry = not decision.never and wait is not None and wait <= _SDK_MAX_WAIT_S
    headers["x-should-retry"] = "true" if retry else "false"
    err = RateLimited(message, headers=headers)
    if check.kind == BUDGET:
        # OpenAI's answer for a spent quota; clients treat it as "do not retry soon".
        err.type, err.code = "insufficient_quota", "insufficient_quota"
    else:
        err.type = {REQUESTS: "requests", TOKENS: "tokens", CONCURRENT: "concurrent_requests"}[check.kind]
    err.param = None
    return err
