"""Admission counters by tenant, read by Prometheus at scrape time; they carry over a config reload.

Tenant labels come only from configured tenants (anything else counts as `other`), and priority
labels only from the two classes, so the series stay bounded whatever clients send.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

OTHER = "other"


class AdmissionCounters:
    def __init__(self, tenants: set[str]) -> None:
        self.tenants = frozenset(tenants)
        self.requests: Counter[tuple[str, str, str]] = Counter()  # (tenant, priority class, result)
        self.limited_by: Counter[tuple[str, str]] = Counter()  # (tenant, limit kind)
        self.wait_s: defaultdict[str, float] = defaultdict(float)  # tenant -> seconds spent in the wait queue
        self.errors: Counter[str] = Counter()  # policy (open / closed / settle) -> limiter store failures

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self.tenants else OTHER

    def count(self, tenant: str, klass: str, result: str) -> None:
        self.requests[(tenant, klass, result)] += 1

    def limited(self, tenant: str, klass: str, kind: str) -> None:
        self.requests[(tenant, klass, "limited")] += 1
        self.limited_by[(tenant, kind)] += 1

    def queue_wait(self, tenant: str, seconds: float) -> None:
        self.wait_s[tenant] += seconds

    def limiter_error(self, policy: str) -> None:
        self.errors[policy] += 1

    def with_tenants(self, tenants: frozenset[str]) -> AdmissionCounters:
        """These counts under a new set of configured tenants (after a reload)."""
        self.tenants = frozenset(tenants)
        return self

    def families(self, queued_by_tenant: dict[str, int]):
        """Prometheus metric families (counters get their _total suffix from the client library)."""
        requests = CounterMetricFamily(
            "slipstream_admission_requests", "Calls by tenant, priority class and admission result "
            "(admitted, limited, waited, queued, shed).", labels=["tenant", "priority", "result"])
        for (tenant, klass, result), n in sorted(self.requests.items()):
            requests.add_metric([tenant, klass, result], n)
        limited = CounterMetricFamily("slipstream_rate_limited", "Calls refused with 429, by tenant and the limit that refused them.",
                                      labels=["tenant", "limit"])
        for (tenant, kind), n in sorted(self.limited_by.items()):
            limited.add_metric([tenant, kind], n)
        wait = CounterMetricFamily("slipstream_admission_queue_wait_seconds", "Time calls spent waiting for a backend slot, by tenant.",
                                   labels=["tenant"])
        for tenant, s in sorted(self.wait_s.items()):
            wait.add_metric([tenant], s)
        errors = CounterMetricFamily("slipstream_limiter_errors", "Rate-limiter store failures, by what was done (open, closed, settle).",
                                     labels=["policy"])
        for policy, n in sorted(self.errors.items()):
            errors.add_metric([policy], n)
        queued = GaugeMetricFamily("slipstream_admission_queued", "Calls waiting for a backend slot now, by tenant.", labels=["tenant"])
        by_label: Counter[str] = Counter()
        for tenant, n in queued_by_tenant.items():
            by_label[self.tenant_label(tenant)] += n
        for tenant, n in sorted(by_label.items()):
            queued.add_metric([tenant], n)
        return requests, limited, wait, errors, queued
