"""`cache.connector: vllm` (issue 24): the standalone Deployment runs vLLM's own OffloadingConnector with a CPU tier
(L1) and an `fs` tier under the endpoint's identity directory (L2), /dev/shm sized for the CPU tier, the same hash
seed and hash algorithm on every replica, and an identity that never meets an LMCache one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvtier import serving
from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity, l2_identity_facts, l2_subdir
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.standalone import SHM_GIB, add_standalone_engine, engine_deployment
from kvtier.rules import load_checked
from kvtier.versions import NATIVE_VLLM_IMAGE, NATIVE_VLLM_VERSION
from tests.support import CONFIG_DIR
from tests.validation import validate_k8s


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _lmcache(config: Config) -> Endpoint:
    return config.lob("support").endpoints[0]


def _vllm(config: Config, **cache: Any) -> Endpoint:
    endpoint = _lmcache(config)
    return endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update={"connector": "vllm", **cache})})


def _container(config: Config, endpoint: Endpoint) -> dict[str, Any]:
    container: dict[str, Any] = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def _flag(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


def test_standalone_runs_vllms_offloading_connector_with_an_fs_tier(prod: Config) -> None:
    endpoint = _vllm(prod)
    container = _container(prod, endpoint)
    assert container["image"] == NATIVE_VLLM_IMAGE
    transfer = json.loads(_flag(container["args"], "--kv-transfer-config"))
    assert transfer == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": 24 * 1024**3,  # the example's l1_gb: 24 per replica
            "secondary_tiers": [{"type": "fs", "root_dir": f"/mnt/kvtier/l2/{l2_subdir(endpoint)}"}],
        },
    }
    assert _flag(container["args"], "--prefix-caching-hash-algo") == "sha256"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PYTHONHASHSEED"] == serving.HASH_SEED  # the one LMCache endpoints get too
    assert not [name for name in env if name.startswith("LMCACHE_")]
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/mnt/kvtier/l2", "/dev/shm"}


def test_dev_shm_holds_the_cpu_tier(prod: Config) -> None:
    """vLLM maps its CPU tier as one /dev/shm file of `cpu_bytes_to_use` and refuses to start if it does not fit."""
    pod = engine_deployment(prod.env, "support", _vllm(prod))["spec"]["template"]["spec"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": f"{SHM_GIB + 24}Gi"}
    lmcache_pod = engine_deployment(prod.env, "support", _lmcache(prod))["spec"]["template"]["spec"]
    assert next(v for v in lmcache_pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == f"{SHM_GIB}Gi"


def test_without_l2_the_cpu_tier_alone(prod: Config) -> None:
    container = _container(prod, _vllm(prod, l2="none"))
    extra = json.loads(_flag(container["args"], "--kv-transfer-config"))["kv_connector_extra_config"]
    assert extra == {"spec_name": "CPUOffloadingSpec", "cpu_bytes_to_use": 24 * 1024**3}
    assert "/mnt/kvtier/l2" not in {m["mountPath"] for m in container["volumeMounts"]}


def test_the_chart_has_no_lmcache_config_map_and_validates(prod: Config) -> None:
    chart = KvtierChart(chart_app(), "endpoint-llama31-8b", namespace="kvtier-support")
    add_standalone_engine(chart, prod.env, "support", _vllm(prod))
    objects = chart.manifests()
    assert sorted(o["kind"] for o in objects) == ["Deployment", "PodDisruptionBudget", "Service"]  # budget: issue 38
    for obj in objects:
        validate_k8s(obj)


def test_the_identity_names_the_connector_and_vllms_hashing(prod: Config) -> None:
    vllm, lmcache = _vllm(prod), _lmcache(prod)
    facts = l2_identity_facts(vllm)
    assert facts["connector"] == "vllm" and facts["vllm"] == NATIVE_VLLM_VERSION
    assert (facts["block_size"], facts["hash_algo"], facts["hash_seed"]) == (16, "sha256", serving.HASH_SEED)
    assert facts["image"] == NATIVE_VLLM_IMAGE
    assert not {"chunk_size", "serde", "lmcache", "save_chunk_meta", "use_layerwise"} & set(facts)
    # Both connectors side by side in one LOB: never the same directory.
    assert l2_identity(vllm) != l2_identity(lmcache)
    assert "connector" not in l2_identity_facts(lmcache)  # LMCache identities are as they were


@pytest.mark.parametrize(
    "change",
    [
        {"block_size": 32},
        {"tensor_parallel": 2, "instance_type": "ml.g6e.12xlarge"},
        {"dtype": "float16"},
        {"image": "vllm/vllm-openai:v0.33.0"},
    ],
)
def test_every_fact_that_changes_vllms_files_moves_the_identity(prod: Config, change: dict[str, Any]) -> None:
    vllm = _vllm(prod)
    assert l2_identity(vllm.model_copy(update=change)) != l2_identity(vllm)


def test_chunk_size_does_not_apply_to_vllms_connector(prod: Config) -> None:
    vllm = _vllm(prod)
    assert l2_identity(vllm.model_copy(update={"cache": vllm.cache.model_copy(update={"chunk_size": 512})})) == (
        l2_identity(vllm)
    )


def test_lmcache_endpoints_render_as_before(prod: Config) -> None:
    args = _container(prod, _lmcache(prod))["args"]
    # kvtier's tag-stripping subclass of vLLM's LMCache connector (kvtier/connectors/plugins/kvtier_lmcache.py)
    assert json.loads(_flag(args, "--kv-transfer-config"))["kv_connector"] == "KvtierLMCacheConnectorV1"
    assert "--prefix-caching-hash-algo" not in args
    assert CacheConfig().connector == "lmcache"
