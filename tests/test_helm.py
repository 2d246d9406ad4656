"""The Helm chart installs as the README says: it renders with the default values and with
production-like ones (helm/slipstream/ci/*.yaml), every object matches the Kubernetes API's schema,
the objects agree with each other, and the gateway config it ships validates.

The renderer is Helm's own Go engine (PyPI `helm-python-sdk`: Helm v4's SDK behind a C ABI, the same
code as `helm template` and `helm lint`); no helm binary is installable from the registries here. The
schemas are the Kubernetes OpenAPI schemas in strict form (PyPI `kubernetes-validate`).
"""

from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest
import yaml
from helm_python.chart import Chart, lint

from app.config import load_config
from tests.support import ROOT

CHART = ROOT / "helm" / "slipstream"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
TEMPLATES = {p.name: p.read_text() for p in (CHART / "templates").iterdir()}
VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
# The oldest and newest Kubernetes minor versions the chart is checked against.
KUBE_VERSIONS = ("1.29.0", "1.37.0")
VALUE_FILES = {"default": None, **{p.stem: p for p in sorted((CHART / "ci").glob("*-values.yaml"))}}
RELEASE, NAMESPACE = "gw", "llm"


def values_of(case: str) -> dict | None:
    path = VALUE_FILES[case]
    return yaml.safe_load(path.read_text()) if path else None


def merged(case: str) -> dict:
    """values.yaml with the case's file over it (Helm's merge: maps merge, everything else replaces)."""
    def merge(base, over):
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in base else over[k] for k in over} | \
                {k: v for k, v in base.items() if k not in over}
        return over
    return merge(VALUES, values_of(case) or {})


@pytest.fixture(scope="module")
def chart() -> Chart:
    return Chart.load(CHART)


@pytest.fixture(scope="module", params=list(VALUE_FILES))
def rendered(request, chart) -> tuple[str, list[dict]]:
    """(case, the Kubernetes objects `helm install` would create with that case's values)."""
    case = request.param
    manifests = chart.render(values_of(case), name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = [doc for name, text in sorted(manifests.items()) if name.endswith(".yaml")
               for doc in yaml.safe_load_all(text) if doc]
    return case, objects


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def gateway_deployment(objects: list[dict]) -> dict:
    return one(objects, "Deployment", f"{RELEASE}-slipstream")


# --- installs as it is -------------------------------------------------------------------------------

def test_every_dependency_is_vendored():
    # `helm install` refuses a chart whose dependencies are not under charts/ (found by reading: it
    # named a repository chart with no Chart.lock). None now; any added must come vendored and locked.
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for dep in meta.get("dependencies") or []:
        assert (CHART / "Chart.lock").exists(), "dependencies need a Chart.lock"
        assert list((CHART / "charts").glob(f"{dep['name']}-*.tgz")), f"{dep['name']} is not vendored in charts/"


@pytest.mark.parametrize("case", list(VALUE_FILES))
def test_helm_lint_is_clean(case):
    report = lint(CHART, values_of(case), strict=True, kube_version=f"v{KUBE_VERSIONS[-1]}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors; info is fine
    assert not problems and not report["errors"], report


# --- Kubernetes object shapes ----------------------------------------------------------------------

@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_every_object_matches_the_kubernetes_schema(rendered, kube):
    case, objects = rendered
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a Prometheus Operator CRD: checked by test_service_monitor_scrapes_the_service
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{case}: {obj['kind']} {obj['metadata']['name']} is not a valid object for {kube}: {exc.message}")


def test_default_install_creates_the_gateway_and_no_redis(chart):
    manifests = chart.render(None, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = [d for n, t in manifests.items() if n.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"]


def test_env_vars_are_defined_before_they_are_referenced(rendered):
    # Kubernetes expands $(VAR) only from variables listed earlier in the same container's env.
    case, objects = rendered
    for obj in by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet"):
        for container in obj["spec"]["template"]["spec"]["containers"]:
            defined: set[str] = set()
            for var in container.get("env", []):
                for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", var.get("value", "")):
                    assert ref in defined, f"{case}: {var['name']} uses $({ref}) before it is defined"
                defined.add(var["name"])


def test_service_pdb_and_hpa_point_at_the_gateway(rendered):
    _case, objects = rendered
    dep = gateway_deployment(objects)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    service = one(objects, "Service", dep["metadata"]["name"])
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] in ports
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for hpa in by_kind(objects, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]}
    # No other workload's pods carry the gateway's labels (the Service would send them traffic).
    for other in by_kind(objects, "StatefulSet"):
        assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()


def test_service_monitor_scrapes_the_service(rendered):
    _case, objects = rendered
    for sm in by_kind(objects, "ServiceMonitor"):
        service = one(objects, "Service", f"{RELEASE}-slipstream")
        assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
        assert sm["spec"]["endpoints"][0]["path"] == "/metrics"


# --- the gateway config it ships ---------------------------------------------------------------------

def shipped_config(objects: list[dict], tmp_path, values: dict):
    data = one(objects, "ConfigMap", f"{RELEASE}-slipstream")["data"]["gateway.yaml"]
    path = tmp_path / "gateway.yaml"
    path.write_text(data)
    env = {e["name"]: "x" for e in values["secretEnv"]}
    if values["cache"]["redisUrlSecret"]["name"]:
        env["SLIPSTREAM_REDIS_URL"] = SECRET_REDIS_URL
    if values["consoleSecret"]["name"]:
        env["SLIPSTREAM_CONSOLE_SECRET"] = "c" * 64
    return load_config(path, environ=env)


SECRET_REDIS_URL = "rediss://:pw-in-secret@redis-master.cache.svc:6380/0"


def test_shipped_gateway_config_validates_with_the_secrets_it_names(rendered, tmp_path):
    case, objects = rendered
    values = merged(case)
    config = shipped_config(objects, tmp_path, values)
    # Every api_key_env the config reads is filled from a Secret in the Deployment.
    env = {e["name"] for c in gateway_deployment(objects)["spec"]["template"]["spec"]["containers"] for e in c["env"]}
    needed = {b.api_key_env for b in config.backends.values() if b.api_key_env}
    assert needed <= env, needed - env
    assert config.server.shutdown_grace_s == values["terminationGracePeriodSeconds"] - 10


def test_console_sessions_are_signed_with_the_shared_secret_where_one_is_named(rendered, tmp_path):
    case, objects = rendered
    values = merged(case)
    config = shipped_config(objects, tmp_path, values)
    container = gateway_deployment(objects)["spec"]["template"]["spec"]["containers"][0]
    entries = [e for e in container["env"] if e["name"] == "SLIPSTREAM_CONSOLE_SECRET"]
    if values["consoleSecret"]["name"]:
        assert config.auth.console_secret_env == "SLIPSTREAM_CONSOLE_SECRET" and config.auth.console_secret is not None
        assert entries[0]["valueFrom"]["secretKeyRef"] == values["consoleSecret"]
    else:
        assert config.auth.console_secret_env is None and not entries


def test_redis_is_used_only_where_one_is(rendered, tmp_path):
    case, objects = rendered
    values = merged(case)
    config = shipped_config(objects, tmp_path, values)
    if values["cache"]["redisUrlSecret"]["name"]:
        # The URL (its password) stays in the Secret: the ConfigMap names the variable the pods read it from.
        assert (config.cache.store, config.cache.redis_url_env) == ("redis", "SLIPSTREAM_REDIS_URL")
        assert config.cache.redis_url == SECRET_REDIS_URL
        container = gateway_deployment(objects)["spec"]["template"]["spec"]["containers"][0]
        [entry] = [e for e in container["env"] if e["name"] == "SLIPSTREAM_REDIS_URL"]
        assert entry["valueFrom"]["secretKeyRef"] == values["cache"]["redisUrlSecret"]
        assert "redis_url:" not in one(objects, "ConfigMap", f"{RELEASE}-slipstream")["data"]["gateway.yaml"]
        assert not by_kind(objects, "StatefulSet")
    elif values["cache"]["redisUrl"]:
        assert (config.cache.store, config.cache.redis_url) == ("redis", values["cache"]["redisUrl"])
        assert not by_kind(objects, "StatefulSet")
    elif values["redis"]["enabled"]:
        redis_service = one(objects, "Service", f"{RELEASE}-slipstream-redis")
        assert config.cache.store == "redis"
        assert config.cache.redis_url == f"redis://{redis_service['metadata']['name']}:6379/0"
        sts = one(objects, "StatefulSet", f"{RELEASE}-slipstream-redis")
        assert redis_service["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    else:
        # The defaults point at no Redis: none is installed, so the replicas cache in-process.
        assert config.cache.store == "memory" and config.cache.redis_url is None
        assert not by_kind(objects, "StatefulSet")
    # Replicas given a Redis share their prefix placements through it; without one they cannot.
    assert config.routing.share_prefixes == (config.cache.store == "redis")


def test_prefix_sharing_is_left_as_the_config_or_the_values_say(chart, tmp_path):
    for values in ({"redis": {"enabled": True}, "config": {"routing": {"share_prefixes": False}}},
                   {"redis": {"enabled": True}, "sharePrefixes": False}):
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        objects = [doc for name, text in sorted(manifests.items()) if name.endswith(".yaml")
                   for doc in yaml.safe_load_all(text) if doc]
        assert not shipped_config(objects, tmp_path, merged("default")).routing.share_prefixes, values


def test_a_redis_store_without_a_redis_fails_the_render(chart):
    from helm_python.errors import HelmError

    with pytest.raises(HelmError, match="no Redis is given"):
        chart.render({"config": {"cache": {"store": "redis"}}}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def test_a_redis_url_both_in_a_secret_and_in_values_fails_the_render(chart):
    from helm_python.errors import HelmError

    for other in ({"cache": {"redisUrl": "redis://r:6379/0"}}, {"redis": {"enabled": True}}):
        values = {"cache": {"redisUrlSecret": {"name": "slipstream-redis"}}, **other}
        if "cache" in other:
            values["cache"] = {**other["cache"], "redisUrlSecret": {"name": "slipstream-redis"}}
        with pytest.raises(HelmError, match="cache.redisUrlSecret names the Redis URL"):
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def test_a_config_that_names_its_own_redis_url_env_renders(chart):
    values = {"config": {"cache": {"store": "redis", "redis_url_env": "MY_REDIS_URL"}},
              "secretEnv": [{"name": "MY_REDIS_URL", "secretName": "r", "secretKey": "url"}]}
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert "redis_url_env: MY_REDIS_URL" in manifests["slipstream/templates/configmap.yaml"]


# --- values.yaml as documentation ----------------------------------------------------------------------

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
    assert set(VALUES) == used, set(VALUES) ^ used


def test_deployment_is_hardened_and_probed(rendered):
    _case, objects = rendered
    pod = gateway_deployment(objects)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    probe = container["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz" if "httpGet" in probe else "/readyz" in " ".join(probe["exec"]["command"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Backend keys come from Secrets, never from values.
    assert all("value" not in e for e in container["env"] if e["name"].endswith("_API_KEY"))


def test_dashboard_is_valid_json():
    assert json.loads((CHART / "dashboards" / "slipstream.json").read_text())["panels"]


def test_probe_and_scrape_send_the_ops_key_when_one_is_required(chart, fleet, tmp_path):
    # The production values put /metrics and /readyz behind an ops key: the exec readiness probe
    # must pass against a real gateway that requires it, and fail without the key.
    import os
    import subprocess

    from app.admission.auth import hash_key
    from tests.conftest import gateway_config, start_gateway

    objects = [d for n, t in chart.render(values_of("production-values"), name=RELEASE, namespace=NAMESPACE, is_install=True).items()
               if n.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
    container = gateway_deployment(objects)["spec"]["template"]["spec"]["containers"][0]
    assert any(e["name"] == "SLIPSTREAM_OPS_KEY" and "secretKeyRef" in e["valueFrom"] for e in container["env"])
    for sm in by_kind(objects, "ServiceMonitor"):
        assert sm["spec"]["endpoints"][0]["authorization"]["credentials"]["name"] == "slipstream-ops-key"
    command = container["readinessProbe"]["exec"]["command"]

    key = "sk-ops-0123456789"
    config = gateway_config(fleet, 0)
    config["auth"]["ops_keys"] = [hash_key(key)]
    gw = start_gateway(tmp_path, fleet, config)
    try:
        probe = [c.replace("127.0.0.1:8080", f"127.0.0.1:{gw.port}") for c in command]
        probe[0] = os.environ.get("PYTHON", __import__("sys").executable)

        def run(k: str) -> int:
            return subprocess.run(probe, env={**os.environ, "SLIPSTREAM_OPS_KEY": k}, capture_output=True, timeout=20).returncode

        assert run(key) == 0
        assert run("sk-wrong") != 0
        # A Secret made with --from-file keeps the file's newline: the probe failed on every try with
        # "Invalid header value", so the pods never became ready.
        assert run(key + "\n") == 0
    finally:
        gw.process.stop()
