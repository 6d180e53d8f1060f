"""The Curvine charts, built directly with cdk8s: schema-valid, consistent with the TOML, placed and privileged as
the design says, and the helpers LOB stacks call (static PV, janitor) on their own."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity

from kvtier.config.curvine import CurvineConfig, cpu_millis, memory_bytes
from kvtier.config.environment import Environment
from kvtier.config.hyperpod import ROLE_LABEL, Role
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.curvine import (
    PV_CAPACITY,
    add_janitor,
    curvine_charts,
    master_addresses,
    names,
    pvc_spec,
    static_pv,
)
from kvtier.k8s.curvine.cluster import master_max_unavailable, raft_quorum
from kvtier.k8s.curvine.janitor import SCRIPT_DIR
from kvtier.k8s.curvine.scripts import JANITOR, MASTER_INIT, l2_healer, l2_janitor, script_text
from kvtier.k8s.curvine.volumes import fuse_parameters
from kvtier.k8s.placement import placement
from kvtier.rules import load_checked
from kvtier.serving import L2_MOUNT_PATH
from kvtier.sizing import curvine_node_shares
from tests.support import CONFIG_DIR, ROOT, lob_helpers_chart
from tests.validation import validate_k8s

Obj = dict[str, Any]


@cache
def env_named(name: str) -> Environment:
    return load_checked(CONFIG_DIR, name).env


def built(env: Environment) -> list[Obj]:
    return [obj for chart in curvine_charts(chart_app(), env) for obj in chart.manifests()]


@cache
def objects(name: str) -> tuple[Obj, ...]:
    return tuple(built(env_named(name)))


def find(objs: tuple[Obj, ...] | list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def toml(name: str) -> dict[str, Any]:
    cm = find(objects(name), "ConfigMap", names.CONFIG_MAP)
    return tomllib.loads(cm["data"][names.CONFIG_KEY])


def pod_specs(objs: tuple[Obj, ...] | list[Obj]) -> Iterator[tuple[str, Obj]]:
    for obj in objs:
        spec = obj.get("spec", {})
        if "template" in spec:
            yield obj["metadata"]["name"], spec["template"]["spec"]


def containers(pod: Obj) -> list[Obj]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def container(pod: Obj, name: str) -> Obj:
    return next(c for c in containers(pod) if c["name"] == name)


def lob_chart(env: Environment, claim_namespace: str | None = None) -> list[Obj]:
    return lob_helpers_chart(env, claim_namespace).manifests()


@pytest.mark.parametrize("name", ["dev", "prod", "byoc"])
def test_every_manifest_passes_the_strict_kubernetes_schema(name: str) -> None:
    objs = [*objects(name), *lob_chart(env_named(name)), *lob_chart(env_named(name), "kvtier-retail")]
    for obj in objs:
        validate_k8s(obj)
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "ConfigMap", "StatefulSet", "DaemonSet", "Deployment", "CSIDriver", "StorageClass"} <= kinds
    assert {"PodDisruptionBudget", "PersistentVolume", "ClusterRole", "Role", "ServiceAccount"} <= kinds
    assert {"PriorityClass", "RoleBinding"} <= kinds


def test_charts_come_in_apply_order() -> None:
    charts = curvine_charts(chart_app(), env_named("dev"))
    assert [c.node.id for c in charts] == [
        "curvine-namespace",
        "curvine-policies",
        "curvine-cluster",
        "curvine-csi",
        "curvine-healer",
    ]
    assert [o["kind"] for o in charts[0].manifests()] == ["Namespace", "PriorityClass"]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_namespaced_objects_are_in_the_curvine_namespace(name: str) -> None:
    cluster_scoped = {"Namespace", "StorageClass", "CSIDriver", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
    cluster_scoped |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # the healer's guard
    cluster_scoped |= {"PersistentVolume"}  # the FUSE check's volume (issue 38)
    for obj in objects(name):
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "curvine", obj["kind"]


@pytest.mark.parametrize(("name", "masters"), [("dev", 1), ("prod", 3)])
def test_masters_are_an_odd_statefulset_spread_over_system_nodes(name: str, masters: int) -> None:
    sts = find(objects(name), "StatefulSet", names.MASTER)
    spec = sts["spec"]
    assert spec["replicas"] == masters == env_named(name).curvine.masters
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == names.MASTER
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {ROLE_LABEL: "system"}
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": spec["selector"], "topologyKey": "kubernetes.io/hostname"}]
    svc = find(objects(name), "Service", names.MASTER)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    pdb = find(objects(name), "PodDisruptionBudget", names.MASTER)
    assert pdb["spec"]["selector"] == spec["selector"]
    assert masters - pdb["spec"]["maxUnavailable"] >= raft_quorum(masters) or masters == 1


@settings(max_examples=20, deadline=None)
@given(masters=st.sampled_from([1, 3, 5, 7]))
def test_disruption_budget_keeps_a_raft_majority(masters: int) -> None:
    allowed = master_max_unavailable(masters)
    assert allowed >= 1, "a node drain is never blocked forever"
    if masters > 1:
        assert masters - allowed >= masters // 2 + 1


def test_master_metadata_is_on_encrypted_retained_gp3_bound_late() -> None:
    objs = objects("prod")
    sc = find(objs, "StorageClass", names.MASTER_STORAGE_CLASS)
    assert sc["provisioner"] == "ebs.csi.aws.com"
    assert sc["parameters"]["type"] == "gp3"
    assert sc["parameters"]["encrypted"] == "true"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert sc["reclaimPolicy"] == "Retain"
    sts = find(objs, "StatefulSet", names.MASTER)["spec"]
    claims = {c["metadata"]["name"]: c["spec"] for c in sts["volumeClaimTemplates"]}
    assert set(claims) == {"meta", "journal"}
    assert {c["storageClassName"] for c in claims.values()} == {names.MASTER_STORAGE_CLASS}
    assert sts["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    mounts = {m["name"]: m["mountPath"] for m in container(sts["template"]["spec"], "master")["volumeMounts"]}
    doc = toml("prod")
    assert doc["master"]["meta_dir"].startswith(mounts["meta"] + "/"), "meta dir below the mount (lost+found)"
    assert doc["journal"]["journal_dir"].startswith(mounts["journal"] + "/")


def test_master_probes_are_tcp_on_the_toml_rpc_port_with_time_for_journal_replay() -> None:
    master = container(find(objects("prod"), "StatefulSet", names.MASTER)["spec"]["template"]["spec"], "master")
    rpc = toml("prod")["master"]["rpc_port"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert master[probe]["tcpSocket"] == {"port": rpc}
    startup = master["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_container_ports_equal_the_toml_ports(name: str) -> None:
    doc = toml(name)
    objs = objects(name)
    master_pod = find(objs, "StatefulSet", names.MASTER)["spec"]["template"]["spec"]
    worker_pod = find(objs, "DaemonSet", names.WORKER)["spec"]["template"]["spec"]
    master_ports = {p["name"]: p["containerPort"] for p in container(master_pod, "master")["ports"]}
    worker_ports = {p["name"]: p["containerPort"] for p in container(worker_pod, "worker")["ports"]}
    assert master_ports == {
        "rpc": doc["master"]["rpc_port"],
        "journal": doc["journal"]["rpc_port"],
        "web": doc["master"]["web_port"],
    }
    assert worker_ports == {"rpc": doc["worker"]["rpc_port"], "web": doc["worker"]["web_port"]}
    assert container(worker_pod, "worker")["readinessProbe"]["tcpSocket"]["port"] == doc["worker"]["rpc_port"]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_each_master_hostname_is_a_journal_peer(name: str) -> None:
    # Curvine refuses to start a master whose CURVINE_MASTER_HOSTNAME is not in journal_addrs.
    sts = find(objects(name), "StatefulSet", names.MASTER)
    env = {e["name"]: e.get("value") for e in container(sts["spec"]["template"]["spec"], "master")["env"]}
    hostnames = {
        env["CURVINE_MASTER_HOSTNAME"].replace("$(POD_NAME)", f"{names.MASTER}-{i}")
        for i in range(sts["spec"]["replicas"])
    }
    assert hostnames == {p["hostname"] for p in toml(name)["journal"]["journal_addrs"]}
    assert master_addresses(env_named(name)).count(",") == sts["spec"]["replicas"] - 1


def test_the_master_init_step_checks_the_toml_dirs_with_the_shipped_script() -> None:
    objs = objects("dev")
    pod = find(objs, "StatefulSet", names.MASTER)["spec"]["template"]["spec"]
    init = container(pod, "check-volumes")
    doc = toml("dev")
    assert init["command"] == [
        "bash",
        f"{names.SCRIPTS_DIR}/{MASTER_INIT}",
        doc["master"]["meta_dir"],
        doc["journal"]["journal_dir"],
        names.CONFIG_FILE,
    ]
    assert pod["initContainers"] == [init]
    scripts = find(objs, "ConfigMap", names.SCRIPTS_CONFIG_MAP)
    assert scripts["data"] == {MASTER_INIT: script_text(MASTER_INIT)}
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert mounts["scripts"] == names.SCRIPTS_DIR
    assert mounts["config"] == names.CONFIG_DIR
    master = container(pod, "master")
    assert master["command"][-2:] == ["--conf", names.CONFIG_FILE]
    assert {m["name"]: m["mountPath"] for m in master["volumeMounts"]}.items() >= {"meta": mounts["meta"]}.items()


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_one_worker_per_gpu_node_on_the_prepared_nvme_dir(name: str) -> None:
    ds = find(objects(name), "DaemonSet", names.WORKER)
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {ROLE_LABEL: "gpu"}
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {"data": {"path": "/opt/dlami/nvme/curvine-data", "type": "Directory"}}
    mount = next(m["mountPath"] for m in container(pod, "worker")["volumeMounts"] if m["name"] == "data")
    data_dir = toml(name)["worker"]["data_dir"]
    assert data_dir == [f"[SSD:{env_named(name).curvine.worker_data_gb}GB]{mount}"]
    assert "hostNetwork" not in pod


def test_the_worker_hostpath_is_the_dir_the_gpu_lifecycle_script_prepares() -> None:
    common = (ROOT / "kvtier/constructs/lifecycle/common.sh").read_text()
    nvme_root = re.search(r"NVME_ROOT=\$\{KVTIER_NVME_ROOT:-([^}]+)\}", common)
    assert nvme_root is not None
    assert 'mkdir -p "$NVME_ROOT/curvine-data"' in common
    assert f"{nvme_root.group(1)}/curvine-data" == names.WORKER_HOST_PATH
    assert "prepare_curvine_dir" in (ROOT / "kvtier/constructs/lifecycle/on_create_gpu.sh").read_text()


@pytest.mark.parametrize("name", ["dev", "prod", "byoc"])
def test_only_the_csi_node_plugin_is_privileged(name: str) -> None:
    privileged = []
    for owner, pod in pod_specs([*objects(name), *lob_chart(env_named(name))]):
        assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True, owner
        for c in containers(pod):
            ctx = c.get("securityContext", {})
            if ctx.get("privileged"):
                privileged.append((owner, c["name"]))
            else:
                assert ctx["allowPrivilegeEscalation"] is False, (owner, c["name"])
                assert ctx["capabilities"] == {"drop": ["ALL"]}, (owner, c["name"])
            assert "requests" in c["resources"] and "memory" in c["resources"]["limits"], (owner, c["name"])
    assert privileged == [(names.CSI_NODE, "csi-plugin")]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_rbac_is_least_privilege(name: str) -> None:
    objs = objects(name)
    roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole")]
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            assert "secrets" not in rule["resources"], "no component here reads Secrets"
    node_cluster = find(objs, "ClusterRole", names.CSI_NODE)
    assert {r for rule in node_cluster["rules"] for r in rule["resources"]} == {"persistentvolumes"}
    assert {v for rule in node_cluster["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    node_ns = find(objs, "Role", names.CSI_NODE)
    assert node_ns["metadata"]["namespace"] == names.NAMESPACE
    accounts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceAccount"}
    bound = {s["name"] for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding") for s in o["subjects"]}
    # The healer's own Role here only lists pods (its brake); its LOB Roles live in the LOB namespaces.
    # The L2 fence lists nodes and writes its per-node NetworkPolicies in `curvine` (kvtier/k8s/curvine/policies.py).
    assert bound == {names.CSI_CONTROLLER, names.CSI_NODE, names.HEALER, "kvtier-l2-fence"}
    for account, sa in accounts.items():
        assert sa["automountServiceAccountToken"] is (account in bound), account


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_csi_driver_pins_images_and_runs_fuse_standalone_with_its_own_resources(name: str) -> None:
    env = env_named(name)
    objs = objects(name)
    driver = find(objs, "CSIDriver", "curvine")
    assert driver["spec"]["attachRequired"] is False
    node = find(objs, "DaemonSet", names.CSI_NODE)["spec"]["template"]["spec"]
    controller = find(objs, "Deployment", names.CSI_CONTROLLER)["spec"]["template"]["spec"]
    assert node["nodeSelector"] == {ROLE_LABEL: "gpu"}
    assert node["tolerations"] == [{"operator": "Exists"}]
    assert controller["nodeSelector"] == {ROLE_LABEL: "system"}
    images = {c["image"] for pod in (node, controller) for c in containers(pod)}
    assert images == {
        env.curvine.images.csi,
        env.curvine.images.csi_provisioner,
        env.curvine.images.node_driver_registrar,
        env.curvine.images.livenessprobe,
    }
    assert all(re.search(r":v\d+\.\d+\.\d+$", image) for image in images)
    plugin_env = {e["name"]: e.get("value") for e in container(node, "csi-plugin")["env"]}
    assert plugin_env["MOUNT_MODE"] == "standalone"
    assert plugin_env["STANDALONE_IMAGE"] == container(node, "csi-plugin")["image"], "FUSE pods pull nothing"
    fuse = env.curvine.resources.fuse
    assert plugin_env["STANDALONE_CPU_REQUEST"] == fuse.cpu_request
    assert cpu_millis(fuse.cpu_request) >= 2000, "upstream's 500m would starve the node's only FUSE mount"
    assert plugin_env["STANDALONE_CPU_LIMIT"] == fuse.cpu_request, (
        "Guaranteed QoS needs a CPU limit equal to the request"
    )
    assert plugin_env["STANDALONE_MEMORY_LIMIT"] == fuse.memory_limit
    assert plugin_env["STANDALONE_SERVICE_ACCOUNT"] == names.FUSE_SERVICE_ACCOUNT
    controller_env = {e["name"]: e.get("value") for e in container(controller, "csi-plugin")["env"]}
    assert controller_env["MOUNT_MODE"] == "embedded"
    registrar = container(node, "node-driver-registrar")
    socket = next(a for a in registrar["args"] if a.startswith("--kubelet-registration-path="))
    plugin_dir = next(v["hostPath"]["path"] for v in node["volumes"] if v["name"] == "plugin-dir")
    assert socket == f"--kubelet-registration-path={plugin_dir}/csi.sock"
    kubelet = next(m for m in container(node, "csi-plugin")["volumeMounts"] if m["name"] == "kubelet-dir")
    assert kubelet["mountPropagation"] == "Bidirectional"


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_master_worker_and_fuse_metrics_are_scraped_on_their_web_ports(name: str) -> None:
    doc = toml(name)
    objs = objects(name)
    for kind, obj_name, port in [
        ("StatefulSet", names.MASTER, doc["master"]["web_port"]),
        ("DaemonSet", names.WORKER, doc["worker"]["web_port"]),
    ]:
        annotations = find(objs, kind, obj_name)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port)
        assert annotations["prometheus.io/path"] == "/metrics"
    svc = find(objs, "Service", names.FUSE_METRICS_SERVICE)
    assert svc["metadata"]["annotations"]["prometheus.io/port"] == fuse_parameters()["web-port"]
    assert fuse_parameters()["web-port"] == str(doc["fuse"]["web_port"])
    assert svc["spec"]["selector"] == {"app": "curvine-standalone"}


def test_a_config_change_rolls_masters_and_workers() -> None:
    env = env_named("dev")
    bigger = env.model_copy(update={"curvine": CurvineConfig(worker_data_gb=300)})

    def digests(objs: list[Obj]) -> list[str]:
        return [
            find(objs, kind, name)["spec"]["template"]["metadata"]["annotations"]["kvtier.io/config-digest"]
            for kind, name in (("StatefulSet", names.MASTER), ("DaemonSet", names.WORKER))
        ]

    before, after = digests(list(objects("dev"))), digests(built(bigger))
    assert before[0] == before[1] and after[0] == after[1]
    assert before != after


def test_the_node_fit_shares_are_the_requests_the_charts_render() -> None:
    env = env_named("dev")
    objs = objects("dev")
    worker = container(find(objs, "DaemonSet", names.WORKER)["spec"]["template"]["spec"], "worker")
    node = find(objs, "DaemonSet", names.CSI_NODE)["spec"]["template"]["spec"]
    healer = container(find(objs, "DaemonSet", names.HEALER)["spec"]["template"]["spec"], "healer")
    plugin_env = {e["name"]: e.get("value") for e in container(node, "csi-plugin")["env"]}
    fuse = {
        "cpu": plugin_env["STANDALONE_CPU_REQUEST"],
        "memory": plugin_env["STANDALONE_MEMORY_REQUEST"],
    }
    rendered = {
        "Curvine worker": [worker["resources"]["requests"]],
        "FUSE": [fuse],
        "CSI node": [c["resources"]["requests"] for c in containers(node)],
        "L2 healer": [healer["resources"]["requests"]],
    }
    shares = {s.name: s for s in curvine_node_shares(env.curvine, fuse=True)}
    assert set(shares) == set(rendered)
    for name, requests in rendered.items():
        assert shares[name].cpu_millis == sum(cpu_millis(r["cpu"]) for r in requests), name
        assert shares[name].memory_bytes == sum(memory_bytes(r["memory"]) for r in requests), name


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_worker_fuse_and_healer_are_guaranteed_and_above_the_engines(name: str) -> None:
    objs = objects(name)
    priority = find(objs, "PriorityClass", names.PRIORITY_CLASS)
    assert 0 < priority["value"] < 2_000_000_000 and priority["globalDefault"] is False
    for daemonset, container_name in ((names.WORKER, "worker"), (names.HEALER, "healer")):
        pod = find(objs, "DaemonSet", daemonset)["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == names.PRIORITY_CLASS
        resources = container(pod, container_name)["resources"]
        assert resources["requests"] == resources["limits"], f"{daemonset} is Guaranteed"
    plugin_env = {
        e["name"]: e.get("value")
        for e in container(find(objs, "DaemonSet", names.CSI_NODE)["spec"]["template"]["spec"], "csi-plugin")["env"]
    }
    # The FUSE pod the driver builds from these (standalone_manager.go buildResourceRequirements) is Guaranteed.
    assert plugin_env["STANDALONE_CPU_REQUEST"] == plugin_env["STANDALONE_CPU_LIMIT"]
    assert plugin_env["STANDALONE_MEMORY_REQUEST"] == plugin_env["STANDALONE_MEMORY_LIMIT"]


def test_the_healer_reads_only_the_mount_table_as_non_root_and_may_only_list_and_delete_lob_pods() -> None:
    env = env_named("prod")
    objs = objects("prod")
    pod = find(objs, "DaemonSet", names.HEALER)["spec"]["template"]["spec"]
    healer = container(pod, "healer")
    assert pod["nodeSelector"] == placement(env, "gpu").node_selector
    # One host file, read-only: no hostPath to the kubelet's pod directories (other pods' Secrets and tokens).
    host_paths = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"mountinfo": {"path": "/proc/1/mountinfo", "type": "File"}}
    assert [m for m in healer["volumeMounts"] if m["name"] == "mountinfo"] == [
        {"name": "mountinfo", "mountPath": "/host/proc/1/mountinfo", "readOnly": True}
    ]
    assert "--mountinfo=/host/proc/1/mountinfo" in healer["args"]
    assert not pod.get("hostPID") and not pod.get("hostNetwork")
    security = healer["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0 and security["runAsGroup"] != 0
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in security
    assert not [a for a in healer["args"] if a.startswith("--namespace=")], "no LOB in the platform's objects"
    assert "--namespace-selector=kvtier.io/line-of-business" in healer["args"]
    reader = find(objs, "ClusterRole", names.HEALER)
    assert reader["rules"] == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}], "names only"
    brake = find(objs, "Role", names.HEALER)
    assert brake["metadata"]["namespace"] == "curvine", "its own namespace: how many healers report (the brake)"
    assert brake["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    lob = lob_chart(env, "kvtier-retail")
    role = find(lob, "Role", names.HEALER)
    assert role["metadata"]["namespace"] == "kvtier-retail"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    binding = find(lob, "RoleBinding", names.HEALER)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": names.HEALER, "namespace": "curvine"}]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_healer_checks_master_and_fuse_and_the_api_server_guards_its_deletes(name: str) -> None:
    env = env_named(name)
    objs = objects(name)
    healer = container(find(objs, "DaemonSet", names.HEALER)["spec"]["template"]["spec"], "healer")
    args = healer["args"]
    masters = [a for a in args if a.startswith("--master-url=")]
    assert masters == [f"--master-url={names.master_web_url(i)}" for i in range(env.curvine.masters)]
    assert "--fuse-health-url=http://$(HOST_IP):9002/healthz" in args
    assert {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} in healer["env"]
    assert "--dead-checks=2" in args and not [a for a in args if a.startswith("--hung-checks")]
    # The shipped script accepts exactly these arguments.
    parsed = l2_healer.parse_args([a.replace("$(HOST_IP)", "10.0.0.1") for a in args] + ["--node=n", "--api-url=x"])
    assert parsed.brake_share == 0.3 and parsed.healer_namespace == "curvine"
    policy = find(objs, "ValidatingAdmissionPolicy", "kvtier-l2-healer-guard")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConditions"] == [
        {
            "name": "only-the-l2-healer",
            "expression": "request.userInfo.username == 'system:serviceaccount:curvine:kvtier-l2-healer'",
        }
    ]
    rules = {(tuple(r["operations"]), tuple(r["resources"])) for r in spec["matchConstraints"]["resourceRules"]}
    assert rules == {(("DELETE",), ("pods",)), (("CREATE",), ("pods/eviction",))}
    expressions = " ".join(v["expression"] for v in spec["validations"])
    assert "v.persistentVolumeClaim.claimName == 'l2-cache'" in expressions and "request.dryRun == true" in expressions
    binding = find(objs, "ValidatingAdmissionPolicyBinding", "kvtier-l2-healer-guard")
    assert binding["spec"] == {"policyName": "kvtier-l2-healer-guard", "validationActions": ["Deny"]}


# --- static PV and janitor, as LOB stacks call them ---------------------------------------------------------------


def test_static_pv_is_rwx_retained_on_the_curvine_path_for_gpu_nodes() -> None:
    env = env_named("prod")
    pv = find(lob_chart(env), "PersistentVolume", "kvtier-prod-retail")
    spec = pv["spec"]
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert "claimRef" not in spec
    assert spec["csi"]["driver"] == "curvine"
    assert len(spec["csi"]["volumeHandle"].split("@")) != 3, "a 3-part handle would be taken for a dynamic volume"
    attrs = spec["csi"]["volumeAttributes"]
    assert attrs["master-addrs"] == master_addresses(env)
    assert attrs["curvine-path"] == "/kvtier/prod/retail"
    assert attrs["fs-path"] == "/"
    assert (attrs["client.ttl-ms"], attrs["client.ttl-action"]) == (toml("prod")["client"]["ttl_ms"], "none")
    assert "mnt-path" not in attrs, "the driver rejects it"
    terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    gpu = placement(env, "gpu").node_selector
    assert terms == [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in gpu.items()]}]


def test_every_static_pv_shares_one_fuse_mount_per_node() -> None:
    # The driver's mount key is master-addrs + fs-path + the passthrough keys: equal for every LOB.
    env = env_named("prod")
    chart = KvtierChart(chart_app(), "lobs")
    for lob in ("retail", "support"):
        static_pv(chart, lob, env=env, name=f"kvtier-prod-{lob}", curvine_path=f"/kvtier/prod/{lob}")
    attrs = [o["spec"]["csi"]["volumeAttributes"] for o in chart.manifests()]
    key = [{k: v for k, v in a.items() if k != "curvine-path"} for a in attrs]
    assert key[0] == key[1]
    assert len({o["spec"]["csi"]["volumeHandle"] for o in chart.manifests()}) == 2


def test_static_pv_can_be_reserved_for_its_claim() -> None:
    pv = find(lob_chart(env_named("dev"), "kvtier-retail"), "PersistentVolume", "kvtier-dev-retail")
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "kvtier-retail",
        "name": "l2-cache",
    }


def test_pvc_spec_binds_to_the_static_pv() -> None:
    pv = find(lob_chart(env_named("dev")), "PersistentVolume", "kvtier-dev-retail")
    claim: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "l2-cache", "namespace": "kvtier-retail"},
        "spec": pvc_spec(pv["metadata"]["name"]),
    }
    validate_k8s(claim)
    spec = claim["spec"]
    assert spec["volumeName"] == pv["metadata"]["name"]
    assert spec["storageClassName"] == pv["spec"]["storageClassName"]
    assert set(spec["accessModes"]) <= set(pv["spec"]["accessModes"])
    requested, capacity = spec["resources"]["requests"]["storage"], pv["spec"]["capacity"]["storage"]
    assert parse_quantity(requested) <= parse_quantity(capacity)
    assert pv["spec"]["capacity"]["storage"] == PV_CAPACITY


@pytest.mark.parametrize("path", ["kvtier/dev", "/", "/kvtier/../etc", "/kvtier//dev", "/kvtier/dev/"])
def test_static_pv_rejects_bad_paths(path: str) -> None:
    with pytest.raises(ValueError, match="not an absolute Curvine path"):
        static_pv(KvtierChart(chart_app(), "c"), "pv", env=env_named("dev"), name="pv", curvine_path=path)


def test_janitor_is_a_looping_deployment_that_mounts_the_claim_and_runs_the_shipped_script() -> None:
    objs = lob_chart(env_named("dev"))
    deployment = find(objs, "Deployment", "l2-cache-janitor")
    assert deployment["metadata"]["namespace"] == "kvtier-retail"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "two janitors would race"
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["kvtier.io/component"] == "l2-janitor"
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9400"
    pod = template["spec"]
    assert pod["nodeSelector"] == {ROLE_LABEL: "gpu"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["priorityClassName"] == names.PRIORITY_CLASS
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "l2-cache"}
    janitor = container(pod, "janitor")
    mounts = {m["name"]: m["mountPath"] for m in janitor["volumeMounts"]}
    assert mounts[claim["name"]] == L2_MOUNT_PATH == "/mnt/kvtier/l2"
    assert janitor["command"] == ["python3", f"{SCRIPT_DIR}/{JANITOR}"]
    args = janitor["args"]
    assert args[0] == L2_MOUNT_PATH
    assert {"--budget-gb=200", "--max-age-hours=24", "--lob=retail", "--delete-unused", "--in-use=qwen3-8b"} <= set(
        args
    )
    assert "--interval-seconds=30" in args and "--metrics-port=9400" in args
    assert f"--master-url=http://{names.master_hostname(0)}:9000" in args
    assert "--once" not in args
    assert janitor["ports"] == [{"name": "metrics", "containerPort": 9400}]
    assert janitor["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    security = janitor["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert janitor["image"] == env_named("dev").curvine.images.curvine
    script = find(objs, "ConfigMap", "l2-cache-janitor")
    assert script["metadata"]["namespace"] == "kvtier-retail"
    assert script["data"] == {JANITOR: script_text(JANITOR)}
    # The shipped args parse with the shipped script (one source of truth for the flags).
    parsed = l2_janitor.parse_args(args)
    assert parsed.in_use == ["qwen3-8b"] and parsed.delete_unused and not parsed.once


@pytest.mark.parametrize(("budget", "age"), [(0, 24), (100, 0), (-1, 1)])
def test_janitor_rejects_non_positive_limits(budget: float, age: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        add_janitor(
            KvtierChart(chart_app(), "c"),
            "j",
            env=env_named("dev"),
            lob="x",
            namespace="kvtier-x",
            claim_name="l2-cache",
            budget_gb=budget,
            max_age_hours=age,
            in_use=[],
        )


def test_an_existing_cluster_places_pods_with_the_owners_selectors() -> None:
    env = env_named("byoc")
    assert env.hyperpod.existing is not None
    role_of: dict[str, Role] = {names.MASTER: "system", names.WORKER: "gpu", names.CSI_CONTROLLER: "system"}
    for owner, pod in pod_specs(objects("byoc")):
        if owner in role_of:
            assert pod["nodeSelector"] == dict(env.hyperpod.existing.nodes.role(role_of[owner]).selector), owner
    pv = find(lob_chart(env), "PersistentVolume", "kvtier-byoc-retail")
    expressions = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {e["key"]: e["values"][0] for e in expressions} == dict(env.hyperpod.existing.nodes.gpu.selector)


# --- node selection for any taints ----------------------------------------------------------------------------------

taint = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["nvidia.com/gpu", "kvtier.io/dedicated", "example.com/team"]),
        "value": st.sampled_from(["", "true", "inference"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    }
)


@settings(max_examples=15, deadline=None)
@given(system_taints=st.lists(taint, max_size=2), gpu_taints=st.lists(taint, max_size=3))
def test_pods_select_their_role_and_tolerate_exactly_its_taints(
    system_taints: list[dict[str, str]], gpu_taints: list[dict[str, str]]
) -> None:
    data = env_named("prod").model_dump(mode="json", exclude_unset=True)
    for group in data["hyperpod"]["instance_groups"]:
        group["taints"] = system_taints if group["role"] == "system" else gpu_taints
    env = Environment.model_validate(data)
    objs = [*built(env), *lob_chart(env)]
    role_of: dict[str, Role] = {
        names.MASTER: "system",
        names.CSI_CONTROLLER: "system",
        names.WORKER: "gpu",
        names.CSI_NODE: "gpu",
        names.HEALER: "gpu",
        "l2-cache-janitor": "gpu",
        "kvtier-l2-fence": "system",
    }
    seen = set()
    for owner, pod in pod_specs(objs):
        role = role_of[owner]
        seen.add(owner)
        expected = placement(env, role)
        assert pod["nodeSelector"] == expected.node_selector, owner
        if owner == names.CSI_NODE:
            assert pod["tolerations"] == [{"operator": "Exists"}]
        else:
            assert pod.get("tolerations", []) == [dict(t) for t in expected.tolerations], owner
    assert seen == set(role_of)
    pv = find(objs, "PersistentVolume", "kvtier-prod-retail")
    expressions = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {e["key"]: e["values"][0] for e in expressions} == placement(env, "gpu").node_selector


def test_the_fuse_roll_docs_name_what_the_roll_uses() -> None:
    """docs/l2.md "Upgrading the FUSE clients" (issue 38; the manual procedure it replaces was checked the same way):
    the command, the mark it leaves on a node, and the FUSE check's pod and claim in Curvine's namespace."""
    from kvtier.k8s.curvine import fuse_check
    from kvtier.ops.fuse_roll import ROLL_ANNOTATION

    text = (ROOT / "docs" / "l2.md").read_text()
    section = text.split("### Upgrading the FUSE clients", 1)[1].split("\n## ", 1)[0]
    for words in (
        "`kvtier l2 roll-fuse -e <env>`",
        f"`{ROLL_ANNOTATION}`",
        f"`{fuse_check.POD_PREFIX}<hash>` in `{names.NAMESPACE}`",
        f"`{fuse_check.CLAIM}`",
        "/kvtier/<env>/_fuse-check",
    ):
        assert words in section, words
    assert fuse_check.curvine_path(env_named("dev")) == "/kvtier/dev/_fuse-check"
