"""The lock and the environment agree: every package pinned in requirements*.txt is installed at its pin, every
installed package is pinned, and the pins are closed (each pinned package's own requirements are pinned too), so uv
and pip install the same set from the same files."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
FILES = ("requirements.txt", "requirements-dev.txt")
# Installed but not pinned in requirements*.txt, each with where its pin lives instead.
UNPINNED = {
    "kvtier": "this project (editable install)",
    "pip": "the venv's own installer",
    "setuptools": "the venv's own build tool (pyproject.toml pins the build backend)",
    "lmcache": "the Makefile's LMCACHE_VERSION, installed --no-deps (its dependencies pull a GPU torch)",
}
# Requirements of pinned packages that are deliberately not installed.
NOT_INSTALLED = {"lmcache"}


def _pins() -> dict[str, tuple[str, str]]:
    pins: dict[str, tuple[str, str]] = {}
    for name in FILES:
        for raw in (ROOT / name).read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line or line.startswith("-r"):
                continue
            match = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^\s;]+)", line)
            assert match, f"{name}: '{line}' is not an exact pin (name==version)"
            pins[canonicalize_name(match.group(1))] = (match.group(3), name)
    return pins


def _environment() -> dict[str, str]:
    return {key: str(value) for key, value in default_environment().items()}


def _installed() -> dict[str, metadata.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}


def test_every_pin_is_installed_at_its_version() -> None:
    installed = _installed()
    wrong = [
        f"{name}=={version} ({file}): installed {installed[name].version if name in installed else 'nothing'}"
        for name, (version, file) in _pins().items()
        if name not in installed or installed[name].version != version
    ]
    assert wrong == []


def test_every_installed_package_is_pinned() -> None:
    pins = _pins()
    unpinned = sorted(name for name in _installed() if name not in pins and name not in UNPINNED)
    assert unpinned == [], "pin these in requirements*.txt (or say in UNPINNED where their pin lives)"


def test_the_pins_are_closed_under_their_own_requirements() -> None:
    """A package a pinned package needs (for the extras we ask for) is pinned too: no install resolves anything."""
    pins, installed = _pins(), _installed()
    extras = {"boto3-stubs": {"sagemaker", "eks"}}
    missing: list[str] = []
    for name in pins.keys() & installed.keys():  # a pin not installed is the first test's finding
        for raw in installed[name].requires or []:
            req = Requirement(raw)
            wanted = ["", *sorted(extras.get(name, set()))]
            if req.marker is not None and not any(
                req.marker.evaluate({**_environment(), "extra": extra}) for extra in wanted
            ):
                continue
            dep = canonicalize_name(req.name)
            if dep not in pins and dep not in UNPINNED and dep not in NOT_INSTALLED:
                missing.append(f"{name} needs {req}")
    assert missing == []
