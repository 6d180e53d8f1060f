"""kvtier's LMCache connector module (kvtier/connectors/plugins/kvtier_lmcache.py) and how standalone endpoints ship it:
the tag stripping itself, and the wiring vLLM needs to import it in the pod. The real engines run it in
tests/engine/test_client_tags.py."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvtier.config.loader import Config
from kvtier.connectors import lmcache
from kvtier.connectors.plugins import (
    LMCACHE_CONNECTOR_CLASS,
    LMCACHE_CONNECTOR_FILE,
    LMCACHE_CONNECTOR_MODULE,
    kvtier_lmcache,
    plugin_text,
)
from kvtier.k8s import standalone
from kvtier.rules import load_checked
from tests.support import lmcache_config_map


@pytest.fixture(scope="module")
def prod() -> Config:
    from tests.support import CONFIG_DIR

    return load_checked(CONFIG_DIR, "prod")


def test_only_cache_tags_are_dropped_from_the_same_dict() -> None:
    params: dict[str, Any] = {
        "lmcache.tag.user": "alice",
        "lmcache.tag.x": "1",
        "lmcache.skip_save": True,  # a client may only save less: kept
        "do_remote_prefill": False,  # other connectors' parameters: kept
    }
    extra_args = {"kv_transfer_params": params, "other": 1}
    assert kvtier_lmcache.strip_client_tags(extra_args) == ["lmcache.tag.user", "lmcache.tag.x"]
    assert extra_args["kv_transfer_params"] is params  # vLLM's Request holds this very dict
    assert params == {"lmcache.skip_save": True, "do_remote_prefill": False}
    assert extra_args["other"] == 1


@pytest.mark.parametrize("extra_args", [None, {}, {"kv_transfer_params": None}, {"kv_transfer_params": "x"}])
def test_requests_without_tags_are_left_alone(extra_args: dict[str, Any] | None) -> None:
    before = json.dumps(extra_args)
    assert kvtier_lmcache.strip_client_tags(extra_args) == []
    assert json.dumps(extra_args) == before


def test_the_module_runs_without_kvtier() -> None:
    """It is imported in the engine image, where kvtier is not installed: standard library only at import time."""
    tree = ast.parse(plugin_text(LMCACHE_CONNECTOR_FILE))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} <= {"__future__", "typing", "importlib"}


def _import_as_the_pod_does(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(LMCACHE_CONNECTOR_MODULE, folder / LMCACHE_CONNECTOR_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pod_imports_the_connector_vllm_is_told_to_load(prod: Config, tmp_path: Path) -> None:
    endpoint = prod.lob("support").endpoints[0]
    deployment = standalone.engine_deployment(prod.env, "support", endpoint)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == f"{endpoint.name}-lmcache")
    assert mounts[volume["name"]] == env["PYTHONPATH"]  # the folder vLLM imports from holds the ConfigMap
    data = lmcache_config_map("support", endpoint)["data"]
    assert config["kv_connector_module_path"] == LMCACHE_CONNECTOR_MODULE
    assert data[f"{config['kv_connector_module_path']}.py"] == plugin_text(LMCACHE_CONNECTOR_FILE)
    (tmp_path / LMCACHE_CONNECTOR_FILE).write_text(data[LMCACHE_CONNECTOR_FILE], encoding="utf-8")
    module = _import_as_the_pod_does(tmp_path)
    assert module.CLASS_NAME == config["kv_connector"] == LMCACHE_CONNECTOR_CLASS
    # vLLM 0.19 looks the name up in its own registry first: ours must not be the name it registers.
    assert config["kv_connector"] != "LMCacheConnectorV1"
    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        with pytest.raises(ModuleNotFoundError, match="vllm"):  # the class is built from vLLM's, on first access
            getattr(module, config["kv_connector"])


def test_a_new_connector_module_rolls_the_pods(prod: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = prod.lob("support").endpoints[0]

    def digest() -> str:
        template = standalone.engine_deployment(prod.env, "support", endpoint)["spec"]["template"]
        value: str = template["metadata"]["annotations"]["kvtier.io/lmcache-config-sha256"]
        return value

    before = digest()
    monkeypatch.setattr(lmcache, "plugin_text", lambda name: plugin_text(name) + "\n# changed\n")
    assert digest() != before
