"""A request's priority: `x-slipstream-priority: interactive | batch | 0-9`, else its tenant's default.

Levels run from 0 (served first) to 9 (served last), as vLLM's `priority` does; `interactive` is 2
and `batch` is 7, which leaves room on both sides. Levels 5 and up are the batch class: they wait
behind the interactive class for a backend slot and are shed first when the wait queue is full.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import InvalidRequest

PRIORITY_HEADER = "x-slipstream-priority"
INTERACTIVE_LEVEL = 2
BATCH_LEVEL = 7
BATCH_FROM = 5
CLASSES = ("interactive", "batch")
_NAMED = {"interactive": INTERACTIVE_LEVEL, "batch": BATCH_LEVEL}


@dataclass(frozen=True, slots=True)
class Priority:
    level: int
    source: str = "default"  # "header", "tenant" or "default": where the level came from

    @property
    def klass(self) -> str:
        """`interactive` or `batch`: the bounded label metrics and spans use."""
        return "batch" if self.level >= BATCH_FROM else "interactive"

    @property
    def sheddable(self) -> bool:
        """Whether this request may be refused early to keep capacity for more urgent ones."""
        return self.level >= BATCH_FROM


INTERACTIVE = Priority(INTERACTIVE_LEVEL)
BATCH = Priority(BATCH_LEVEL)


def level_of(value: str) -> int | None:
    """The level a priority name or digit stands for; None if it is neither."""
    value = value.strip().lower()
    if value in _NAMED:
        return _NAMED[value]
    if len(value) == 1 and value.isdigit():
        return int(value)
    return None


class PriorityPolicy:
    """Resolves a request's priority from its header and its tenant's default; built once from config."""

    def __init__(self, default: str = "interactive", tenant_defaults: dict[str, str] | None = None) -> None:
        self._default = Priority(_must(default), "default")
        self._tenants = {t: Priority(_must(v), "tenant") for t, v in (tenant_defaults or {}).items()}

    @classmethod
    def from_config(cls, limits) -> PriorityPolicy:
        """From a LimitsConfig (app.config.limits)."""
        return cls(limits.default_priority, {t: p.priority for t, p in limits.tenants.items() if p.priority})

    def resolve(self, tenant: str, header: str | None) -> Priority:
        """The header's priority if sent (a bad value is the client's error), else the tenant's default."""
        if header is not None:
            level = level_of(header)
            if level is None:
                raise InvalidRequest(
                    f"{PRIORITY_HEADER} must be 'interactive', 'batch' or a level 0-9 (0 is served first)",
                    param=PRIORITY_HEADER,
                )
            return Priority(level, "header")
        return self._tenants.get(tenant, self._default)


def _must(value: str) -> int:
    level = level_of(value)
    if level is None:
        raise ValueError(f"not a priority: {value!r}")
    return level
