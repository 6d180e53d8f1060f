"""Offline validators for manifests: Kubernetes JSON schemas and upstream CRD schemas, both strict."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from kvtier.versions import K8S_SCHEMA_VERSION


def validate_k8s(obj: dict[str, Any]) -> None:
    """Validate a built-in object against the pinned Kubernetes version's strict schema (unknown fields fail)."""
    kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)


def _close_objects(schema: Any) -> Any:
    """Add `additionalProperties: false` to every object schema that declares `properties`, recursively.

    The API server prunes unknown fields silently; closing the schema makes a misspelled field fail here.
    """
    if isinstance(schema, dict):
        out = {k: _close_objects(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_close_objects(v) for v in schema]
    return schema


@cache
def crd_validator(crd_file: Path, version: str) -> jsonschema.Draft7Validator:
    """A strict validator for one version of a CRD (Helm placeholders in the file are left as text)."""
    crd = yaml.safe_load(crd_file.read_text(encoding="utf-8"))
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    schema = copy.deepcopy(served[version]["schema"]["openAPIV3Schema"])
    # apiVersion/kind/metadata are checked by the API server itself, not by the CRD schema.
    for key in ("apiVersion", "kind", "metadata"):
        schema.setdefault("properties", {}).setdefault(key, {})
    return jsonschema.Draft7Validator(_close_objects(schema))


def crd_errors(crd_file: Path, version: str, obj: dict[str, Any]) -> list[str]:
    validator = crd_validator(crd_file, version)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj))
