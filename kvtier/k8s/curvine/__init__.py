"""Curvine, the L2 pool: charts for the platform stack, and the helpers LOB stacks use (static PV, janitor).

Apply order (`curvine_charts`): the namespace (and kvtier's PriorityClass), then the cluster (config, masters,
workers), then the CSI driver, then the L2 healer.

Submodules load lazily: `kvtier.k8s.curvine.names` (plain constants) must stay importable without cdk8s/jsii, for
`kvtier verify`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtier.k8s.curvine.charts import curvine_charts
    from kvtier.k8s.curvine.janitor import add_janitor
    from kvtier.k8s.curvine.names import NAMESPACE
    from kvtier.k8s.curvine.volumes import PV_CAPACITY, STORAGE_CLASS_NAME, master_addresses, pvc_spec, static_pv

_HOME = {
    "curvine_charts": "charts",
    "add_janitor": "janitor",
    "NAMESPACE": "names",
    "PV_CAPACITY": "volumes",
    "STORAGE_CLASS_NAME": "volumes",
    "master_addresses": "volumes",
    "pvc_spec": "volumes",
    "static_pv": "volumes",
}
__all__ = [
    "NAMESPACE",
    "PV_CAPACITY",
    "STORAGE_CLASS_NAME",
    "add_janitor",
    "curvine_charts",
    "master_addresses",
    "pvc_spec",
    "static_pv",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
