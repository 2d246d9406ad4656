"""The Helm chart: every values path a template reads exists and is documented in values.yaml, and the
gateway config it ships validates. (No helm binary can be installed here; `helm lint` and `helm
template` run where it is available.)"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from app.config import load_config
from tests.support import ROOT

CHART = ROOT / "helm" / "slipstream"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
TEMPLATES = {p.name: p.read_text() for p in (CHART / "templates").iterdir()}
VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def lookup(path: str):
    node = VALUES
    for key in path.strip(".").split("."):
        assert isinstance(node, dict) and key in node, f"values.yaml has no {path}"
        node = node[key]
    return node


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_values_path_exists(name):
    for path in VALUES_PATH.findall(TEMPLATES[name]):
        lookup(path)


def test_every_top_level_value_is_used():
    used = {p.strip(".").split(".")[0] for text in TEMPLATES.values() for p in VALUES_PATH.findall(text)}
    # `redis` is read by Chart.yaml's dependency condition.
    assert set(VALUES) - used <= {"redis"}, set(VALUES) - used


def test_shipped_gateway_config_validates(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(VALUES["config"]))
    env = {e["name"]: "x" for e in VALUES["secretEnv"]}
    config = load_config(path, environ=env)
    assert config.cache.store == "redis"


def test_deployment_is_hardened_and_probed():
    dep = TEMPLATES["deployment.yaml"]
    assert "path: /healthz" in dep and "path: /readyz" in dep
    assert VALUES["securityContext"]["readOnlyRootFilesystem"] is True
    assert VALUES["podSecurityContext"]["runAsNonRoot"] is True
    assert "secretKeyRef" in dep  # backend keys come from Secrets, never from values


def test_templates_balance_their_actions():
    for name, text in TEMPLATES.items():
        opens = len(re.findall(r"{{-?\s*(?:if|with|range|define)\b", text))
        ends = len(re.findall(r"{{-?\s*end\b", text))
        assert opens == ends, name


def test_dashboard_is_valid_json():
    assert json.loads((CHART / "dashboards" / "slipstream.json").read_text())["panels"]
