"""`pip install .` gives a working kvtier: every runtime dependency declared with requirements.txt's pins, and the
built wheel, installed non-editable into a fresh venv, runs from another folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import CONFIG_DIR, ROOT


def direct_pins() -> dict[str, str]:
    """requirements.txt's direct pins: the lines before its transitive block, as {name: specifier}."""
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    direct = text.split("# Transitive dependencies", 1)[0]
    pins: dict[str, str] = {}
    for raw in direct.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = str(requirement.specifier)
    return pins


def declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, project["dependencies"])}


def test_pyproject_declares_every_direct_pin_of_requirements_txt() -> None:
    pins = direct_pins()
    assert {"kubernetes", "cdk-nag", "aws-cdk-lib"} <= pins.keys()  # the parser found the block
    assert declared() == pins


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the sources (so the build leaves nothing in the repository).

    Offline, so without build isolation: the venv's setuptools is the pinned backend (requirements-dev.txt)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "kvtier", source / "kvtier", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out)]
    subprocess.run([*build, str(source)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("kvtier-*.whl")
    return built


def test_the_wheel_declares_the_pins_and_carries_the_licence(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    required = {
        canonicalize_name(r.name): str(r.specifier)
        for r in map(Requirement, re.findall(r"^Requires-Dist: (.+)$", metadata, re.M))
    }
    assert required == direct_pins()
    assert "License-Expression: Apache-2.0" in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "kvtier/k8s/curvine/scripts/master-init.sh" in names  # package data


def test_the_installed_wheel_runs_from_another_folder(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    # The dependencies are the ones this venv already has (installing them offline is not possible): a .pth line
    # appends its site-packages after the new venv's own, without running its .pth files (so no editable kvtier).
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True, timeout=60).stdout.strip())  # fmt: skip
    (site / "main-venv-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "KUBERNETES_SERVICE_HOST"}}
    env.update(KUBECONFIG=str(tmp_path / "no-kubeconfig"), HOME=str(tmp_path))
    kvtier = str(venv / "bin" / "kvtier")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kvtier, *args], check=False, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
        )

    where = subprocess.run([python, "-c", "import kvtier; print(kvtier.__file__)"], cwd=elsewhere, env=env,
                           check=True, capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    assert where.startswith(str(site)), f"kvtier imported from {where}, not from the installed wheel"
    version = run("--version")
    assert (version.returncode, version.stdout.strip()) == (0, "kvtier 0.1.0")
    validate = run("validate", "--config-dir", str(CONFIG_DIR))
    assert validate.returncode == 0, validate.stderr
    verify = run("verify", "--config-dir", str(CONFIG_DIR))
    assert verify.returncode == 3, verify.stderr
    assert "no usable kubeconfig" in verify.stderr
    assert "Traceback" not in verify.stderr + validate.stderr
