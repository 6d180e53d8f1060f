"""Test-only: patch four LMCache modules right after they load, in every process of a test engine.

Python imports `sitecustomize` at start-up from the path, so this runs only where the engine test puts this folder
on PYTHONPATH (the engine processes and the workers they spawn). Nothing is imported eagerly: a finder waits for
the modules named in kvtier_cpu_adapter.PATCHES and patches each once it has executed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGETS = (
    "lmcache.v1.gpu_connector",
    "lmcache.integration.vllm.utils",
    "lmcache.v1.kv_layer_groups",
    "lmcache.v1.cache_engine",
)


class _PatchAfterLoad(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,  # noqa: ARG002 (the finder protocol)
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            from kvtier_cpu_adapter import PATCHES

            PATCHES[fullname](module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchAfterLoad())
