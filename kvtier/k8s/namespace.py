"""A line of business's namespace `kvtier-<lob>` (design "Names and limits")."""

from __future__ import annotations

from typing import Any

from kvtier.k8s.base import KvtierChart, api_object
from kvtier.naming import lob_namespace

LOB_LABEL = "kvtier.io/line-of-business"


def lob_namespace_object(lob: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": lob_namespace(lob), "labels": {LOB_LABEL: lob}},
    }


def add_namespace(chart: KvtierChart, lob: str) -> None:
    api_object(chart, "namespace", lob_namespace_object(lob))
