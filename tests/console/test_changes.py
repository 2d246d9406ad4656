"""Config changes from the console: validated, written atomically, every version kept, audited, undoable."""

from __future__ import annotations

import pytest
import yaml

from app.config import load_config
from app.http.console.changes import ChangeRefused, ConfigChanges, deep_merge, digest
from tests.support import ROOT


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text((ROOT / "config/demo.yaml").read_text())
    return path


def test_apply_writes_the_merged_config_keeps_the_old_one_and_audits(config):
    changes = ConfigChanges(config)
    before = config.read_text()
    applied = changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key abc", note="try rr")
    assert load_config(config).models["llama-70b"].strategy == "round_robin"
    assert load_config(config).models["llama-70b"].fallbacks == ("llama-8b",), "the rest of the alias is kept"
    assert (changes.versions / f"{applied.previous}.yaml").read_text() == before
    assert applied.previous == digest(before) and applied.version == digest(config.read_text())
    [entry] = changes.audit()
    assert entry["who"] == "admin key abc" and entry["action"] == "apply" and entry["note"] == "try rr"
    assert entry["patch"] == {"models": {"llama-70b": {"strategy": "round_robin"}}}
    assert entry["from"] == applied.previous and entry["to"] == applied.version and entry["at"] > 0
    assert not list(config.parent.glob(".gateway.yaml.*.tmp")), "no temporary file is left behind"


def test_a_change_that_does_not_validate_changes_nothing(config):
    changes = ConfigChanges(config)
    before = config.read_text()
    with pytest.raises(ChangeRefused, match="strategy"):
        changes.apply({"models": {"llama-70b": {"strategy": "fastest_please"}}}, "admin key abc")
    with pytest.raises(ChangeRefused, match="unknown backend"):
        changes.apply({"models": {"llama-70b": {"backends": ["nowhere"]}}}, "admin key abc")
    with pytest.raises(ChangeRefused, match="empty"):
        changes.apply({}, "admin key abc")
    assert config.read_text() == before and changes.audit() == []
    assert not list(config.parent.glob(".gateway.yaml.check.*")), "the validation copy is removed"


def test_checking_a_change_writes_nothing_beside_the_config(config):
    # In Kubernetes the config is a read-only ConfigMap: the what-if checks every change it replays, and
    # its check wrote a copy beside the file, so every what-if there failed with a 500 (EROFS).
    changes = ConfigChanges(config)
    folder, entries = config.parent.stat().st_mtime_ns, sorted(config.parent.iterdir())
    merged, _ = changes.candidate({"models": {"llama-70b": {"strategy": "round_robin"}}})
    assert merged["models"]["llama-70b"]["strategy"] == "round_robin"
    with pytest.raises(ChangeRefused, match=f"{config}: models.llama-70b.strategy"):
        changes.candidate({"models": {"llama-70b": {"strategy": "fastest_please"}}})
    assert config.parent.stat().st_mtime_ns == folder and sorted(config.parent.iterdir()) == entries


def test_rollback_returns_to_the_version_before_and_says_so(config):
    changes = ConfigChanges(config)
    original = config.read_text()
    changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    second = changes.apply({"models": {"llama-70b": {"hedge": {"enabled": True}}}}, "admin key b")
    back = changes.rollback("admin key c")
    cfg = load_config(config)
    assert cfg.models["llama-70b"].strategy == "round_robin" and not cfg.models["llama-70b"].hedge.enabled
    assert back.previous == second.version
    changes.rollback("admin key c")
    assert config.read_text() == original
    actions = [(e["action"], e["who"]) for e in changes.audit()]
    assert actions == [("rollback", "admin key c"), ("rollback", "admin key c"), ("apply", "admin key b"), ("apply", "admin key a")]
    with pytest.raises(ChangeRefused, match="no console change"):
        changes.rollback("admin key c")


def test_rollback_refuses_a_file_the_console_did_not_write(config):
    changes = ConfigChanges(config)
    changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    data = yaml.safe_load(config.read_text())
    data["models"]["llama-70b"]["strategy"] = "least_inflight"
    config.write_text(yaml.safe_dump(data))  # edited by hand since
    with pytest.raises(ChangeRefused):
        changes.rollback("admin key a")


def test_a_torn_audit_line_does_not_hide_the_rest(config):
    changes = ConfigChanges(config)
    changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    with open(changes.audit_path, "ab") as f:
        f.write(b'{"at": 1, "who": "half')
    assert [e["action"] for e in changes.audit()] == ["apply"]


def test_deep_merge_merges_mappings_replaces_the_rest_and_none_deletes():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert deep_merge(base, {"a": {"c": [3]}, "d": None}) == {"a": {"b": 1, "c": [3]}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}, "the base is not changed"
