"""Operator mode: every InferenceEndpointConfig kvtier can render passes the upstream CRD schema with closed objects
(a misspelled field fails here instead of being pruned silently by the API server), and says what the design asks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.catalog import INSTANCE_TYPES
from kvtier.config.endpoint import (
    Autoscaling,
    CacheConfig,
    CloudWatchTrigger,
    Endpoint,
    HuggingFaceModel,
    PrometheusTrigger,
    S3Model,
)
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity
from kvtier.k8s.endpoint_names import endpoint_url, operator_router_pod_label
from kvtier.k8s.operator_endpoint import inference_endpoint_config, model_name, operator_router_service
from kvtier.naming import L2_IDENTITY_ANNOTATION
from kvtier.rules import load_checked
from kvtier.sizing import worker_size
from kvtier.versions import OPERATOR_VLLM_IMAGE
from tests.support import CONFIG_DIR, shared_path
from tests.validation import crd_errors, validate_k8s

IEC_CRD = "reference/crds/inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"


@pytest.fixture(scope="module")
def crd() -> Path:
    return shared_path(IEC_CRD)


@pytest.fixture(scope="module")
def dev() -> Config:
    return load_checked(CONFIG_DIR, "dev")


def _retail(config: Config) -> Endpoint:
    return config.lob("retail").endpoints[0]


def _env(iec: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in iec["spec"]["worker"]["environmentVariables"]}


def test_default_endpoint_reproduces_the_reference(dev: Config, crd: Path) -> None:
    """Reference deployment (aws-hyperpod.md 5, step 2): placeholder L2, prefix-aware routing, port 8000, /health."""
    iec = inference_endpoint_config(dev.env, "retail", _retail(dev))
    assert crd_errors(crd, "v1", iec) == []
    spec = iec["spec"]
    identity = l2_identity(_retail(dev))
    assert iec["metadata"]["name"] == "qwen3-8b" and iec["metadata"]["namespace"] == "kvtier-retail"
    assert iec["metadata"]["annotations"][L2_IDENTITY_ANNOTATION] == identity
    assert spec["kvCacheSpec"] == {
        "enableL1Cache": True,
        "enableL2Cache": True,
        "l2CacheSpec": {"l2CacheBackend": "tieredstorage"},
    }
    assert spec["intelligentRoutingSpec"] == {"enabled": True, "routingStrategy": "prefixaware"}
    assert spec["metrics"]["modelMetrics"]["port"] == 8000
    assert spec["loadBalancer"]["healthCheckPath"] == "/health"
    worker = spec["worker"]
    assert worker["image"] == OPERATOR_VLLM_IMAGE
    assert worker["resources"]["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
    args = worker["args"]
    for flag, value in (("--model", "/opt/ml/model"), ("--max-model-len", "16384"), ("--tensor-parallel-size", "1")):
        assert args[args.index(flag) + 1] == value
    env = _env(iec)
    assert env["PYTHONHASHSEED"] == "0" and env["LMCACHE_REMOTE_SERDE"] == "naive"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "20.0"  # the L1 size
    assert "LMCACHE_REMOTE_URL" not in env  # the operator injects one; a second would be a duplicate entry
    assert env["KVTIER_L2_BACKEND"] == "curvine" and env["KVTIER_L2_IDENTITY"] == identity  # read by the Policy
    assert spec["invocationEndpoint"] == "v1/chat/completions" and "--dtype" not in args


def test_api_and_dtype_reach_the_iec(dev: Config) -> None:
    endpoint = _retail(dev).model_copy(update={"api": "completions", "dtype": "bfloat16"})
    spec = inference_endpoint_config(dev.env, "retail", endpoint)["spec"]
    assert spec["invocationEndpoint"] == "v1/completions"
    args = spec["worker"]["args"]
    assert args[args.index("--dtype") + 1] == "bfloat16"
    no_l2 = _retail(dev).model_copy(update={"cache": CacheConfig(l2="none")})
    iec = inference_endpoint_config(dev.env, "retail", no_l2)
    assert "annotations" not in iec["metadata"] and "KVTIER_L2_IDENTITY" not in _env(iec)


def test_misspelled_field_fails_the_closed_schema(dev: Config, crd: Path) -> None:
    iec = inference_endpoint_config(dev.env, "retail", _retail(dev))
    for path in (("spec", "kvCacheSpec"), ("spec", "worker"), ("spec",)):
        broken = copy.deepcopy(iec)
        target = broken
        for key in path:
            target = target[key]
        target["enableL2Cahce"] = True
        assert any("enableL2Cahce" in e for e in crd_errors(crd, "v1", broken)), path
    broken = copy.deepcopy(iec)
    broken["spec"]["kvCacheSpec"]["l2CacheSpec"]["l2CacheBackend"] = "curvine"  # the CRD cannot name a filesystem L2
    assert crd_errors(crd, "v1", broken) != []


AMP = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123abcd-4567"
TRIGGERS = st.one_of(
    st.builds(
        PrometheusTrigger,
        type=st.just("prometheus"),
        server_address=st.just(AMP),
        query=st.just("sum(vllm:num_requests_waiting)"),
        target_value=st.sampled_from([1.0, 5.0]),
    ),
    st.builds(
        CloudWatchTrigger,
        type=st.just("cloudwatch"),
        namespace=st.just("AWS/SageMaker"),
        metric_name=st.just("Invocations"),
        dimensions=st.just({"EndpointName": "x"}),
        target_value=st.just(10.0),
    ),
)
MODELS = st.one_of(
    st.builds(
        HuggingFaceModel,
        source=st.just("huggingface"),
        id=st.just("Qwen/Qwen3-8B"),
        token_secret=st.sampled_from([None, "hf-token"]),
        revision=st.sampled_from([None, "a" * 40]),
    ),
    st.builds(
        S3Model,
        source=st.just("s3"),
        id=st.just("Qwen/Qwen3-32B"),
        bucket=st.just("models-bucket"),
        prefix=st.just("qwen/qwen3-32b/"),
        region=st.sampled_from([None, "us-east-1"]),
    ),
)


@st.composite
def endpoints(draw: st.DrawFn) -> Endpoint:
    instance = draw(st.sampled_from(["ml.g6e.4xlarge", "ml.g6e.12xlarge", "ml.g6e.48xlarge", "ml.p5.48xlarge"]))
    gpus = INSTANCE_TYPES[instance].gpus
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if gpus % d == 0]))
    autoscaling = draw(
        st.one_of(st.none(), st.builds(Autoscaling, min_replicas=st.just(1), max_replicas=st.just(4), trigger=TRIGGERS))
    )
    return Endpoint(
        name=draw(st.sampled_from(["qwen3-8b", "a" * 28])),
        model=draw(MODELS),
        instance_type=instance,
        replicas=draw(st.integers(1, 4)),
        tensor_parallel=tp,
        cache=draw(
            st.builds(
                CacheConfig,
                l1_gb=st.sampled_from([0.0, 20.0]),
                l2=st.sampled_from(["curvine", "tieredstorage", "none"]),
            )
        ),
        routing=draw(st.sampled_from(["prefixaware", "kvaware", "session", "roundrobin"])),
        autoscaling=autoscaling,
    )


@settings(deadline=None, max_examples=60)
@given(endpoint=endpoints())
def test_every_rendered_config_passes_the_crd(endpoint: Endpoint) -> None:
    config = load_checked(CONFIG_DIR, "prod")
    iec = inference_endpoint_config(config.env, "a" * 20, endpoint)
    assert crd_errors(shared_path(IEC_CRD), "v1", iec) == []
    spec = iec["spec"]
    env = _env(iec)
    assert spec["intelligentRoutingSpec"]["routingStrategy"] == endpoint.routing
    assert spec["kvCacheSpec"]["enableL2Cache"] is (endpoint.cache.l2 != "none")
    assert ("KVTIER_L2_BACKEND" in env) is (endpoint.cache.l2 == "curvine")  # what the Kyverno policy looks for
    # Tiered Storage is one key space for the cluster: each endpoint's keys start from a seed of its own (issue 34).
    assert (env["PYTHONHASHSEED"] == "0") is (endpoint.cache.l2 != "tieredstorage")
    assert 0 <= int(env["PYTHONHASHSEED"]) < 2**32  # what CPython accepts
    assert spec["worker"]["resources"]["requests"]["nvidia.com/gpu"] == str(endpoint.tensor_parallel)
    assert ("autoScalingSpec" in spec) is (endpoint.autoscaling is not None)
    source = spec["modelSourceConfig"]
    if isinstance(endpoint.model, S3Model):
        assert source["s3Storage"]["region"] == (endpoint.model.region or "us-east-1")
        assert source["modelLocation"] == endpoint.model.prefix
    elif endpoint.model.token_secret:
        assert source["huggingFaceModel"]["tokenSecretRef"] == {"name": endpoint.model.token_secret, "key": "token"}


def test_sizing_follows_instance_and_tensor_parallelism() -> None:
    cache = CacheConfig(l1_gb=20)
    assert worker_size(INSTANCE_TYPES["ml.g6e.4xlarge"], 1, cache).resources()["requests"] == {
        "cpu": "8",
        "memory": "32Gi",
        "nvidia.com/gpu": "1",
    }
    big = worker_size(INSTANCE_TYPES["ml.g6e.48xlarge"], 4, cache)  # 192 vCPU, 1536 GiB, 8 GPUs
    assert (big.gpus, big.cpu, big.memory_gib) == (4, 4 * 12, 4 * 48)
    # A large L1 raises memory above the per-GPU share: it is pinned at start and must fit the limit.
    assert worker_size(INSTANCE_TYPES["ml.g6e.4xlarge"], 1, CacheConfig(l1_gb=60)).memory_gib >= 60 + 8


def test_model_name_fits_the_crd_for_the_longest_names() -> None:
    name = model_name("e" * 12, "l" * 20, "n" * 28)
    assert len(name) <= 63


def test_operator_router_service() -> None:
    service = operator_router_service("r" * 20, "e" * 28)
    validate_k8s(service)
    assert len(service["metadata"]["name"]) <= 63
    assert len(operator_router_pod_label("r" * 20, "e" * 28)) <= 63  # a label value
    assert endpoint_url("retail", "qwen3-8b", "operator") == (
        "http://retail-qwen3-8b-router.hyperpod-inference-system.svc.cluster.local:8081"
    )


def test_fetch_crds_script_uses_the_pins() -> None:
    """`make crds` downloads the CRDs of the versions kvtier pins (the script never runs in tests: no network)."""
    from kvtier.versions import HYPERPOD_CLI_CRD_COMMIT, KYVERNO_APP_VERSION
    from tests.support import ROOT

    script = (ROOT / "scripts" / "fetch-crds.sh").read_text(encoding="utf-8")
    assert f'HPCLI_COMMIT="{HYPERPOD_CLI_CRD_COMMIT}"' in script
    assert f'KYVERNO_TAG="{KYVERNO_APP_VERSION}"' in script
    assert "inference.sagemaker.aws.amazon.com_${crd}.yaml" in script and "kyverno.io_${crd}.yaml" in script
