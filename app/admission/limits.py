"""Which limits apply to a call, compiled once per (tenant, key, alias), and what a limiter answers.

A limit is a `Check`: a counter key (the tenant's or the key's scope, and the alias when an override
gave it a counter of its own), a kind and a limit. Limits are never keyed on a backend, so a retry or
fallback cannot find fresh quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.config.limits import Limits, ScopeLimits

# Kinds, in the order OpenAI's headers and errors name them.
REQUESTS = "requests"
TOKENS = "tokens"
CONCURRENT = "concurrent_requests"
BUDGET = "token_budget"


@dataclass(frozen=True, slots=True)
class Check:
    kind: str
    key: str  # the counter's name under the limiter's prefix (no secret in it: keys appear as a digest prefix)
    limit: int
    scope: str  # for people: "tenant acme", "key 1a2b3c4d", with "model gpt-4o" when an override applies
    period: str = ""  # token_budget only: "day" or "month"


@dataclass(frozen=True, slots=True)
class CheckState:
    """A check after admission: what is left and when it is whole again (seconds)."""

    check: Check
    remaining: float
    reset_s: float


@dataclass(slots=True)
class Decision:
    admitted: bool
    states: list[CheckState] = field(default_factory=list)
    denied: Check | None = None
    # Seconds until the denied check could admit this request; None if it never can (larger than
    # the limit) or the wait is unknown (a concurrency limit).
    retry_after_s: float | None = None
    never: bool = False  # the request alone is over the limit: waiting cannot help
    # Budget periods the reservation was charged to, to reconcile the same ones: key -> period id.
    periods: dict[str, str] = field(default_factory=dict)


def key_id(key_sha256: str) -> str:
    """How a client key appears in limiter keys, logs and /admin: a prefix of its digest, never the key."""
    return key_sha256[:12]


def compile_checks(tenant: str, tenant_limits: ScopeLimits, key_id: str | None, key_limits: ScopeLimits | None,
                   alias: str) -> tuple[Check, ...]:
    """Every check a call by this tenant (and key) to this alias must pass."""
    checks: list[Check] = []
    checks += _scope_checks(f"t:{tenant}", f"tenant {tenant}", tenant_limits, alias)
    if key_id is not None and key_limits is not None:
        checks += _scope_checks(f"k:{key_id}", f"key {key_id}", key_limits, alias)
    return tuple(checks)


def _scope_checks(base: str, who: str, limits: ScopeLimits, alias: str) -> list[Check]:
    override = limits.models.get(alias)
    out = []
    for kind, value, period in _kinds(limits, override):
        own = override is not None and _value(override, kind) is not None
        key = f"{base}:m:{alias}:{kind}" if own else f"{base}:{kind}"
        scope = f"{who}, model {alias}" if own else who
        out.append(Check(kind, key, value, scope, period))
    return out


def _kinds(limits: Limits, override: Limits | None):
    for kind in (REQUESTS, TOKENS, CONCURRENT, BUDGET):
        value = _value(override, kind) if override is not None else None
        source = override if override is not None and value is not None else limits
        value = _value(source, kind)
        if value is None:
            continue
        if kind == BUDGET:
            yield kind, value.tokens, value.period
        else:
            yield kind, value, ""


def _value(limits: Limits, kind: str):
    if kind == REQUESTS:
        return limits.requests_per_minute
    if kind == TOKENS:
        return limits.tokens_per_minute
    if kind == CONCURRENT:
        return limits.concurrent_requests
    return limits.token_budget
