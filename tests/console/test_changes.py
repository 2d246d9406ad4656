"""Config changes from the console: validated, written atomically, every version kept, audited, undoable."""

from __future__ import annotations

import pytest
import yaml

from app.config import load_config
from app.http.console.changes import ChangeRefused, ConfigChanges, NotWritable, deep_merge, digest
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


# --- where the file cannot be written -------------------------------------------------------------
# Mode bits count, not only access: these tests run as root, whom access alone lets write anything.


def test_a_writable_config_says_so(config):
    assert ConfigChanges(config).why_not_writable() is None


def test_a_read_only_file_is_known_up_front_and_apply_and_rollback_refuse_it(config):
    changes = ConfigChanges(config)
    changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    before, versions = config.read_text(), sorted(changes.versions.iterdir())
    config.chmod(0o444)
    assert changes.why_not_writable() == f"the config file is read-only (mode 0444, {config})"
    with pytest.raises(NotWritable, match="read-only"):
        changes.apply({"models": {"llama-70b": {"strategy": "least_inflight"}}}, "admin key a")
    with pytest.raises(NotWritable, match="read-only"):
        changes.rollback("admin key a")
    # Refused before anything was written: the file (a rename would have replaced it), versions, audit.
    assert config.read_text() == before and sorted(changes.versions.iterdir()) == versions
    assert [e["action"] for e in changes.audit()] == ["apply"]


def test_a_folder_that_cannot_be_written_is_known_up_front(config):
    changes = ConfigChanges(config)
    config.parent.chmod(0o555)
    try:
        reason = changes.why_not_writable()
        with pytest.raises(NotWritable):
            changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    finally:
        config.parent.chmod(0o755)
    assert reason is not None and reason.startswith(f"the folder {config.parent} is not writable (mode 0555)")
    assert not changes.versions.exists()


def test_a_kubernetes_configmap_mount_is_known_up_front(tmp_path):
    # The kubelet's layout: gateway.yaml -> ..data/gateway.yaml, ..data -> ..<timestamp>/, all read-only.
    (tmp_path / "..2026_12_07_04_00_00.1").mkdir()
    (tmp_path / "..2026_12_07_04_00_00.1" / "gateway.yaml").write_text((ROOT / "config/demo.yaml").read_text())
    (tmp_path / "..data").symlink_to("..2026_12_07_04_00_00.1")
    (tmp_path / "gateway.yaml").symlink_to("..data/gateway.yaml")
    changes = ConfigChanges(tmp_path / "gateway.yaml")
    assert "mounted from a Kubernetes ConfigMap" in changes.why_not_writable()
    with pytest.raises(NotWritable, match="ConfigMap"):
        changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    assert (tmp_path / "gateway.yaml").is_symlink()


def test_a_symbolic_link_is_not_replaced_by_a_copy(config, tmp_path):
    link = tmp_path / "linked.yaml"
    link.symlink_to(config)
    changes = ConfigChanges(link)
    assert changes.why_not_writable().startswith(f"the config file is a symbolic link (to {config})")
    with pytest.raises(NotWritable):
        changes.apply({"models": {"llama-70b": {"strategy": "round_robin"}}}, "admin key a")
    assert link.is_symlink()
    assert ConfigChanges(config).why_not_writable() is None, "the file it points to may be changed by its own name"


def test_a_read_only_filesystem_is_known_up_front(config, monkeypatch):
    import os

    real = os.statvfs

    def read_only(path):
        stat = real(path)
        return os.statvfs_result((*stat[:8], stat.f_flag | os.ST_RDONLY, stat.f_namemax))

    monkeypatch.setattr(os, "statvfs", read_only)
    assert ConfigChanges(config).why_not_writable() == f"the config file is on a read-only filesystem ({config.parent})"
