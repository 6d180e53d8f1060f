"""The LOB's Kyverno Policy: valid against the upstream CRD, static settings emulation cannot show, and an EMULATION
of its admission on representative operator-rendered Pods.

There is no Kyverno CLI or API server offline, so `admit` below is an emulation, not Kyverno: it substitutes
`{{ ... }}` with JMESPath (the language Kyverno uses), runs `foreach` with its preconditions, applies the strategic
merge patch with the Pod schema's merge keys (containers and env by name, volumeMounts by mountPath, volumes by name),
and evaluates the validate rule's deny conditions. It shows what the policy asks for; that Kyverno 1.19 does the
same on a cluster is checked by the README procedure (`kubectl get pod -o yaml`), not here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jmespath  # type: ignore[import-untyped]
import pytest

from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.k8s.kyverno_policy import AUTOGEN_ANNOTATION, l2_policy
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.k8s.standalone import catalog_disk, engine_deployment
from kvtier.rules import load_checked
from kvtier.serving import L2_CLAIM, L2_IDENTITY_VAR, L2_MOUNT_PATH
from tests.support import CONFIG_DIR, shared_path
from tests.validation import crd_errors, validate_k8s

NAMESPACE = "kvtier-retail"
URL = "LMCACHE_REMOTE_URL"
MERGE_KEYS = {"containers": "name", "env": "name", "volumeMounts": "mountPath", "volumes": "name"}
_WHOLE = re.compile(r"^\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}$")
_ANY = re.compile(r"\{\{((?:(?!\{\{|\}\}).)*)\}\}")
_NAMESPACE_CONDITION = re.compile(r"^request\.namespace == '(?P<ns>[a-z0-9-]+)'$")


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, "dev")


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return l2_policy("retail")


# ---- Static assertions --------------------------------------------------------------------------------------------


def test_policy_validates_against_the_kyverno_crd(policy: dict[str, Any]) -> None:
    crd = shared_path("reference/crds/kyverno/kyverno.io_policies.yaml")
    assert crd_errors(crd, "v1", policy) == []
    broken = copy.deepcopy(policy)
    broken["spec"]["webhookConfiguration"]["failurePolicies"] = "Fail"  # misspelled: must fail, not vanish
    assert crd_errors(crd, "v1", broken) != []


def test_policy_matches_pods_at_create_only(policy: dict[str, Any]) -> None:
    assert policy["kind"] == "Policy" and policy["metadata"]["namespace"] == NAMESPACE
    for rule in policy["spec"]["rules"]:
        assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]}
        assert "exclude" not in rule
    assert policy["spec"]["background"] is False and policy["spec"]["admission"] is True


def test_autogen_is_off(policy: dict[str, Any]) -> None:
    """Without it Kyverno would copy the rules onto Deployments, which the operator reconciles."""
    assert policy["metadata"]["annotations"] == {AUTOGEN_ANNOTATION: "none"}


def test_admission_fails_closed_in_the_lob_namespace_only(policy: dict[str, Any]) -> None:
    webhook = policy["spec"]["webhookConfiguration"]
    assert webhook["failurePolicy"] == "Fail"
    assert "failurePolicy" not in policy["spec"]  # the deprecated field would be read only as a fallback
    (condition,) = webhook["matchConditions"]  # matchConditions make Kyverno build a per-policy webhook
    match = _NAMESPACE_CONDITION.match(condition["expression"])
    assert match and match["ns"] == NAMESPACE
    (validate,) = [r["validate"] for r in policy["spec"]["rules"] if "validate" in r]
    assert validate["failureAction"] == "Enforce"


def test_every_lob_gets_its_own_namespace() -> None:
    for lob in ("retail", "support", "a" * 20):
        p = l2_policy(lob)
        assert p["metadata"]["name"] == POLICY_NAME
        assert p["metadata"]["namespace"] == f"kvtier-{lob}"
        assert f"'kvtier-{lob}'" in p["spec"]["webhookConfiguration"]["matchConditions"][0]["expression"]


# ---- The emulation ------------------------------------------------------------------------------------------------


def _eval(expr: str, ctx: dict[str, Any]) -> Any:
    return jmespath.search(expr.strip(), ctx)


def substitute(value: Any, ctx: dict[str, Any]) -> Any:
    """Kyverno variables: a string that is one `{{ }}` keeps the result's type, otherwise results are inlined."""
    if isinstance(value, dict):
        return {substitute(k, ctx): substitute(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, ctx) for v in value]
    if not isinstance(value, str) or "{{" not in value:
        return value
    whole = _WHOLE.match(value)
    if whole:
        return _eval(whole["expr"], ctx)
    return _ANY.sub(lambda m: str(_eval(m.group(1), ctx)), value)


def _holds(condition: dict[str, Any], ctx: dict[str, Any]) -> bool:
    key, value = substitute(condition["key"], ctx), substitute(condition["value"], ctx)
    if condition["operator"] == "Equals":
        return bool(key == value)
    if condition["operator"] == "NotEquals":
        return bool(key != value)
    raise AssertionError(f"the emulation does not know operator {condition['operator']}")


def _conditions(block: dict[str, Any], ctx: dict[str, Any]) -> bool:
    assert set(block) <= {"all", "any"}
    return all(_holds(c, ctx) for c in block.get("all", [])) and (
        "any" not in block or any(_holds(c, ctx) for c in block["any"])
    )


def merge(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge with the Pod schema's merge keys; an entry whose key appears twice is patched twice."""
    if isinstance(patch, dict) and isinstance(target, dict):
        out = dict(target)
        for key, value in patch.items():
            out[key] = merge(target.get(key), value, key) if key in target else copy.deepcopy(value)
        return out
    if isinstance(patch, list) and isinstance(target, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        out_list = [copy.deepcopy(item) for item in target]
        for item in patch:
            hits = [i for i, existing in enumerate(out_list) if existing.get(key) == item[key]]
            for i in hits:
                out_list[i] = merge(out_list[i], item)
            if not hits:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def _webhook_applies(policy: dict[str, Any], namespace: str) -> bool:
    if policy["metadata"]["namespace"] != namespace:  # a namespaced Policy sees its namespace only
        return False
    for condition in policy["spec"]["webhookConfiguration"]["matchConditions"]:
        match = _NAMESPACE_CONDITION.match(condition["expression"])
        assert match, "the emulation understands only `request.namespace == '<ns>'`"
        if match["ns"] != namespace:
            return False
    return True


def admit(policy: dict[str, Any], pod: dict[str, Any], namespace: str = NAMESPACE) -> tuple[dict[str, Any], str | None]:
    """(the pod after mutation, the denial message or None)."""
    if not _webhook_applies(policy, namespace):
        return pod, None
    for rule in policy["spec"]["rules"]:
        if "mutate" not in rule:
            continue
        for each in rule["mutate"]["foreach"]:
            request = {"object": pod, "namespace": namespace, "operation": "CREATE"}
            for index, element in enumerate(jmespath.search(each["list"], {"request": request}) or []):
                ctx = {"request": {"object": pod, "namespace": namespace}, "element": element, "elementIndex": index}
                if _conditions(each.get("preconditions", {}), ctx):
                    pod = merge(pod, substitute(each["patchStrategicMerge"], ctx))
    for rule in policy["spec"]["rules"]:
        if "validate" not in rule:
            continue
        for each in rule["validate"]["foreach"]:
            request = {"object": pod, "namespace": namespace}
            for index, element in enumerate(jmespath.search(each["list"], {"request": request}) or []):
                ctx = {"request": request, "element": element, "elementIndex": index}
                if _conditions(each.get("preconditions", {}), ctx) and _conditions(each["deny"]["conditions"], ctx):
                    return pod, str(rule["validate"]["message"])
    return pod, None


# ---- Representative pods ------------------------------------------------------------------------------------------


def operator_pod(
    config: Config, endpoint: Endpoint, *, url: int = 1, app_label: bool = True, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """A pod as the operator renders it (AWS/Curvine blog: vLLM container named after the IEC, a reverse proxy and an
    OpenTelemetry collector; NODE_IP before the injected `sagemaker-hyperpod://$(NODE_IP):9200`), with the IEC's
    worker environment. `url` is how many LMCACHE_REMOTE_URL entries the operator left (2: a user duplicate)."""
    iec = inference_endpoint_config(config.env, "retail", endpoint)
    env: list[dict[str, Any]] = [{"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]
    env += iec["spec"]["worker"]["environmentVariables"]
    env += [{"name": URL, "value": "sagemaker-hyperpod://$(NODE_IP):9200"}] * url
    labels = {"app": endpoint.name} if app_label else {"pod-template-hash": "5d9c"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{endpoint.name}-5d9c-", "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": endpoint.name,
                    "image": iec["spec"]["worker"]["image"],
                    "args": iec["spec"]["worker"]["args"],
                    "env": env,
                    "resources": iec["spec"]["worker"]["resources"],
                    "volumeMounts": [
                        {"name": "model-weights", "mountPath": "/opt/ml/model"},
                        {"name": "lmcache-config", "mountPath": "/opt/lmcache"},
                    ],
                },
                {"name": "reverse-proxy", "image": "proxy:1", "env": [{"name": "PORT", "value": "8080"}]},
                {"name": "otel-collector", "image": "otel:1"},
            ],
            "volumes": [
                {"name": "model-weights", "emptyDir": {}},
                {"name": "lmcache-config", "configMap": {"name": f"{endpoint.name}-lmcache-config"}},
            ],
        },
    }


def _endpoint(config: Config, name: str = "qwen3-8b", **update: Any) -> Endpoint:
    return config.lob("retail").endpoints[0].model_copy(update={"name": name, **update})


def _env(container: dict[str, Any], name: str) -> list[Any]:
    return [e.get("value") for e in container.get("env", []) if e["name"] == name]


def _check_rewired(pod: dict[str, Any], endpoint: Endpoint) -> None:
    worker, *others = pod["spec"]["containers"]
    identity = l2_identity(endpoint)
    assert re.fullmatch(r"[0-9a-f]{12}", identity)
    assert _env(worker, URL) == [f"fs://localhost:0/mnt/kvtier/l2/{endpoint.name}/{identity}/"]
    assert _env(worker, "LMCACHE_REMOTE_SERDE") == ["naive"]
    assert _env(worker, "PYTHONHASHSEED") == ["0"]
    assert [m for m in worker["volumeMounts"] if m["mountPath"] == L2_MOUNT_PATH] == [
        {"name": "kvtier-l2", "mountPath": L2_MOUNT_PATH}
    ]
    assert [v for v in pod["spec"]["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == L2_CLAIM] == [
        {"name": "kvtier-l2", "persistentVolumeClaim": {"claimName": L2_CLAIM}}
    ]
    for other in others:  # the proxy and the collector are not touched
        assert not any(m["mountPath"] == L2_MOUNT_PATH for m in other.get("volumeMounts", []))
        assert _env(other, URL) == []
    validate_k8s({**pod, "metadata": {**pod["metadata"], "name": f"{endpoint.name}-x"}})


@pytest.mark.parametrize("url", [1, 0], ids=["operator-injected-url", "no-url"])
def test_emulated_rewiring_of_an_operator_pod(config: Config, policy: dict[str, Any], url: int) -> None:
    pod, denied = admit(policy, operator_pod(config, _endpoint(config), url=url))
    assert denied is None
    _check_rewired(pod, _endpoint(config))


def test_emulated_rewiring_keeps_two_endpoints_apart(config: Config, policy: dict[str, Any]) -> None:
    for name in ("qwen3-8b", "llama-chat"):
        pod, denied = admit(policy, operator_pod(config, _endpoint(config, name)))
        assert denied is None
        _check_rewired(pod, _endpoint(config, name))


def test_emulated_rewiring_is_idempotent(config: Config, policy: dict[str, Any]) -> None:
    """Kyverno may reinvoke mutation (reinvocationPolicy); a second pass changes nothing."""
    once, _ = admit(policy, operator_pod(config, _endpoint(config)))
    twice, denied = admit(policy, once)
    assert denied is None and twice == once


def test_emulated_policy_leaves_other_pods_alone(config: Config, policy: dict[str, Any]) -> None:
    tiered = operator_pod(config, _endpoint(config, cache=CacheConfig(l2="tieredstorage")))
    standalone_endpoint = _endpoint(config, mode="standalone", image=None)
    standalone = engine_deployment(config.env, "retail", standalone_endpoint)["spec"]["template"]
    standalone_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": standalone["metadata"], "spec": standalone["spec"]}
    janitor = {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": "janitor"}]}}
    for pod in (tiered, standalone_pod, janitor):
        after, denied = admit(policy, pod)
        assert denied is None and after == pod
    other_namespace = operator_pod(config, _endpoint(config), namespace="kvtier-support")
    assert admit(policy, other_namespace, "kvtier-support") == (other_namespace, None)


def test_emulated_policy_rejects_what_it_cannot_rewire(config: Config, policy: dict[str, Any]) -> None:
    """A render kvtier did not foresee fails admission loudly instead of running without L2."""
    duplicate, denied = admit(policy, operator_pod(config, _endpoint(config), url=2))
    assert denied is not None and len(_env(duplicate["spec"]["containers"][0], URL)) == 2
    _, denied = admit(policy, operator_pod(config, _endpoint(config), app_label=False))
    assert denied is not None and "app" in denied
    overridden = operator_pod(config, _endpoint(config))
    extra = '{"kv_connector":"LMCacheConnectorV1","kv_connector_extra_config":{"lmcache.remote_url":"x://h:1"}}'
    overridden["spec"]["containers"][0]["args"] += ["--kv-transfer-config", extra]
    _, denied = admit(policy, overridden)
    assert denied is not None


# ---- L2 identity: what makes KV incompatible gets its own directory, in both modes --------------------------------


def _changed(config: Config, change: str) -> Endpoint:
    base = _endpoint(config)
    model = base.model
    updates: dict[str, dict[str, Any]] = {
        "model": {"model": model.model_copy(update={"id": "Qwen/Qwen3-8B-Base"})},  # same shape, other weights
        "revision": {"model": model.model_copy(update={"revision": "a" * 40})},
        "weights_version": {"model": model.model_copy(update={"weights_version": "2026-12-01"})},
        "dtype": {"dtype": "float16"},
        "tensor_parallel": {"instance_type": "ml.g6e.12xlarge", "tensor_parallel": 2},
        "image": {"image": "public.ecr.aws/deep-learning-containers/vllm:0.12.0-gpu-py312-cu129-ubuntu22.04-ec2-v1.0"},
        "chunk_size": {"cache": base.cache.model_copy(update={"chunk_size": 512})},
    }
    return base.model_copy(update=updates[change])


CHANGES = ["model", "revision", "weights_version", "dtype", "tensor_parallel", "image", "chunk_size"]


def _operator_url(config: Config, policy: dict[str, Any], endpoint: Endpoint) -> str:
    pod, denied = admit(policy, operator_pod(config, endpoint))
    assert denied is None
    _check_rewired(pod, endpoint)
    (url,) = _env(pod["spec"]["containers"][0], URL)
    return str(url)


def _standalone_url(config: Config, endpoint: Endpoint) -> str:
    standalone = endpoint.model_copy(update={"mode": "standalone"})
    disk = catalog_disk(_endpoint(config))  # a changed model id may be one the catalog does not list
    container = engine_deployment(config.env, "retail", standalone, disk)["spec"]["template"]["spec"]["containers"][0]
    (url,) = _env(container, URL)
    return str(url)


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_that_breaks_kv_moves_the_pod_to_a_new_l2_directory(
    config: Config, policy: dict[str, Any], change: str
) -> None:
    """Operator mode through the emulated Policy (the pod carries its identity), standalone mode in its pod template."""
    before, after = _endpoint(config), _changed(config, change)
    old, new = _operator_url(config, policy, before), _operator_url(config, policy, after)
    assert old != new and old.rsplit("/", 3)[1] == new.rsplit("/", 3)[1] == "qwen3-8b"  # same endpoint directory
    assert _standalone_url(config, before) != _standalone_url(config, after)


def test_an_unchanged_endpoint_keeps_its_directory(config: Config, policy: dict[str, Any]) -> None:
    """Things that leave the KV alone (replicas, memory, routing) keep the directory: no needless cold start."""
    before = _endpoint(config)
    after = before.model_copy(update={"replicas": 3, "gpu_memory_utilization": 0.8, "routing": "session"})
    assert _operator_url(config, policy, before) == _operator_url(config, policy, after)
    assert _standalone_url(config, before) == _standalone_url(config, after)


def test_both_modes_name_the_same_directory(config: Config, policy: dict[str, Any]) -> None:
    """Same model, weights and image: the Policy's URL for the operator pod is the standalone engine's."""
    endpoint = _endpoint(config, image="lmcache/vllm-openai:v0.4.3")
    assert _operator_url(config, policy, endpoint) == _standalone_url(config, endpoint)


def test_emulated_policy_rejects_a_pod_without_its_identity(config: Config, policy: dict[str, Any]) -> None:
    """The identity must come with the pod; without it the pod would share the endpoint's directory across models."""
    for value in (None, "abc"):
        pod = operator_pod(config, _endpoint(config))
        worker = pod["spec"]["containers"][0]
        worker["env"] = [e for e in worker["env"] if e["name"] != L2_IDENTITY_VAR]
        if value is not None:
            worker["env"].append({"name": L2_IDENTITY_VAR, "value": value})
        _, denied = admit(policy, pod)
        assert denied is not None and L2_IDENTITY_VAR in denied
