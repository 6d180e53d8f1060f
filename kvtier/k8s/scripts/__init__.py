"""Scripts an engine pod runs before vLLM starts (package data, so the tests run exactly what is shipped; standard
library only: they run in the engine image)."""

from __future__ import annotations

from importlib import resources

ADAPTER_CHECK = "adapter_check.py"


def script_text(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
