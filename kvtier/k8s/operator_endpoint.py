"""Operator mode: one `InferenceEndpointConfig` (HyperPod Inference Operator, CRD v1) per endpoint.

The operator renders the Deployment, its router and its load balancer. For `l2: curvine` the CRD cannot name a
filesystem L2: the endpoint declares the placeholder backend `tieredstorage` and the LOB's Kyverno Policy rewires
its pods (kyverno_policy.py). The operator's router pods are reached through a kvtier Service (endpoint_names.py).
"""

from __future__ import annotations

import json
from typing import Any

from kvtier.catalog import WEIGHT_FORMATS
from kvtier.config.endpoint import Endpoint, HuggingFaceModel
from kvtier.config.environment import Environment
from kvtier.connectors import connector_for, engine_image
from kvtier.k8s.autoscaling import operator_autoscaling_spec
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.disruption import engine_pdb
from kvtier.k8s.endpoint_names import (
    OPERATOR_NAMESPACE,
    OPERATOR_ROUTER_PORT,
    operator_router_pod_label,
    operator_router_service_name,
)
from kvtier.naming import L2_IDENTITY_ANNOTATION, L2_IDENTITY_FACTS_ANNOTATION, lob_namespace
from kvtier.sizing import EngineDisk, worker_size

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
KIND = "InferenceEndpointConfig"
MODEL_PATH = "/opt/ml/model"  # where the operator mounts the weights; also the model name in every LMCache key
MODEL_VOLUME = "model-weights"
VLLM_PORT = 8000
HEALTH_PATH = "/health"  # vLLM; the CRD's default /ping is SageMaker's
INVOCATION_PATHS = {"chat": "v1/chat/completions", "completions": "v1/completions"}  # by the endpoint's `api`
PLACEHOLDER_L2 = "tieredstorage"  # the only backend besides redis the CRD accepts; Kyverno replaces it for curvine


def model_name(env: str, lob: str, endpoint: str) -> str:
    """SageMaker model name: unique per account and region across environments (12 + 20 + 28 + 2 <= 63)."""
    return f"{env}-{lob}-{endpoint}"


def _model_source(env: Environment, endpoint: Endpoint) -> dict[str, Any]:
    model = endpoint.model
    # Prefetch stays off: with kvCacheSpec it is reported to fail with "Not found: lmcache-config" (aws-hyperpod.md 4.2).
    if isinstance(model, HuggingFaceModel):
        hf: dict[str, Any] = {"modelId": model.id}
        if model.revision:
            hf["commitSHA"] = model.revision
        if model.token_secret:
            hf["tokenSecretRef"] = {"name": model.token_secret, "key": "token"}
        return {"modelSourceType": "huggingface", "huggingFaceModel": hf, "prefetchEnabled": False}
    return {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": model.bucket, "region": model.region or env.region},
        "modelLocation": model.prefix,
        "prefetchEnabled": False,
    }


def vllm_args(endpoint: Endpoint) -> list[str]:
    """vLLM server flags shared by both modes, after `--model` (L0 prefix caching is on by default in vLLM V1).
    `--enable-prompt-tokens-details` puts each request's cached tokens (its GPU prefix cache's and its KV
    connector's) in its `usage`: what `kvtier verify --probe --isolation` judges by (vLLM 0.11.1 and 0.32.0 both
    take it; docs/references.md "Issue 34")."""
    return [
        "--enable-prompt-tokens-details",
        "--served-model-name",
        endpoint.model.id,
        "--max-model-len",
        str(endpoint.max_model_len),
        "--tensor-parallel-size",
        str(endpoint.tensor_parallel),
        "--gpu-memory-utilization",
        str(endpoint.gpu_memory_utilization),
        "--block-size",
        str(endpoint.block_size),
        *(["--dtype", endpoint.dtype] if endpoint.dtype != "auto" else []),
        *model_kind_args(endpoint),
    ]


def model_kind_args(endpoint: Endpoint) -> list[str]:
    """Issue 36: `--kv-cache-dtype` (a value both the operator image's vLLM 0.11.1 and vLLM 0.32.0 accept,
    kvtier/catalog.py `KvCacheDtype`) and `--quantization` for an explicit weight format; the operator's CRD passes
    worker args through as given (its `args`), so both modes render them alike."""
    args: list[str] = []
    if endpoint.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", endpoint.kv_cache_dtype]
    quantization = WEIGHT_FORMATS[endpoint.weight_format].quantization if endpoint.weight_format else None
    if quantization:
        args += ["--quantization", quantization]
    return args


def l2_identity_annotations(endpoint: Endpoint) -> dict[str, str]:
    """The endpoint's L2 identity and its facts (empty without an L2): its Curvine directory, or on Tiered Storage its
    key space (the hash seed), for `validate --previous`."""
    if endpoint.cache.l2 == "none":
        return {}
    connector = connector_for(endpoint)
    facts = json.dumps(connector.identity_facts(endpoint), sort_keys=True, separators=(",", ":"))
    return {L2_IDENTITY_ANNOTATION: connector.l2_identity(endpoint), L2_IDENTITY_FACTS_ANNOTATION: facts}


def worker_env(lob: str, endpoint: Endpoint) -> list[dict[str, Any]]:
    """The connector's worker env (LMCache's settings, hash seed, metrics directory and, for `l2: curvine`, what the
    Kyverno Policy builds the L2 URL from: kvtier/connectors/lmcache.py `operator_env`)."""
    return connector_for(endpoint).operator_env(endpoint, lob_namespace(lob))


def kv_cache_spec(endpoint: Endpoint) -> dict[str, Any]:
    l2 = endpoint.cache.l2
    spec: dict[str, Any] = {"enableL1Cache": endpoint.cache.l1_gb > 0, "enableL2Cache": l2 != "none"}
    if l2 != "none":
        spec["l2CacheSpec"] = {"l2CacheBackend": PLACEHOLDER_L2}
    return spec


def worker_resources(env: Environment, endpoint: Endpoint, disk: EngineDisk | None) -> dict[str, Any]:
    """CPU, memory and GPU; with `disk`, an ephemeral-storage request for what the pod writes to its node (issue 38).
    A request only: where the operator downloads the weights is not documented, so a limit could evict a pod whose
    volumes kvtier cannot see; the request still keeps the room on the node (the scheduler counts it)."""
    resources = worker_size(env.instance(endpoint.instance_type), endpoint.tensor_parallel, endpoint.cache).resources()
    if disk is not None:
        resources["requests"]["ephemeral-storage"] = disk.quantity(disk.total_gib)
    return resources


def inference_endpoint_config(
    env: Environment, lob: str, endpoint: Endpoint, disk: EngineDisk | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modelName": model_name(env.name, lob, endpoint.name),
        "instanceType": endpoint.instance_type,
        "replicas": endpoint.replicas,
        "invocationEndpoint": INVOCATION_PATHS[endpoint.api],
        "modelSourceConfig": _model_source(env, endpoint),
        "worker": {
            "image": engine_image(endpoint),
            "args": ["--model", MODEL_PATH, *vllm_args(endpoint)],
            "modelInvocationPort": {"containerPort": VLLM_PORT, "name": "http"},
            "modelVolumeMount": {"name": MODEL_VOLUME, "mountPath": MODEL_PATH},
            "resources": worker_resources(env, endpoint, disk),
            "environmentVariables": worker_env(lob, endpoint),
        },
        "kvCacheSpec": kv_cache_spec(endpoint),
        # Immutable once set: a new routing strategy replaces the endpoint (design, "Operator mode").
        "intelligentRoutingSpec": {"enabled": True, "routingStrategy": endpoint.routing},
        "metrics": {"enabled": True, "modelMetrics": {"path": "/metrics", "port": VLLM_PORT}},
        "loadBalancer": {"healthCheckPath": HEALTH_PATH},
        "tags": [
            {"name": "kvtier:environment", "value": env.name},
            {"name": "kvtier:line-of-business", "value": lob},
            {"name": "kvtier:endpoint", "value": endpoint.name},
        ],
    }
    if endpoint.autoscaling is not None:
        spec["autoScalingSpec"] = operator_autoscaling_spec(env, lob, endpoint)
    metadata: dict[str, Any] = {"name": endpoint.name, "namespace": lob_namespace(lob)}
    if annotations := l2_identity_annotations(endpoint):
        metadata["annotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": spec,
    }


def operator_router_service(lob: str, endpoint: str) -> dict[str, Any]:
    """A stable in-cluster name for the router the operator renders (its own Service name is not documented)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": operator_router_service_name(lob, endpoint),
            "namespace": OPERATOR_NAMESPACE,
            "labels": {"kvtier.io/endpoint": endpoint, "kvtier.io/line-of-business": lob},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": operator_router_pod_label(lob, endpoint)},
            "ports": [{"name": "http", "port": OPERATOR_ROUTER_PORT, "targetPort": OPERATOR_ROUTER_PORT}],
        },
    }


def add_operator_endpoint(
    chart: KvtierChart, env: Environment, lob: str, endpoint: Endpoint, disk: EngineDisk | None = None
) -> None:
    api_object(chart, "endpoint", inference_endpoint_config(env, lob, endpoint, disk))
    api_object(chart, "router-service", operator_router_service(lob, endpoint.name))
    # The operator renders no PodDisruptionBudget (its ClusterRole has no `policy` rules; docs/references.md
    # "Issue 38"): kvtier's keeps one replica through drains (kvtier/k8s/disruption.py).
    api_object(chart, "engine-pdb", engine_pdb(lob, endpoint))
