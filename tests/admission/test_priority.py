"""Priority comes from x-slipstream-priority, else the tenant's default, else the configured default."""

from __future__ import annotations

import pytest

from app.admission.priority import BATCH_LEVEL, INTERACTIVE_LEVEL, PriorityPolicy, level_of
from app.config.limits import LimitsConfig
from app.errors import InvalidRequest


def test_names_and_digits_map_to_levels():
    assert level_of("interactive") == INTERACTIVE_LEVEL
    assert level_of(" Batch ") == BATCH_LEVEL
    assert level_of("0") == 0 and level_of("9") == 9
    assert level_of("10") is None and level_of("-1") is None and level_of("urgent") is None


def test_header_wins_over_tenant_default():
    policy = PriorityPolicy("interactive", {"etl": "batch"})
    p = policy.resolve("etl", "interactive")
    assert p.level == INTERACTIVE_LEVEL and p.source == "header" and not p.sheddable


def test_tenant_default_applies_without_header():
    policy = PriorityPolicy("interactive", {"etl": "batch"})
    p = policy.resolve("etl", None)
    assert p.klass == "batch" and p.sheddable and p.source == "tenant"
    assert policy.resolve("acme", None).klass == "interactive"


def test_numeric_levels_split_into_two_classes():
    policy = PriorityPolicy()
    assert policy.resolve("t", "4").klass == "interactive"
    assert policy.resolve("t", "5").klass == "batch"


def test_bad_header_is_a_400_naming_the_header():
    with pytest.raises(InvalidRequest) as exc:
        PriorityPolicy().resolve("t", "urgent")
    assert exc.value.param == "x-slipstream-priority" and exc.value.status == 400


def test_policy_from_config():
    config = LimitsConfig.model_validate({"default_priority": "batch", "tenants": {"web": {"priority": "1"}}})
    policy = PriorityPolicy.from_config(config)
    assert policy.resolve("web", None).level == 1
    assert policy.resolve("other", None).level == BATCH_LEVEL
