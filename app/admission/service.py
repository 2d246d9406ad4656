"""Admission: after auth, before the cache and routing, a call is admitted against its tenant's and
key's limits (or waits, or gets a 429), given its priority, and settled when its answer ends."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from dataclasses import dataclass, field

from app.admission.context import QueueContext
from app.admission.counters import AdmissionCounters
from app.admission.headers import rate_limited, ratelimit_headers
from app.admission.limits import BUDGET, CONCURRENT, TOKENS, Check, CheckState, Decision, compile_checks, key_id
from app.admission.local_limiter import LocalLimiter
from app.admission.priority import PRIORITY_HEADER, Priority, PriorityPolicy
from app.admission.redis_limiter import LimiterDown, RedisLimiter
from app.admission.reserve import reservation
from app.config.limits import LimitsConfig, ScopeLimits
from app.errors import LimiterUnavailable
from app.protocols import ParsedRequest
from app.record import Event, Usage

log = logging.getLogger("slipstream.admission")
# Redis-down lines: at most one per this many seconds, with the count of those held back.
_LOG_EVERY_S = 10.0
# A call over a concurrency limit that may wait re-asks this often (jittered).
_CONCURRENCY_POLL_S = 0.05
# A settlement that fails is tried again after these pauses: a lost one would hold a concurrency slot
# until its lease lapses (lease_ttl_s), and leave the token reservation uncorrected.
_SETTLE_RETRIES_S = (0.2, 1.0, 3.0)


@dataclass(slots=True)
class Admitted:
    """A call let in: what it reserved (its end settles exactly that), the x-ratelimit-* headers every
    answer to it carries, and the span events admission and the wait queue noted for it.

    Admission's answer to the pipeline: it writes nothing into the request's record; the pipeline copies
    the headers and events, and calls `settle` once when the request ends.
    """

    priority: Priority
    checks: tuple[Check, ...] = ()
    request_id: str = ""
    reserved: int = 0
    periods: dict[str, str] = field(default_factory=dict)
    states: list[CheckState] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    label: str = ""  # the tenant's metric label
    admission: Admission | None = field(default=None, repr=False)
    # What the wait queue needs of this request, should it wait for a backend slot (dispatch passes it on).
    queue: QueueContext | None = None

    def settle(self, usage: Usage | None, answered: bool) -> None:
        """The request is over: reconcile the reservation with `usage` and give back a concurrency slot.
        `answered`: a backend answered (without usage, the estimate then stands)."""
        if self.admission is not None:
            self.admission.settle(self, usage, answered)

    def queue_note(self, what: str, waited: float, attrs: dict) -> None:
        """The wait queue's report of this request's wait for a backend slot ("queued" | "shed")."""
        if self.admission is not None:
            self.admission.counters.count(self.label, self.priority.klass, what)
            self.admission.counters.queue_wait(self.label, waited)
        self.events.append(Event(time.perf_counter(), f"queue.{what}", {
            "slipstream.queue.wait_s": round(waited, 4), "slipstream.priority": self.priority.klass,
            "slipstream.priority.level": self.priority.level, **attrs}))


class Admission:
    def __init__(self, limits: LimitsConfig, tenants: dict[str, ScopeLimits], keys: dict[str, tuple[str, ScopeLimits]],
                 configured_tenants: set[str], aliases: tuple[str, ...] = ()) -> None:
        self.config = limits
        self.aliases = aliases
        self.priorities = PriorityPolicy.from_config(limits)
        self._tenants = tenants
        self._keys = keys
        self._weights = {t: p.weight for t, p in limits.tenants.items()}
        self._checks: dict[tuple[str, str | None, str], tuple[Check, ...]] = {}
        self.counters = AdmissionCounters(configured_tenants)
        self.limiter: RedisLimiter | LocalLimiter
        if limits.store == "redis":
            assert limits.redis_url is not None  # the config's validator requires it for this store
            self.limiter = RedisLimiter(limits.redis_url, limits.key_prefix, limits.timeout_ms / 1000,
                                        limits.window_s, limits.lease_ttl_s)
        else:
            self.limiter = LocalLimiter(limits.window_s, limits.lease_ttl_s)
        self._tasks: set[asyncio.Task] = set()
        self._logged_at = 0.0
        self._held_back = 0

    @classmethod
    def from_config(cls, config) -> Admission:
        """From a GatewayConfig: tenant limits from `limits.tenants`, key limits from `auth.clients`."""
        tenants = {t: p.limits for t, p in config.limits.tenants.items() if not p.limits.empty or p.limits.models}
        keys = {key_id(c.key_sha256): (c.tenant, c.limits) for c in config.auth.clients if not c.limits.empty or c.limits.models}
        known = {c.tenant for c in config.auth.clients} | {config.auth.open_tenant}
        return cls(config.limits, tenants, keys, known, tuple(config.models))

    def adopt(self, old: Admission) -> None:
        """Carry state over a config reload: counters, and the in-process counters if both keep them."""
        self.counters = old.counters.with_tenants(self.counters.tenants)
        if isinstance(old.limiter, LocalLimiter) and isinstance(self.limiter, LocalLimiter):
            old.limiter.window_s, old.limiter.lease_ttl_s = self.limiter.window_s, self.limiter.lease_ttl_s
            self.limiter = old.limiter

    def checks_for(self, tenant: str, key: str | None, alias: str) -> tuple[Check, ...]:
        entry = (tenant, key, alias)
        checks = self._checks.get(entry)
        if checks is None:
            own = self._tenants.get(tenant)
            mine = self._keys.get(key) if key else None
            checks = compile_checks(tenant, own or ScopeLimits(), key, mine[1] if mine else None, alias)
            self._checks[entry] = checks
        return checks

    async def admit(self, tenant, req: ParsedRequest, headers: dict[str, str], deadline, request_id: str,
                    events: list[Event] | None = None) -> Admitted:
        """Admit the call or raise RateLimited (429) / LimiterUnavailable (503); sets its queue context.

        `events`, when given, is where its span events go (a refused call has no Admitted to carry them).
        """
        priority = self.priorities.resolve(tenant.name, headers.get(PRIORITY_HEADER))
        label = self.counters.tenant_label(tenant.name)
        admitted = Admitted(priority, request_id=request_id, label=label, admission=self,
                            events=events if events is not None else [])
        admitted.queue = QueueContext(tenant.name, priority, self._weights.get(tenant.name, 1.0),
                                      deadline.at if deadline.at is not None else math.inf, admitted.queue_note)
        checks = self.checks_for(tenant.name, tenant.key_id, req.alias)
        if not checks:
            self.counters.count(label, priority.klass, "admitted")
            return admitted
        tokens = reservation(req, self.config.expected_output(req.alias))
        started = time.monotonic()
        while True:
            try:
                decision = await self.limiter.admit(checks, request_id, tokens)
            except LimiterDown as exc:
                return self._limiter_down(exc, admitted, label)
            if decision.admitted:
                break
            denied = decision.denied
            assert denied is not None  # a refusal names its check
            wait = self._may_wait(decision, started, deadline)
            if wait is None:
                self.counters.limited(label, priority.klass, denied.kind)
                admitted.events.append(Event(time.perf_counter(), "ratelimit.limited", {
                    "slipstream.ratelimit.limit": denied.kind, "slipstream.ratelimit.scope": denied.scope,
                    "slipstream.ratelimit.retry_after_s": round(decision.retry_after_s or 0.0, 3),
                    "slipstream.priority": priority.klass}))
                raise rate_limited(decision, tokens, req.protocol)
            admitted.events.append(Event(time.perf_counter(), "ratelimit.wait", {
                "slipstream.ratelimit.limit": denied.kind, "slipstream.ratelimit.wait_s": round(wait, 3)}))
            self.counters.count(label, priority.klass, "waited")
            await asyncio.sleep(wait)
        self.counters.count(label, priority.klass, "admitted")
        admitted.checks, admitted.reserved = checks, tokens
        admitted.periods, admitted.states = decision.periods, decision.states
        admitted.headers = ratelimit_headers(decision.states, req.protocol)
        return admitted

    def _may_wait(self, decision: Decision, started: float, deadline) -> float | None:
        """How long to wait before asking again, if the config and the deadline allow; else None."""
        if decision.never or self.config.max_wait_s <= 0:
            return None
        wait = decision.retry_after_s
        if wait is None:  # a concurrency slot: no way to know when, so look again soon
            wait = _CONCURRENCY_POLL_S
        wait *= 1 + random.random() * 0.1  # replicas waiting on one bucket do not all ask at once
        left = min(self.config.max_wait_s - (time.monotonic() - started), deadline.remaining())
        return wait if wait <= left else None

    def _limiter_down(self, exc: LimiterDown, admitted: Admitted, label: str) -> Admitted:
        policy = self.config.on_redis_error
        self.counters.limiter_error(policy)
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            log.warning("rate limiter store unavailable (%s); failing %s%s", exc, policy,
                        f" ({self._held_back} more since the last line)" if self._held_back else "")
            self._logged_at, self._held_back = now, 0
        else:
            self._held_back += 1
        admitted.events.append(Event(time.perf_counter(), "ratelimit.store_unavailable", {"slipstream.ratelimit.policy": policy}))
        if policy == "closed":
            raise LimiterUnavailable("the rate limiter is unavailable; try again shortly",
                                     headers={"retry-after": "1", "x-should-retry": "true"})
        self.counters.count(label, admitted.priority.klass, "admitted")
        return admitted

    def settle(self, admitted: Admitted, usage: Usage | None, answered: bool) -> None:
        """Reconcile the reservation with the reported usage and give back the concurrency slot."""
        if not admitted.checks:
            return  # nothing was reserved
        if usage is not None:
            used = usage.prompt_tokens + usage.completion_tokens
        elif answered:
            used = admitted.reserved  # an answer came but with no usage: the estimate stands
        else:
            used = 0  # no backend answered (or a cache hit): nothing was consumed
        kinds = {c.kind for c in admitted.checks}
        if CONCURRENT not in kinds and (used == admitted.reserved or not kinds & {TOKENS, BUDGET}):
            return  # nothing to correct, no slot to give back: no second call to the store
        task = asyncio.get_running_loop().create_task(self._settle(admitted, used))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, admitted: Admitted, used: int) -> None:
        for pause in (*_SETTLE_RETRIES_S, None):
            try:
                await self.limiter.settle(admitted.checks, admitted.request_id, admitted.reserved, used, admitted.periods)
                return
            except LimiterDown as exc:
                self.counters.limiter_error("settle")
                if pause is None:
                    # The concurrency slot then lapses with its lease; the token correction is lost.
                    log.debug("could not settle %s: %s", admitted.request_id, exc)
                    return
                await asyncio.sleep(pause)

    async def usage(self) -> dict:
        """Each limited tenant's and key's current state, for /admin/tenants."""
        every: dict[str, Check] = {}
        owners: dict[str, str] = {}
        for alias in self.aliases:
            for tenant in self._tenants:
                for c in self.checks_for(tenant, None, alias):
                    every[c.key], owners[c.key] = c, tenant
            for key, (tenant, _) in self._keys.items():
                for c in self.checks_for(tenant, key, alias):
                    every.setdefault(c.key, c)
                    owners.setdefault(c.key, tenant)
        out: dict = {}
        if not every:
            return out
        try:
            states = await self.limiter.peek(tuple(every.values()))
        except LimiterDown as exc:
            return {"error": f"limiter store unavailable: {exc}"}
        for s in states:
            out.setdefault(owners[s.check.key], {}).setdefault(s.check.scope, {})[s.check.kind] = _state_view(s)
        return out

    async def settled(self, timeout_s: float = 5.0) -> None:
        """Wait (at most `timeout_s`) for the settlements still running or retrying."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    async def aclose(self) -> None:
        await self.settled()
        await self.limiter.aclose()


def _state_view(s: CheckState) -> dict:
    c = s.check
    view: dict[str, int | float | str] = {"limit": c.limit}
    if c.kind == "concurrent_requests":
        view["in_use"] = int(c.limit - s.remaining)
    elif c.kind == "token_budget":
        view.update(used=int(c.limit - s.remaining), period=c.period, resets_in_s=round(s.reset_s, 1))
    else:
        view.update(remaining=max(0, math.floor(s.remaining)), resets_in_s=round(s.reset_s, 3))
    return view
