"""Standalone mode: vLLM + LMCache Deployment, Service, ConfigMap, S3 weights, and the vLLM router,
all valid Kubernetes 1.34 objects wired to each other."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import yaml

from kvtier.config.endpoint import CacheConfig, Endpoint, S3Model
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.endpoint_names import endpoint_url, router_service_name
from kvtier.k8s.router import add_router, router_objects
from kvtier.k8s.standalone import add_standalone_engine, engine_deployment
from kvtier.naming import MODEL_READER_SA
from kvtier.rules import load_checked
from kvtier.versions import ROUTER_IMAGE, ROUTER_POLICY, STANDALONE_VLLM_IMAGE
from tests.support import lmcache_config_map
from tests.validation import validate_k8s

ROUTINGS = ["prefixaware", "session", "roundrobin"]  # kvaware: refused in standalone mode (rules)


@pytest.fixture(scope="module")
def prod() -> Config:
    from tests.support import CONFIG_DIR

    return load_checked(CONFIG_DIR, "prod")


def _support(config: Config, **update: Any) -> Endpoint:
    return config.lob("support").endpoints[0].model_copy(update=update)


def _chart(config: Config, endpoint: Endpoint) -> list[dict[str, Any]]:
    chart = KvtierChart(chart_app(), f"endpoint-{endpoint.name}", namespace="kvtier-support")
    add_standalone_engine(chart, config.env, "support", endpoint)
    add_router(chart, config.env, "support", endpoint)
    return chart.manifests()


def _kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


S3 = S3Model(source="s3", id="meta-llama/Llama-3.1-8B-Instruct", bucket="models-bucket", prefix="llama/8b")
VARIANTS: list[dict[str, Any]] = [
    *({"routing": r} for r in ROUTINGS),
    {"cache": CacheConfig(l1_gb=0, l2="curvine")},
    {"cache": CacheConfig(l1_gb=0, l2="none")},
    {"cache": CacheConfig(l1_gb=8, l2="none"), "tensor_parallel": 4, "instance_type": "ml.g6e.12xlarge"},
    {"model": S3},
]


@pytest.mark.parametrize("update", VARIANTS, ids=lambda u: "-".join(f"{k}={v}" for k, v in u.items())[:60])
def test_every_object_validates_against_kubernetes(prod: Config, update: dict[str, Any]) -> None:
    objects = _chart(prod, _support(prod, **update))
    for obj in objects:
        validate_k8s(obj)
    assert {o["metadata"].get("namespace", "kvtier-support") for o in objects} == {"kvtier-support"}


def test_engine_deployment(prod: Config) -> None:
    endpoint = _support(prod)
    deployment = engine_deployment(prod.env, "support", endpoint)
    spec = deployment["spec"]
    # Replicas may hold every GPU of the group: never surge, replace one pod at a time.
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"kvtier.io/role": "gpu"}
    (container,) = pod["containers"]
    assert container["image"] == STANDALONE_VLLM_IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    args = container["args"]
    assert json.loads(args[args.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "KvtierLMCacheConnectorV1",  # LMCache's, minus client cache tags (issue 24)
        "kv_connector_module_path": "kvtier_lmcache",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",  # an L2 chunk that cannot be read is computed again (issue 22)
    }
    env = {e["name"]: e for e in container["env"]}
    assert "LMCACHE_CONFIG_FILE" not in env  # every setting is a variable of the pod template (issue 34)
    assert env["PYTHONHASHSEED"]["value"] == "0" and env["PROMETHEUS_MULTIPROC_DIR"]["value"]
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/mnt/kvtier/l2"]]["persistentVolumeClaim"] == {"claimName": "l2-cache"}
    assert (
        volumes[mounts["/etc/lmcache"]]["configMap"]["name"]
        == lmcache_config_map("support", endpoint)["metadata"]["name"]
    )
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "http", "containerPort": 8000} in container["ports"]


def _engine_env(prod: Config, endpoint: Endpoint) -> dict[str, str]:
    container = engine_deployment(prod.env, "support", endpoint)["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_pod_template_holds_the_endpoint_identity_directory(prod: Config) -> None:
    """Where a pod reads and writes L2 lives in its pod template (issue 34): an old ReplicaSet's pod keeps its own
    directory whatever a later apply does to the ConfigMap, which holds only kvtier's connector module."""
    endpoint = _support(prod)
    env = _engine_env(prod, endpoint)
    assert env["LMCACHE_REMOTE_URL"] == f"fs://localhost:0/mnt/kvtier/l2/llama31-8b/{l2_identity(endpoint)}/"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "24.0" and env["LMCACHE_REMOTE_SERDE"] == "naive"
    assert env["LMCACHE_CHUNK_SIZE"] == "256" and env["LMCACHE_EXTRA_CONFIG"] == '{"save_chunk_meta": true}'
    assert set(lmcache_config_map("support", endpoint)["data"]) == {"kvtier_lmcache.py"}
    revised = endpoint.model_copy(update={"model": endpoint.model.model_copy(update={"revision": "c" * 40})})
    assert lmcache_config_map("support", revised) == lmcache_config_map("support", endpoint)  # never rewritten
    assert _engine_env(prod, revised)["LMCACHE_REMOTE_URL"] != env["LMCACHE_REMOTE_URL"]


def test_the_rollout_break_renders_the_settings_into_the_config_map(
    prod: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KVTIER_ROLLOUT_BREAK (the engine test's self-check) restores the rendering before issue 34."""
    endpoint = _support(prod)
    monkeypatch.setenv("KVTIER_ROLLOUT_BREAK", "1")
    env = _engine_env(prod, endpoint)
    assert env["LMCACHE_CONFIG_FILE"] == "/etc/lmcache/lmcache.yaml" and "LMCACHE_REMOTE_URL" not in env
    data = yaml.safe_load(lmcache_config_map("support", endpoint)["data"]["lmcache.yaml"])
    assert data["remote_url"] == f"fs://localhost:0/mnt/kvtier/l2/llama31-8b/{l2_identity(endpoint)}/"


def test_no_lmcache_means_no_connector(prod: Config) -> None:
    objects = _chart(prod, _support(prod, cache=CacheConfig(l1_gb=0, l2="none")))
    container = _kind(objects, "Deployment", "llama31-8b")["spec"]["template"]["spec"]["containers"][0]
    assert "--kv-transfer-config" not in container["args"]
    assert not any(o["kind"] == "ConfigMap" for o in objects)
    assert not any(e["name"].startswith("LMCACHE_") for e in container["env"])


def test_s3_weights_stream_with_the_lobs_pod_identity(prod: Config) -> None:
    objects = _chart(prod, _support(prod, model=S3))
    pod = _kind(objects, "Deployment", "llama31-8b")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == MODEL_READER_SA  # the LOB's Pod Identity role reads its own prefixes
    container = pod["containers"][0]
    args = container["args"]
    assert args[args.index("--model") + 1] == "s3://models-bucket/llama/8b"
    assert args[args.index("--load-format") + 1] == "runai_streamer"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AWS_REGION"] == prod.env.region and "HF_TOKEN" not in env
    assert not any(o["kind"] in ("PersistentVolume", "PersistentVolumeClaim") for o in objects)


def test_hugging_face_revision_is_pinned(prod: Config) -> None:
    model = _support(prod).model.model_copy(update={"revision": "b" * 40})
    args = engine_deployment(prod.env, "support", _support(prod, model=model))["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert args[args.index("--revision") + 1] == "b" * 40
    assert (
        "serviceAccountName" not in engine_deployment(prod.env, "support", _support(prod))["spec"]["template"]["spec"]
    )


@pytest.mark.parametrize("routing", ROUTINGS)
def test_router(prod: Config, routing: str) -> None:
    endpoint = _support(prod, routing=routing)
    objects = router_objects(prod.env, "support", endpoint)
    deployment = _kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kvtier.io/role": "system"}
    (container,) = pod["containers"]
    assert container["image"] == ROUTER_IMAGE
    assert container["command"] == ["vllm-router"]
    args = container["args"]
    value = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    assert value["--policy"] == ROUTER_POLICY[routing]
    assert "--service-discovery" in args and value["--service-discovery-namespace"] == "kvtier-support"
    # The router's selector (`--selector k=v k=v`) picks exactly the engine pods.
    engine = engine_deployment(prod.env, "support", endpoint)["spec"]["template"]["metadata"]["labels"]
    at = args.index("--selector") + 1
    values = list(itertools.takewhile(lambda a: not a.startswith("--"), args[at:]))
    wanted = dict(pair.split("=") for pair in values)
    assert wanted and wanted.items() <= engine.items()
    assert value["--service-discovery-port"] == "8000"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": int(value["--port"]), "metrics": int(value["--prometheus-port"])}
    role = _kind(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}]
    binding = _kind(objects, "RoleBinding")
    assert (
        binding["subjects"][0]["name"]
        == pod["serviceAccountName"]
        == _kind(objects, "ServiceAccount")["metadata"]["name"]
    )
    service = _kind(objects, "Service")
    assert service["metadata"]["name"] == router_service_name(endpoint.name)
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_kvaware_has_no_standalone_router(prod: Config) -> None:
    with pytest.raises(ValueError, match="no standalone router policy"):
        router_objects(prod.env, "support", _support(prod, routing="kvaware"))


def test_endpoint_url_is_the_router_service() -> None:
    assert (
        endpoint_url("support", "llama31-8b", "standalone") == "http://llama31-8b.kvtier-support.svc.cluster.local:80"
    )


def test_router_opens_a_removed_replicas_circuit_within_one_requests_attempts(prod: Config) -> None:
    """Scale-in (issue 27): the circuit of a replica that is gone opens before a request runs out of attempts, so
    the request's last attempts reach a live replica (measured: tests/engine/test_scale_out.py)."""
    from kvtier.k8s.router import CB_FAILURE_THRESHOLD, RETRY_ATTEMPTS, router_args

    for routing in ROUTINGS:
        args = router_args("support", _support(prod, routing=routing))
        value = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
        assert int(value["--cb-failure-threshold"]) == CB_FAILURE_THRESHOLD < int(value["--retry-max-retries"])
        assert int(value["--retry-max-retries"]) == RETRY_ATTEMPTS


def test_poolaware_router_runs_cache_aware_with_the_plans_knobs_and_says_why(prod: Config) -> None:
    from kvtier.k8s.router import KNOBS_ANNOTATION
    from kvtier.planner.pool_routing import endpoint_knobs

    endpoint = _support(prod, routing="poolaware")
    knobs = endpoint_knobs(prod, "support", endpoint)
    assert knobs is not None
    objects = router_objects(prod.env, "support", endpoint, knobs)
    deployment = _kind(objects, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    value = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}
    assert value["--policy"] == "cache_aware"
    assert float(value["--cache-threshold"]) == knobs.cache_threshold
    assert int(value["--balance-abs-threshold"]) == knobs.balance_abs_threshold
    assert float(value["--balance-rel-threshold"]) == knobs.balance_rel_threshold
    assert int(value["--max-tree-size"]) == knobs.max_tree_size
    why = deployment["metadata"]["annotations"][KNOBS_ANNOTATION].splitlines()
    assert [line.split(" ")[0] for line in why] == list(knobs.why)
    for obj in objects:
        validate_k8s(obj)
    # Only poolaware renders knobs; it never renders without them (the router's defaults ignore the pool).
    plain = _kind(router_objects(prod.env, "support", _support(prod), knobs), "Deployment")
    assert "--cache-threshold" not in plain["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "annotations" not in plain["metadata"]
    with pytest.raises(ValueError, match="needs the knobs derived from its plan"):
        router_objects(prod.env, "support", endpoint)
