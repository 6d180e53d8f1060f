"""Each LOB's Kyverno ClusterPolicy guard (kvtier/k8s/lob_admission.py): valid against Kyverno's ClusterPolicy CRD,
and hostile cases through an EMULATION of Kyverno 1.19 (tests/k8s/kyverno_emulation.py: its JMESPath fork's failures
on missing keys, its operators' wildcards, a rule error refusing the request) with `match` (kinds, namespaces,
names, operations) and `exclude` subjects here. No Kyverno runs offline (docs/security.md).

The hostile principal is LOB `support`'s namespace admin; the victim is LOB `retail` (docs/security.md). The guard
of `support` must refuse every `support` object that names `retail`'s bucket, prefix, PV or L2 directory, and let
kvtier's own objects through. `KVTIER_ADMISSION_BREAK=guard` renders no guard: `test_the_lob_stack_applies_its_guard`
fails then, and so do the hostile cases (nothing refuses them).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtier.config.endpoint import S3Model
from kvtier.config.loader import Config
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.breaks import admission_broken
from kvtier.k8s.lob_admission import OPERATOR_SUBJECT, guard_name, lob_guard
from kvtier.k8s.namespace import lob_namespace_object
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.rules import load_checked
from tests.k8s.kyverno_emulation import UnresolvedError, holds
from tests.k8s.pod_security import violations
from tests.support import CONFIG_DIR, Synth, shared_path
from tests.validation import crd_errors

ENV = "prod"
ROLE = "arn:aws:iam::111122223333:role/kvtier-prod-support-keda"
VICTIM_ROLE = "arn:aws:iam::111122223333:role/kvtier-prod-retail-keda"
BROKEN = admission_broken("guard")


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, ENV)


def _with_s3(lob: LineOfBusiness, bucket: str, prefix: str) -> LineOfBusiness:
    """`lob` whose first endpoint reads S3 weights from (bucket, prefix)."""
    first = lob.endpoints[0]
    model = S3Model(source="s3", id=first.model.id, bucket=bucket, prefix=prefix)
    return lob.model_copy(update={"endpoints": (first.model_copy(update={"model": model}), *lob.endpoints[1:])})


@pytest.fixture(scope="module")
def support(config: Config) -> LineOfBusiness:
    return _with_s3(config.lob("support"), "models-shared", "support/llama")


@pytest.fixture(scope="module")
def retail(config: Config) -> LineOfBusiness:
    return _with_s3(config.lob("retail"), "models-retail", "retail/qwen")


@pytest.fixture(scope="module")
def guard(support: LineOfBusiness) -> dict[str, Any] | None:
    if BROKEN:
        return None
    return lob_guard(ENV, support, operator_pods=True, inference_operator=True, keda_role_arn=ROLE)


# ---- The emulation ------------------------------------------------------------------------------------------------


def _kind_matches(kinds: list[str], obj: dict[str, Any]) -> bool:
    group_version = obj["apiVersion"]
    return any(k == obj["kind"] or k == f"{group_version}/{obj['kind']}" for k in kinds)


def _matches(block: dict[str, Any], obj: dict[str, Any], operation: str, user: dict[str, Any]) -> bool:
    for alternative in block["any"]:
        if "subjects" in alternative:
            sa = f"system:serviceaccount:{OPERATOR_SUBJECT['namespace']}:{OPERATOR_SUBJECT['name']}"
            if user.get("username") == sa and alternative["subjects"] == [OPERATOR_SUBJECT]:
                return True
            continue
        r = alternative["resources"]
        if not _kind_matches(r["kinds"], obj) or operation not in r["operations"]:
            continue
        if "namespaces" in r and obj["metadata"].get("namespace") not in r["namespaces"]:
            continue
        if "names" in r and obj["metadata"]["name"] not in r["names"]:
            continue
        return True
    return False


def admit(
    policy: dict[str, Any] | None, obj: dict[str, Any], operation: str = "CREATE", user: dict[str, Any] | None = None
) -> str | None:
    """The denial message, or None when the guard admits `obj` (or there is no guard)."""
    if policy is None:
        return None
    user = user or {"username": "kubernetes-admin"}
    request = {"object": obj, "operation": operation, "namespace": obj["metadata"].get("namespace", "")}
    ctx = {"request": request}
    assert policy["spec"]["webhookConfiguration"]["failurePolicy"] == "Fail"  # a rule error refuses the request
    for rule in policy["spec"]["rules"]:
        if not _matches(rule["match"], obj, operation, user):
            continue
        if "exclude" in rule and _matches(rule["exclude"], obj, operation, user):
            continue
        try:
            if not all(holds(c, ctx) for c in rule.get("preconditions", {}).get("all", [])):
                continue
            if any(holds(c, ctx) for c in rule["validate"]["deny"]["conditions"]["any"]):
                return str(rule["validate"]["message"])
        except UnresolvedError as error:
            return f"rule {rule['name']} failed: {error}"
    return None


# ---- Static -------------------------------------------------------------------------------------------------------


def test_guard_validates_against_the_kyverno_crd(support: LineOfBusiness) -> None:
    policy = lob_guard(ENV, support, operator_pods=True, inference_operator=True, keda_role_arn=ROLE)
    crd = shared_path("reference/crds/kyverno/kyverno.io_clusterpolicies.yaml")
    assert crd_errors(crd, "v1", policy) == []
    assert policy["kind"] == "ClusterPolicy" and policy["metadata"] == {"name": "kvtier-guard-support"}
    assert policy["spec"]["webhookConfiguration"]["failurePolicy"] == "Fail"
    assert policy["spec"]["background"] is False
    for rule in policy["spec"]["rules"]:
        assert rule["validate"]["failureAction"] == "Enforce"
    # Kinds the cluster may not have are left out (Kyverno refuses a rule on an unknown kind).
    bare = lob_guard(ENV, support, operator_pods=False, inference_operator=False, keda_role_arn=None)
    kinds = {k for r in bare["spec"]["rules"] for k in r["match"]["any"][0]["resources"]["kinds"]}
    assert kinds == {"Pod", "Service", "PersistentVolumeClaim", "PersistentVolume", "Namespace"}


def test_the_lob_stack_applies_its_guard(prod: Synth) -> None:
    """Every LOB stack renders its own guard, before its namespace (the guard pins the namespace's labels)."""
    for stack in prod.stacks.lobs:
        objects = [o for chart in stack.outputs.charts for o in stack.outputs.objects(chart)]
        names = [o["metadata"]["name"] for o in objects if o["kind"] == "ClusterPolicy"]
        assert names == [guard_name(stack.lob.name)], stack.namespace
        assert stack.guard is not None and stack.guard in stack.namespace_manifest.node.dependencies


# ---- kvtier's own objects pass --------------------------------------------------------------------------------------


def test_kvtier_objects_pass_their_own_guard(prod: Synth) -> None:
    for stack in prod.stacks.lobs:
        operator = any(e.mode == "operator" for e in stack.lob.endpoints)
        policy = lob_guard(ENV, stack.lob, operator_pods=operator, inference_operator=True, keda_role_arn=ROLE)
        objects = [o for chart in stack.outputs.charts for o in stack.outputs.objects(chart)]
        for obj in objects:
            pods = []
            if obj["kind"] in ("Deployment", "Job"):
                template = obj["spec"]["template"]
                meta = {**template.get("metadata", {}), "name": "p", "namespace": stack.namespace}
                pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]})
            for candidate in [obj, *pods]:
                if candidate["kind"] == "TriggerAuthentication":
                    continue  # its role comes with the KEDA step (test_keda_access.py)
                assert admit(policy, candidate) is None, (stack.namespace, candidate["kind"])
                assert admit(policy, candidate, "UPDATE") is None


# ---- Hostile cases: support's admin reaches for retail's data --------------------------------------------------------


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "kvtier-support"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def _refused(guard: dict[str, Any] | None, obj: dict[str, Any], operation: str = "CREATE") -> None:
    assert admit(guard, obj, operation) is not None, "admitted"


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "pool", "hostPath": {"path": "/var/lib/kubelet/plugins/curvine"}},
        {"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet"}},
        {"name": "root", "hostPath": {"path": "/"}},
        {"name": "workers", "hostPath": {"path": "/opt/dlami/nvme/curvine-data"}},
        {"name": "l2", "csi": {"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/retail"}}},
        {"name": "weights", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "models-retail"}}},
    ],
    ids=["plugin-dir", "kubelet", "root", "worker-data", "inline-curvine-retail-dir", "inline-s3-retail-bucket"],
)
def test_a_pod_cannot_mount_another_lobs_data(guard: dict[str, Any] | None, volume: dict[str, Any]) -> None:
    _refused(guard, _pod(volumes=[volume]))


@pytest.mark.parametrize(
    "spec",
    [
        {"hostNetwork": True},
        {"hostPID": True},
        {"hostIPC": True},
        {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]},
        {"initContainers": [{"name": "i", "image": "busybox", "securityContext": {"privileged": True}}]},
    ],
    ids=["hostNetwork", "hostPID", "hostIPC", "privileged", "privileged-init"],
)
def test_a_pod_cannot_reach_the_node(guard: dict[str, Any] | None, spec: dict[str, Any]) -> None:
    """Also in operator namespaces, where Pod Security only warns."""
    _refused(guard, _pod(**spec))


@pytest.mark.parametrize(
    "container",
    [
        {"securityContext": {"capabilities": {"add": ["SYS_MODULE"]}}},  # loads a kernel module: root on the node
        {"securityContext": {"capabilities": {"add": ["DAC_READ_SEARCH"]}}},  # opens host files by handle
        {"securityContext": {"procMount": "Unmasked"}},
        {"livenessProbe": {"tcpSocket": {"host": "10.0.3.7", "port": 8995}}},  # the kubelet dials from the node
        {"lifecycle": {"preStop": {"httpGet": {"host": "10.0.3.7", "port": 8997}}}},
        {"ports": [{"containerPort": 9002, "hostPort": 9002}]},  # the FUSE pod's web port on the node
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
    ],
    ids=[
        "SYS_MODULE",
        "DAC_READ_SEARCH",
        "procMount",
        "probe-host",
        "lifecycle-host",
        "hostPort",
        "seccomp",
        "selinux",
        "apparmor",
        "hostProcess",
    ],
)
def test_a_pod_passes_baseline_where_pod_security_only_warns(
    guard: dict[str, Any] | None, container: dict[str, Any]
) -> None:
    """support has operator endpoints, so its namespace only warns at baseline: the guard refuses the rest of
    baseline itself (kvtier/k8s/kyverno_conditions.py)."""
    _refused(guard, _pod(containers=[{"name": "c", "image": "busybox", **container}]))
    _refused(guard, _pod(securityContext={"sysctls": [{"name": "kernel.core_pattern", "value": "|/x"}]}))


# Each baseline control, a value it allows and one it refuses (tests/k8s/pod_security.py); the guard must agree with
# that checker on any mix of them, a hostPath /dev/shm excepted.
CONTAINER_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "securityContext": st.fixed_dictionaries(
        {},
        optional={
            "privileged": st.booleans(),
            "capabilities": st.fixed_dictionaries(
                {"add": st.lists(st.sampled_from(["CHOWN", "NET_BIND_SERVICE", "SYS_ADMIN", "NET_RAW", "BPF"]))}
            ),
            "procMount": st.sampled_from(["Default", "Unmasked"]),
            "seccompProfile": st.fixed_dictionaries({"type": st.sampled_from(["RuntimeDefault", "Unconfined"])}),
            "seLinuxOptions": st.sampled_from([{"type": "container_t"}, {"type": "spc_t"}, {"user": "root"}, {}]),
            "appArmorProfile": st.fixed_dictionaries({"type": st.sampled_from(["RuntimeDefault", "Unconfined"])}),
            "windowsOptions": st.fixed_dictionaries({"hostProcess": st.booleans()}),
        },
    ),
    "ports": st.lists(
        st.fixed_dictionaries({"containerPort": st.just(80)}, optional={"hostPort": st.sampled_from([0, 80])})
    ),
    "readinessProbe": st.sampled_from([{"tcpSocket": {"port": 80}}, {"tcpSocket": {"port": 80, "host": "10.0.0.1"}}]),
    "lifecycle": st.sampled_from([{"postStart": {"httpGet": {"port": 80, "host": "h"}}}, {"preStop": {"exec": {}}}]),
}
CONTAINER = st.fixed_dictionaries({"name": st.just("c"), "image": st.just("x")}, optional=CONTAINER_FIELDS)
POD_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "initContainers": st.lists(CONTAINER, max_size=1),
    "hostNetwork": st.booleans(),
    "hostPID": st.booleans(),
    "volumes": st.lists(
        st.sampled_from(
            [
                {"name": "shm", "hostPath": {"path": "/dev/shm"}},
                {"name": "root", "hostPath": {"path": "/"}},
                {"name": "e", "emptyDir": {}},
            ]
        ),
        unique_by=lambda v: str(v["name"]),
    ),
    "securityContext": st.fixed_dictionaries(
        {},
        optional={
            "sysctls": st.lists(st.sampled_from([{"name": "net.ipv4.tcp_syncookies"}, {"name": "kernel.msgmax"}])),
            "seccompProfile": st.fixed_dictionaries({"type": st.sampled_from(["RuntimeDefault", "Unconfined"])}),
        },
    ),
}
POD_SPEC = st.fixed_dictionaries({"containers": st.lists(CONTAINER, min_size=1, max_size=2)}, optional=POD_FIELDS)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(spec=POD_SPEC)
def test_the_guard_is_baseline_but_for_shared_memory(guard: dict[str, Any] | None, spec: dict[str, Any]) -> None:
    """Two encodings of the same standard, held to each other: the guard's JMESPath conditions and the Pod Security
    checker of the tests (each cited to its upstream check)."""
    failing = [line for line in violations(spec, "baseline") if not line.startswith("HostPath")]
    failing += [f"hostPath {v['hostPath']['path']}" for v in spec.get("volumes", []) if v["name"] == "root"]
    refused = admit(guard, {**_pod(), "spec": spec}) is not None
    assert refused == bool(failing), failing


def test_a_service_cannot_take_other_pods_traffic(guard: dict[str, Any] | None) -> None:
    """externalIPs would make kube-proxy on every node send traffic for a Curvine master's address to this LOB."""
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mitm", "namespace": "kvtier-support"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 8995}], "externalIPs": ["10.0.3.40"]},
    }
    _refused(guard, service)
    _refused(guard, service, "UPDATE")
    del service["spec"]["externalIPs"]
    assert admit(guard, service) is None


def test_a_wildcard_opens_nothing(guard: dict[str, Any] | None, config: Config, support: LineOfBusiness) -> None:
    """Kyverno's AnyNotIn matches `*` and `?` in both directions, so without its own condition a key `*` would pass
    every allow-list of the guard (tests/k8s/kyverno_emulation.py)."""
    _refused(guard, _pod(volumes=[{"name": "shm", "hostPath": {"path": "/dev/sh?"}}]))
    _refused(guard, _pod(containers=[{"name": "c", "securityContext": {"capabilities": {"add": ["*"]}}}]))
    _refused(guard, _iec(config, _with_s3(support, "models-shared", "*")))
    for role in ("*", "arn:aws:iam::111122223333:role/kvtier-prod-*-keda"):
        auth = {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "TriggerAuthentication",
            "metadata": {"name": "a", "namespace": "kvtier-support"},
            "spec": {"podIdentity": {"provider": "aws", "roleArn": role}},
        }
        _refused(guard, auth)


def test_the_operators_shared_memory_and_own_buckets_pass(guard: dict[str, Any] | None) -> None:
    shm = {"name": "shm", "hostPath": {"path": "/dev/shm"}}
    own = {"name": "w", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "models-shared"}}}
    assert admit(guard, _pod(volumes=[shm, own, {"name": "e", "emptyDir": {}}])) is None


def test_a_claim_cannot_name_another_lobs_l2_volume(guard: dict[str, Any] | None) -> None:
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "steal", "namespace": "kvtier-support"},
        "spec": {"volumeName": "kvtier-prod-retail-l2", "accessModes": ["ReadWriteMany"]},
    }
    _refused(guard, claim)
    own = copy.deepcopy(claim)
    own["spec"]["volumeName"] = "kvtier-prod-support-l2"
    assert admit(guard, own) is None


def _pv(csi: dict[str, Any], namespace: str = "kvtier-support") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": {"csi": {"volumeHandle": "h", **csi}, "claimRef": {"namespace": namespace, "name": "c"}},
    }


def test_a_volume_claimed_from_the_lob_stays_in_the_lob(guard: dict[str, Any] | None) -> None:
    """PVs are cluster-scoped: what the operator creates from an IEC, claimed from the LOB's namespace."""
    _refused(guard, _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/retail"}}))
    _refused(guard, _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod"}}))
    _refused(guard, _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/support-x"}}))
    _refused(guard, _pv({"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "models-retail"}}))
    ok = [
        _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/support"}}),
        _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/support/llama"}}),
        _pv({"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "models-shared"}}),
        # retail's own volume is retail's guard's business, not support's
        _pv({"driver": "curvine", "volumeAttributes": {"curvine-path": "/kvtier/prod/retail"}}, "kvtier-retail"),
    ]
    for pv in ok:
        assert admit(guard, pv) is None, pv


def _iec(config: Config, lob: LineOfBusiness, namespace: str = "kvtier-support") -> dict[str, Any]:
    endpoint = lob.endpoints[0].model_copy(update={"mode": "operator"})
    iec = inference_endpoint_config(config.env, "support", endpoint)
    iec["metadata"]["namespace"] = namespace
    return iec


def test_an_endpoint_cannot_name_another_lobs_bucket_or_prefix(
    guard: dict[str, Any] | None, config: Config, support: LineOfBusiness, retail: LineOfBusiness
) -> None:
    """retail's bucket; and retail's prefix in a bucket both LOBs use (the case IAM cannot separate in operator mode,
    where one S3 CSI role reads every LOB's bucket)."""
    assert admit(guard, _iec(config, support)) is None  # its own model
    _refused(guard, _iec(config, retail))
    _refused(guard, _iec(config, _with_s3(support, "models-shared", "retail/qwen")))
    _refused(guard, _iec(config, _with_s3(support, "models-shared", "support/llama/../../retail")))
    hostile = _iec(config, support)
    hostile["spec"]["kubernetes"] = {"volumes": [{"name": "m", "hostPath": {"path": "/var/lib/kubelet"}}]}
    _refused(guard, hostile)
    _refused(guard, hostile, "UPDATE")


def test_the_namespace_keeps_its_pod_security(guard: dict[str, Any] | None) -> None:
    namespace = lob_namespace_object("support", operator_pods=True)
    assert admit(guard, namespace) is None and admit(guard, namespace, "UPDATE") is None
    for change in (
        {"pod-security.kubernetes.io/warn": "privileged"},
        {"pod-security.kubernetes.io/enforce": "privileged"},
    ):
        lowered = copy.deepcopy(namespace)
        lowered["metadata"]["labels"].update(change)
        _refused(guard, lowered, "UPDATE")
    dropped = copy.deepcopy(namespace)
    del dropped["metadata"]["labels"]["pod-security.kubernetes.io/audit"]
    _refused(guard, dropped, "UPDATE")
