"""Config changes made from the console: validated, written atomically, every version kept, every
change in an audit log, and one step back to the version before.

Beside `gateway.yaml` live `.gateway.yaml.versions/` (each version the file had before a console
change, and each it became) and `.gateway.yaml.audit.jsonl` (one line per change: when, which admin
key, what, from which version to which). The running gateway picks the file up through its
reloader, the same path a SIGHUP takes, so a change that does not validate changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from app.config import ConfigError, GatewayConfig, parse_config

# How much history is kept (oldest versions go first); the audit log is kept whole, it is small.
KEEP_VERSIONS = 50


class ChangeRefused(ValueError):
    """The change was not applied; the message says why (for the operator)."""


class NotWritable(ChangeRefused):
    """The config file cannot be changed from here at all, whatever the change; the message says why."""


def deep_merge(base: dict, patch: dict) -> dict:
    """`patch` over `base`: mappings merge key by key, anything else replaces; a None value deletes."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Applied:
    version: str
    previous: str
    text: str


class ConfigChanges:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.versions = self.path.parent / f".{self.path.name}.versions"
        self.audit_path = self.path.parent / f".{self.path.name}.audit.jsonl"

    # --- reading ------------------------------------------------------------------------------
    def current_text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def current(self) -> dict:
        raw = yaml.safe_load(self.current_text()) or {}
        if not isinstance(raw, dict):
            raise ChangeRefused("the config file is not a mapping")
        return raw

    def audit(self, limit: int = 50) -> list[dict]:
        """The newest `limit` audit entries, newest first."""
        try:
            lines = self.audit_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out: list[dict] = []
        for line in reversed(lines):
            if len(out) >= limit:
                break
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # a torn last line from a crash: the rest still reads
        return out

    def why_not_writable(self) -> str | None:
        """Why a change could not be written here (None: it could), known before any is tried: the console
        shows it and offers no Apply. Mode bits count as well as access, so that a file or folder made
        read-only on purpose stays so for a gateway running as root (which access alone lets write)."""
        path, folder = self.path, self.path.parent
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith("..data/") or (folder / "..data").is_symlink():
                # The kubelet's layout for a ConfigMap (or Secret) volume: files link through ..data.
                return (f"the config file is mounted from a Kubernetes ConfigMap ({folder}): change the ConfigMap "
                        f"(the chart's values, then helm upgrade); the pods roll when it changes")
            return (f"the config file is a symbolic link (to {target}): a write would replace the link with a copy; "
                    f"start the gateway with --config {path.resolve()} to change it from here")
        try:
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                return f"the config file is on a read-only filesystem ({folder})"
            mode = path.stat().st_mode
        except OSError as exc:
            return f"the config file cannot be read ({exc.strerror or exc})"
        if _read_only(path, os.W_OK):
            return f"the config file is read-only (mode {mode & 0o777:04o}, {path})"
        for kept in (folder, self.versions):
            if kept.exists() and _read_only(kept, os.W_OK | os.X_OK):
                return (f"the folder {kept} is not writable (mode {kept.stat().st_mode & 0o777:04o}): a change is "
                        f"written beside the config file and renamed over it, its versions kept in {self.versions.name}")
        if self.audit_path.exists() and _read_only(self.audit_path, os.W_OK):
            return f"the audit log {self.audit_path} is read-only"
        return None

    def _writable(self) -> None:
        reason = self.why_not_writable()
        if reason is not None:
            raise NotWritable(reason)

    # --- checking -----------------------------------------------------------------------------
    def candidate(self, patch: dict) -> tuple[dict, str]:
        """The merged config and its YAML text, validated as start-up validates (or ChangeRefused)."""
        if not isinstance(patch, dict) or not patch:
            raise ChangeRefused("the change is empty")
        merged = deep_merge(self.current(), patch)
        text = yaml.safe_dump(merged, sort_keys=False)
        self._validate(text)
        return merged, text

    def _validate(self, text: str) -> GatewayConfig:
        # Validated as the reloader will read it at this path (secrets from the environment resolved the
        # same way), in memory: a what-if only checks, and must work where the folder is read-only.
        try:
            return parse_config(text, self.path)
        except ConfigError as exc:
            raise ChangeRefused(str(exc)) from None

    # --- changing -----------------------------------------------------------------------------
    def apply(self, patch: dict, who: str, note: str = "") -> Applied:
        self._writable()
        _, text = self.candidate(patch)
        return self._write(text, who, "apply", {"patch": patch, "note": note[:500]})

    def rollback(self, who: str) -> Applied:
        """Undo the newest console change still in effect: back to the version before it. Rollbacks
        stack (each undoes one apply further back), as an editor's undo does."""
        self._writable()
        current = digest(self.current_text())
        undone = 0
        for entry in self.audit(limit=1000):
            if entry.get("action") in ("rollback", "revert"):
                undone += 1
                continue
            if undone:
                undone -= 1
                continue
            if entry.get("to") == current and entry.get("from"):
                previous = self.versions / f"{entry['from']}.yaml"
                if not previous.exists():
                    raise ChangeRefused(f"version {entry['from']} is no longer kept")
                text = previous.read_text(encoding="utf-8")
                self._validate(text)
                return self._write(text, who, "rollback", {"undoes": entry.get("at")})
            break
        raise ChangeRefused("no console change to roll back: the file is not a version the console wrote")

    def undo_last(self, applied: Applied, who: str, reason: str) -> None:
        """Put back the file as it was before `applied` (its reload failed), and say so in the log."""
        text = (self.versions / f"{applied.previous}.yaml").read_text(encoding="utf-8")
        self._write(text, who, "revert", {"reason": reason[:500]})

    def _write(self, text: str, who: str, action: str, detail: dict) -> Applied:
        old = self.current_text()
        previous, version = digest(old), digest(text)
        self.versions.mkdir(exist_ok=True)
        _atomic_write(self.versions / f"{previous}.yaml", old)
        _atomic_write(self.versions / f"{version}.yaml", text)
        _atomic_write(self.path, text)
        entry = {"at": round(time.time(), 3), "who": who, "action": action, "from": previous, "to": version, **detail}
        with open(self.audit_path, "ab") as f:
            f.write(orjson.dumps(entry) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self._prune()
        return Applied(version, previous, text)

    def _prune(self) -> None:
        kept = sorted(self.versions.glob("*.yaml"), key=lambda p: p.stat().st_mtime)
        for p in kept[:-KEEP_VERSIONS]:
            p.unlink(missing_ok=True)


def _read_only(path: Path, access: int) -> bool:
    return not path.stat().st_mode & 0o222 or not os.access(path, access)


def _atomic_write(path: Path, text: str) -> None:
    """Write beside the target, fsync, rename over it: a reader sees the old file or the new, never half."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
