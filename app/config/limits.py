"""Typed config for tenant limits, priorities and the shared limiter (the `limits` section).

Plain pydantic data, kept with the rest of the typed config so that the config layer imports nothing above it
(admission reads it; it does not define it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.config.urls import checked_redis_url, one_redis_source

_Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$", max_length=128)]
# `interactive`, `batch`, or a level 0 (served first) .. 9 (served last), as in vLLM's `priority`.
PriorityName = Annotated[str, Field(pattern=r"^(interactive|batch|[0-9])$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenBudget(_Strict):
    """Tokens (input plus output) a scope may use per calendar day or month (UTC)."""

    tokens: int = Field(gt=0)
    period: Literal["day", "month"] = "day"


class Limits(_Strict):
    """Limits of one scope; an unset field is no limit."""

    requests_per_minute: int | None = Field(None, gt=0)
    # Input plus output tokens: reserved at admission (prompt estimate + max_tokens, or the alias's
    # expected output), reconciled with the reported usage when the answer ends.
    tokens_per_minute: int | None = Field(None, gt=0)
    concurrent_requests: int | None = Field(None, gt=0)
    token_budget: TokenBudget | None = None

    @property
    def empty(self) -> bool:
        return not (self.requests_per_minute or self.tokens_per_minute or self.concurrent_requests or self.token_budget)


class ScopeLimits(Limits):
    """A tenant's or a key's limits, with per-alias overrides.

    An override replaces the scope-wide limit of that kind for calls to that alias, with a counter of
    its own: `models: {gpt-4o: {requests_per_minute: 10}}` gives gpt-4o 10 a minute, apart from the rest.
    """

    models: dict[_Name, Limits] = {}


class TenantPolicy(_Strict):
    limits: ScopeLimits = ScopeLimits()
    # The priority of this tenant's requests that send no x-slipstream-priority header.
    priority: PriorityName | None = None
    # Its share of saturated backends against other tenants (weighted fair queuing).
    weight: float = Field(1.0, gt=0, le=1000)


class QueuePolicy(_Strict):
    # Requests waiting for a backend slot (all aliases) before the least important one is shed.
    max_waiting: int = Field(1024, ge=1)
    # Weighted fair queuing across tenants within a priority level; off = first come, first served
    # (then deadline) within a level (bench/priority.py compares the two).
    fair: bool = True


class LimitsConfig(_Strict):
    # memory: in-process counters (one replica, the embedded default); redis: shared by every replica.
    store: Literal["memory", "redis"] = "memory"
    # The URL as written, or the environment variable that holds it (resolved into redis_url at load time).
    redis_url: str | None = Field(None, repr=False)
    redis_url_env: str | None = Field(None, min_length=1)
    _redis_url = field_validator("redis_url")(checked_redis_url)
    # A Redis call slower than this counts as Redis down (connecting may take up to 1 s, once).
    timeout_ms: float = Field(100.0, gt=0)
    # Redis down: `open` admits (with a rate-limited log line and a metric), `closed` answers 503.
    on_redis_error: Literal["open", "closed"] = "open"
    key_prefix: str = "slipstream:rl:"
    # Length of the "minute" in the per-minute limits (a token bucket that refills limit per window
    # and holds at most one window's worth). Only tests and odd setups change it.
    window_s: float = Field(60.0, gt=0)
    # A concurrency slot is given back when its request ends; this bounds how long one outlives a
    # replica that died mid-request.
    lease_ttl_s: float = Field(900.0, gt=0)
    # Over a rate limit, wait up to this long (within the request's deadline) instead of answering 429.
    max_wait_s: float = Field(0.0, ge=0)
    # Output tokens reserved for a request without max_tokens, per alias (`default` for the rest).
    expected_output_tokens: dict[str, int] = {"default": 256}
    default_priority: PriorityName = "interactive"
    tenants: dict[_Name, TenantPolicy] = {}
    queue: QueuePolicy = QueuePolicy()

    @model_validator(mode="after")
    def _redis_needs_url(self) -> LimitsConfig:
        one_redis_source(self.redis_url, self.redis_url_env)
        if self.store == "redis" and not (self.redis_url or self.redis_url_env):
            raise ValueError("store 'redis' needs redis_url (or redis_url_env)")
        for alias, n in self.expected_output_tokens.items():
            if n < 0:
                raise ValueError(f"expected_output_tokens.{alias} must not be negative")
        return self

    def expected_output(self, alias: str) -> int:
        table = self.expected_output_tokens
        return table.get(alias, table.get("default", 256))
