"""Standalone mode (no operator, any EKS): per endpoint a vLLM Deployment, its Service and the ConfigMap of the files
its L2 connector mounts (LMCache's settings); weights from Hugging Face, or streamed from S3 by vLLM's Run:ai loader as the LOB's `model-reader` service
account (EKS Pod Identity, kvtier/constructs/model_access.py).

Tiers: L0 is vLLM's prefix cache (on by default), L1 LMCache's pinned host memory, L2 LMCache's `fs://` connector on
the LOB's `l2-cache` volume (Curvine). With `cache.connector: vllm`, L1 and L2 are vLLM's own OffloadingConnector
instead: its CPU tier in `/dev/shm` and its `fs` tier on the same volume (no ConfigMap). What each connector adds to
the container comes from kvtier/connectors/. The router (router.py) spreads requests over the pods.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kvtier.catalog import as_served, resolve_model
from kvtier.config.endpoint import Endpoint, S3Model
from kvtier.config.environment import Environment
from kvtier.connectors import connector_for, engine_image
from kvtier.connectors.base import EngineWiring, MountedFiles
from kvtier.k8s.adapters import TERMINATION_MESSAGE, adapter_pod_parts, lora_args, reads_s3
from kvtier.k8s.autoscaling import add_standalone_autoscaling
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.disruption import engine_pdb
from kvtier.k8s.drain import lifecycle, termination_grace_s
from kvtier.k8s.endpoint_names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    ENGINE_PORT,
    engine_labels,
    engine_service_name,
)
from kvtier.k8s.endpoint_names import ENGINE_CONTAINER as CONTAINER
from kvtier.k8s.operator_endpoint import HEALTH_PATH, l2_identity_annotations, vllm_args
from kvtier.k8s.placement import placement
from kvtier.k8s.security import container_security_context, pod_security_context
from kvtier.naming import MODEL_READER_SA, lob_namespace
from kvtier.serving import L2_CLAIM, L2_MOUNT_PATH, L2_VOLUME, PROMETHEUS_DIR, hash_seed_env
from kvtier.sizing import EngineDisk, engine_disk, worker_size

MODEL_CACHE = "/models"  # Hugging Face downloads (HF_HOME), on an emptyDir of the node's disk, sized from the model
EPHEMERAL = "ephemeral-storage"
SHM_GIB = 8  # /dev/shm for tensor-parallel workers (NCCL); counted inside the pod's memory limit
# Startup covers the weight download and load: 180 x 10 s = 30 minutes before the kubelet restarts the pod.
STARTUP_FAILURES = 180


def engine_wiring(endpoint: Endpoint) -> EngineWiring:
    """What the endpoint's L2 connector adds to the engine container (kvtier/connectors/)."""
    return connector_for(endpoint).standalone(endpoint)


def engine_config_map(lob: str, endpoint: Endpoint) -> dict[str, Any] | None:
    """The ConfigMap of the files the connector mounts into the engine (LMCache's settings and kvtier's connector
    module), or None when it mounts none."""
    files = engine_wiring(endpoint).files
    return None if files is None else _config_map(lob, files)


def _config_map(lob: str, files: MountedFiles) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": files.config_map, "namespace": lob_namespace(lob)},
        "data": dict(files.data),
    }


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _model(env: Environment, endpoint: Endpoint) -> tuple[list[str], list[dict[str, Any]]]:
    """(vLLM model arguments, environment) for the model source."""
    model = endpoint.model
    hf_home = {"name": "HF_HOME", "value": f"{MODEL_CACHE}/huggingface"}  # config and tokenizer files too
    if isinstance(model, S3Model):
        region = model.region or env.region
        uri = f"s3://{model.bucket}/{model.prefix.rstrip('/')}"
        return (
            ["--model", uri, "--load-format", "runai_streamer"],
            [hf_home, {"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region}],
        )
    args = ["--model", model.id]
    if model.revision:
        args += ["--revision", model.revision]
    env_vars: list[dict[str, Any]] = [hf_home]
    if model.token_secret:
        env_vars.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": model.token_secret, "key": "token"}}}
        )
    return args, env_vars


def _engine_env(wiring: EngineWiring, model_env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        hash_seed_env(),
        {"name": "PROMETHEUS_MULTIPROC_DIR", "value": PROMETHEUS_DIR},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        *model_env,
        *wiring.env,
    ]


def catalog_disk(endpoint: Endpoint) -> EngineDisk:
    """The disk of an endpoint whose model the catalog knows (the LOB stack passes the disk of every endpoint, a
    model its file describes included: kvtier/stacks/lob.py)."""
    try:
        model = resolve_model(endpoint.model.id, {})
    except LookupError:
        raise ValueError(
            f"endpoint {endpoint.name!r}: model {endpoint.model.id!r} is not in the catalog; pass its disk"
        ) from None
    return engine_disk(endpoint, as_served(model, endpoint.kv_cache_dtype, endpoint.weight_format))


def _resources(endpoint: Endpoint, env: Environment, disk: EngineDisk) -> dict[str, Any]:
    """CPU, memory and GPU (kvtier/sizing.py), and the disk the pod writes: requests equal limits, so the scheduler
    keeps the room on the node's EBS volume and a pod that outgrows it is the one evicted, not a neighbour."""
    resources = worker_size(env.instance(endpoint.instance_type), endpoint.tensor_parallel, endpoint.cache).resources()
    for part in ("requests", "limits"):
        resources[part][EPHEMERAL] = disk.quantity(disk.total_gib)
    return resources


def _volumes(
    endpoint: Endpoint, wiring: EngineWiring, disk: EngineDisk
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, engine mounts)."""
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_GIB + wiring.shm_gib}Gi"}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if (files := wiring.files) is not None:
        volumes.append({"name": files.volume, "configMap": {"name": files.config_map}})
        mounts.append({"name": files.volume, "mountPath": files.mount_path, "readOnly": True})
    if endpoint.cache.l2 == "curvine":
        volumes.append({"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": L2_CLAIM}})
        mounts.append({"name": L2_VOLUME, "mountPath": L2_MOUNT_PATH})
    volumes.append({"name": "model-cache", "emptyDir": {"sizeLimit": disk.quantity(disk.model_cache_gib)}})
    mounts.append({"name": "model-cache", "mountPath": MODEL_CACHE})
    return volumes, mounts


def engine_deployment(env: Environment, lob: str, endpoint: Endpoint, disk: EngineDisk | None = None) -> dict[str, Any]:
    namespace = lob_namespace(lob)
    labels = engine_labels(endpoint.name)
    wiring = engine_wiring(endpoint)
    disk = disk or catalog_disk(endpoint)
    model_args, model_env = _model(env, endpoint)
    volumes, mounts = _volumes(endpoint, wiring, disk)
    # LoRA adapters (issue 35): fetched by init containers onto a volume the engine mounts.
    adapter_init, adapter_volumes, adapter_mounts, adapter_env = adapter_pod_parts(
        env, endpoint, engine_image(endpoint), disk.adapters_gib
    )
    volumes += adapter_volumes
    mounts += adapter_mounts
    args = [*model_args, *vllm_args(endpoint), "--port", str(ENGINE_PORT), *wiring.args, *lora_args(endpoint)]
    ports: list[dict[str, Any]] = [{"name": "http", "containerPort": ENGINE_PORT}]
    container = {
        "name": CONTAINER,
        "image": engine_image(endpoint),
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "env": [*_engine_env(wiring, model_env), *adapter_env],
        "ports": ports,
        "resources": _resources(endpoint, env, disk),
        "startupProbe": _probe(10, STARTUP_FAILURES),
        "readinessProbe": _probe(5, 3),
        "livenessProbe": _probe(15, 4),
        **({"lifecycle": hook} if (hook := lifecycle(endpoint)) else {}),
        "volumeMounts": mounts,
        # The vLLM image runs as root and writes its caches under /root and /tmp: root stays, the rest is dropped.
        "securityContext": container_security_context(read_only_root=False),
        # Why it stopped (a missing adapter, a bad flag): its last log lines, which `kvtier verify` shows.
        **TERMINATION_MESSAGE,
    }
    # What the connector's settings are (LMCache: its ConfigMap's whole data): a change rolls the pods.
    digest = hashlib.sha256(json.dumps(wiring.rollout, sort_keys=True).encode()).hexdigest()[:16]
    metadata: dict[str, Any] = {"name": endpoint.name, "namespace": namespace, "labels": labels}
    if annotations := l2_identity_annotations(endpoint):
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            # With autoscaling, KEDA's HPA owns the count: a replicas field would reset it on every apply.
            **({} if endpoint.autoscaling else {"replicas": endpoint.replicas}),
            # A new pod cannot get a GPU while the old ones hold them all: replace one at a time, never surge.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "engine"}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"kvtier.io/lmcache-config-sha256": digest}},
                "spec": {
                    **placement(env, "gpu").pod_spec(),
                    # S3 weights are read with the LOB's Pod Identity role through this service account.
                    **(
                        {"serviceAccountName": MODEL_READER_SA}
                        if isinstance(endpoint.model, S3Model) or reads_s3(endpoint)
                        else {}
                    ),
                    # The preStop drain waits up to the longest allowed request, then vLLM exits (drain.py).
                    "terminationGracePeriodSeconds": termination_grace_s(endpoint),
                    # vLLM never calls the Kubernetes API; Pod Identity mounts its own token for S3.
                    "automountServiceAccountToken": False,
                    "securityContext": pod_security_context(non_root=False),
                    **({"initContainers": adapter_init} if adapter_init else {}),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def engine_service(lob: str, endpoint: Endpoint) -> dict[str, Any]:
    """The vLLM pods behind one name, for metrics scraping and debugging; clients call the router."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": engine_service_name(endpoint.name), "namespace": lob_namespace(lob)},
        "spec": {
            "type": "ClusterIP",
            "selector": {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "engine"},
            "ports": [{"name": "http", "port": ENGINE_PORT, "targetPort": "http"}],
        },
    }


def add_standalone_engine(
    chart: KvtierChart,
    env: Environment,
    lob: str,
    endpoint: Endpoint,
    *,
    keda_role_arn: str | None = None,
    disk: EngineDisk | None = None,
) -> None:
    if (files := engine_wiring(endpoint).files) is not None:
        api_object(chart, files.volume, _config_map(lob, files))
    api_object(chart, "engine", engine_deployment(env, lob, endpoint, disk))
    api_object(chart, "engine-service", engine_service(lob, endpoint))
    api_object(chart, "engine-pdb", engine_pdb(lob, endpoint))
    add_standalone_autoscaling(chart, env, lob, endpoint, keda_role_arn=keda_role_arn)  # issue 33: per-LOB role
