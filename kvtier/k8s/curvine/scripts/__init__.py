"""Scripts shipped to the cluster in ConfigMaps (package data, so they are tested exactly as shipped)."""

from __future__ import annotations

from importlib import resources

MASTER_INIT = "master-init.sh"
JANITOR = "l2_janitor.py"
HEALER = "l2_healer.py"
FENCE = "l2_fence.py"


def script_text(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
