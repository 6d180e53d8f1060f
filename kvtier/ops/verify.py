"""`kvtier verify`: the failures that are otherwise silent, checked on the objects of a live cluster.

- Every endpoint pod: exactly one LMCACHE_REMOTE_URL pointing at its own L2 identity directory, the L2 mount,
  PYTHONHASHSEED and the serde (a pod without them runs, with L2 hits silently at zero); on vLLM's own connector
  (`cache.connector: vllm`) the rendered `--kv-transfer-config` with its fs tier on that directory, the block hash
  and PYTHONHASHSEED.
- Curvine: one ready worker on every GPU node, every master ready, and every L2 mount on every GPU node answering
  (the node's L2 healer is Ready only then).
- Every LOB's `l2-cache` claim bound, and its Kyverno Policy ready where operator pods need the rewiring.

Pure functions over a `Snapshot` (what kvtier.ops.kube reads), so they are tested on stored objects. Names, labels and
values come from the charts' own modules, so the checks follow the charts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import yaml

from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.config.loader import Config
from kvtier.errors import ExitCode
from kvtier.k8s.curvine.names import HEALER, component_labels
from kvtier.k8s.curvine.names import NAMESPACE as CURVINE_NAMESPACE
from kvtier.k8s.endpoint_names import ENGINE_CONTAINER as STANDALONE_CONTAINER
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.k8s.placement import node_selector
from kvtier.naming import lob_namespace
from kvtier.serving import (
    HASH_SEED,
    L2_CLAIM,
    L2_MARKER,
    L2_MOUNT_PATH,
    SERDE,
    VLLM_HASH_ALGO,
    env_name,
    l2_subdir,
    l2_url,
    vllm_offload_config,
)

Obj = Mapping[str, Any]  # a Kubernetes object as the API returns it (JSON)

REMOTE_URL = env_name("remote_url")
CONFIG_FILE_VAR = "LMCACHE_CONFIG_FILE"
HASH_SEED_VAR = "PYTHONHASHSEED"
TIERED_STORAGE_SCHEME = "sagemaker-hyperpod://"  # the URL the operator injects (reference aws-hyperpod.md 4.2)
ENDPOINT_POD_LABEL = "app"  # operator pods carry app=<endpoint> (operator-addons.md 2.1); standalone pods too


def endpoint_pod_selector(endpoint: str) -> dict[str, str]:
    """Pods of one endpoint in its LOB namespace, in either mode (kvtier.k8s.endpoint_names.engine_labels)."""
    return {ENDPOINT_POD_LABEL: endpoint}


@dataclass(frozen=True)
class Snapshot:
    """The objects `kvtier verify` reads: all nodes; pods of the LOB namespaces and Curvine's; the LOBs' claims,
    Kyverno Policies and ConfigMaps (standalone pods read LMCache settings from a file)."""

    nodes: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    pvcs: tuple[Obj, ...] = ()
    policies: tuple[Obj, ...] = ()
    configmaps: tuple[Obj, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Snapshot:
        return cls(*(tuple(data.get(f.name, ())) for f in fields(cls)))

    def to_json(self) -> dict[str, list[Obj]]:
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Finding:
    check: str  # endpoint | curvine | l2-volume | kyverno
    subject: str
    ok: bool
    message: str


@dataclass(frozen=True)
class VerifyReport:
    environment: str
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.PROBLEMS

    def to_json(self) -> dict[str, Any]:
        return {"environment": self.environment, "ok": self.ok, "findings": [asdict(f) for f in self.findings]}


def verify(config: Config, snapshot: Snapshot) -> VerifyReport:
    findings = [
        *endpoint_findings(config, snapshot),
        *curvine_findings(config.env, snapshot),
        *claim_findings(config, snapshot),
        *policy_findings(config, snapshot),
    ]
    return VerifyReport(config.env.name, tuple(findings))


# ---- endpoints -----------------------------------------------------------------------------------------------------


def endpoint_findings(config: Config, snapshot: Snapshot) -> list[Finding]:
    findings: list[Finding] = []
    for lob in config.lobs:
        namespace = lob_namespace(lob.name)
        for endpoint in lob.endpoints:
            subject = f"{lob.name}/{endpoint.name}"
            selector = endpoint_pod_selector(endpoint.name)
            pods = [p for p in _live(snapshot.pods) if _namespace(p) == namespace and _has_labels(p, selector)]
            if not pods:
                label = ",".join(f"{k}={v}" for k, v in selector.items())
                findings.append(Finding("endpoint", subject, False, f"no running pod with {label} in {namespace}"))
            configmaps = [c for c in snapshot.configmaps if _namespace(c) == namespace]
            for pod in pods:
                problems = pod_problems(endpoint, pod, configmaps)
                message = "; ".join(problems) if problems else _wiring_ok(endpoint)
                findings.append(Finding("endpoint", f"{subject} pod {_name(pod)}", not problems, message))
    return findings


def _wiring_ok(endpoint: Endpoint) -> str:
    if endpoint.cache.connector == "vllm":
        where = (
            f"fs tier {L2_MOUNT_PATH}/{l2_subdir(endpoint)}, L2 mounted" if endpoint.cache.l2 == "curvine" else "no L2"
        )
        return f"vLLM's OffloadingConnector, {where}, {HASH_SEED_VAR}={HASH_SEED}, {VLLM_HASH_ALGO} block hashes"
    if endpoint.cache.l2 == "curvine":
        return f"L2 URL {l2_url(endpoint)}, L2 mounted, {HASH_SEED_VAR}={HASH_SEED}, serde {SERDE}"
    if endpoint.cache.l2 == "tieredstorage":
        return f"one L2 URL to HyperPod tiered storage, {HASH_SEED_VAR}={HASH_SEED}, serde {SERDE}"
    return f"no L2, as configured; {HASH_SEED_VAR}={HASH_SEED}"


def pod_problems(endpoint: Endpoint, pod: Obj, configmaps: Sequence[Obj] = ()) -> list[str]:
    """What is wrong with one endpoint pod's cache wiring (empty when nothing is).

    LMCache reads its file (LMCACHE_CONFIG_FILE) and lets LMCACHE_<KEY> variables override it, so a setting is the
    variable when set, else the file's value (kvtier.serving)."""
    container = serving_container(endpoint, pod)
    if container is None:
        return ["no vLLM container found (named after the endpoint, `engine`, or carrying LMCache settings)"]
    env = [e for e in container.get("env", []) if isinstance(e, Mapping)]
    if endpoint.cache.connector == "vllm":
        return vllm_connector_problems(endpoint, pod, container, env)
    file, problems = lmcache_file(pod, container, env, configmaps)
    problems += _url_problems(endpoint, env, file)
    if endpoint.cache.l2 == "curvine":
        problems += _mount_problems(pod, container)
    problems += _single_value(env, HASH_SEED_VAR, HASH_SEED, "cache keys differ per pod and cross-pod hits are zero")
    if endpoint.cache.l2 != "none" or endpoint.cache.l1_gb > 0:
        problems += _setting_problems(
            env, file, "remote_serde", SERDE, "other serdes do not store through remote connectors"
        )
    return problems


def _flag_values(args: Sequence[Any], flag: str) -> list[str]:
    """Every value of `flag` in vLLM's argv, as `--flag value` or `--flag=value`."""
    values = [str(args[i + 1]) for i, a in enumerate(args[:-1]) if a == flag]
    return values + [str(a).split("=", 1)[1] for a in args if str(a).startswith(flag + "=")]


def vllm_connector_problems(endpoint: Endpoint, pod: Obj, container: Obj, env: Sequence[Obj]) -> list[str]:
    """`cache.connector: vllm`: the pod's `--kv-transfer-config` is the one kvtier renders (connector, spec, CPU tier
    size, fs tier under the endpoint's current identity directory), its block hash and seed are the shared ones, and
    no LMCache setting is left over."""
    args = [*container.get("command", []), *container.get("args", [])]
    problems: list[str] = []
    configs = _flag_values(args, "--kv-transfer-config")
    wanted = vllm_offload_config(endpoint.cache, l2_subdir(endpoint))
    if len(configs) != 1:
        problems.append(
            f"{len(configs)} --kv-transfer-config flags; exactly one (vLLM's OffloadingConnector) is needed"
        )
    else:
        try:
            found = json.loads(configs[0])
        except json.JSONDecodeError:
            found = None
        if found != wanted:
            problems.append(
                f"--kv-transfer-config is {configs[0]}, not {json.dumps(wanted, sort_keys=True)} (the endpoint's "
                "current identity directory; a pod from before the last change still uses the old one)"
            )
    algos = _flag_values(args, "--prefix-caching-hash-algo")
    if algos != [VLLM_HASH_ALGO]:
        problems.append(
            f"--prefix-caching-hash-algo is {algos or 'unset'}, not [{VLLM_HASH_ALGO!r}] (another hash names other files)"
        )
    leftovers = sorted({str(e.get("name")) for e in env if str(e.get("name", "")).startswith("LMCACHE_")})
    if leftovers:
        problems.append(f"LMCache settings on a pod of vLLM's connector: {', '.join(leftovers)}")
    if endpoint.cache.l2 == "curvine":
        problems += _mount_problems(pod, container)
    problems += _single_value(env, HASH_SEED_VAR, HASH_SEED, "block hashes differ per pod and cross-pod hits are zero")
    return problems


def serving_container(endpoint: Endpoint, pod: Obj) -> Obj | None:
    containers = [c for c in pod.get("spec", {}).get("containers", []) if isinstance(c, Mapping)]
    for container in containers:  # operator: the worker container is named after the endpoint; standalone: `engine`
        if container.get("name") in (endpoint.name, STANDALONE_CONTAINER):
            return container
    for container in containers:
        names = {e.get("name", "") for e in container.get("env", [])}
        if L2_MARKER in names or any(str(n).startswith("LMCACHE_") for n in names):
            return container
    return None


def lmcache_file(
    pod: Obj, container: Obj, env: Sequence[Obj], configmaps: Sequence[Obj]
) -> tuple[Mapping[str, Any], list[str]]:
    """The settings of the LMCache file the container names, when it comes from a ConfigMap volume."""
    paths = [e.get("value") for e in env if e.get("name") == CONFIG_FILE_VAR]
    if not paths:
        return {}, []
    path = str(paths[-1])
    for mount in container.get("volumeMounts", []):
        root = str(mount.get("mountPath", "")).rstrip("/")
        if mount.get("subPath") or not path.startswith(root + "/"):
            continue
        relative = path[len(root) + 1 :]
        volume: Obj = next(
            (v for v in pod.get("spec", {}).get("volumes", []) if v.get("name") == mount.get("name")), {}
        )
        source = volume.get("configMap")
        if not source:
            break
        key = next((i.get("key") for i in source.get("items", []) if i.get("path") == relative), relative)
        configmap = next((c for c in configmaps if _name(c) == source.get("name")), None)
        text = (configmap or {}).get("data", {}).get(key)
        if text is None:
            return {}, [f"{CONFIG_FILE_VAR} {path}: ConfigMap {source.get('name')} key {key} is missing"]
        loaded = yaml.safe_load(text)
        return (loaded if isinstance(loaded, Mapping) else {}), []
    return {}, [f"{CONFIG_FILE_VAR} {path} is not on a ConfigMap volume kvtier can read"]


def _url_problems(endpoint: Endpoint, env: Sequence[Obj], file: Mapping[str, Any]) -> list[str]:
    urls = [e for e in env if e.get("name") == REMOTE_URL]
    if len(urls) > 1:
        shown = ", ".join(repr(e.get("value")) for e in urls)
        return [f"{len(urls)} {REMOTE_URL} entries ({shown}); exactly one is needed"]
    if urls and urls[0].get("value") is None:
        return [f"{REMOTE_URL} comes from valueFrom, which kvtier cannot check; set a value"]
    value = urls[0].get("value") if urls else file.get("remote_url")
    if endpoint.cache.l2 == "none":
        return [f"an L2 URL {value!r} is set although the endpoint has no L2"] if value else []
    if value is None:
        return [f"no {REMOTE_URL} (nor remote_url in the LMCache file); L2 is off"]
    if endpoint.cache.l2 == "curvine":
        wanted = l2_url(endpoint)
        if value != wanted:
            return [
                f"{REMOTE_URL} is {value!r}, not this endpoint's L2 directory {wanted!r} (its current identity; a pod "
                "from before the last change still reads the old directory until it is replaced)"
            ]
    elif not str(value).startswith(TIERED_STORAGE_SCHEME):
        return [f"{REMOTE_URL} is {value!r}, not HyperPod tiered storage ({TIERED_STORAGE_SCHEME}...)"]
    return []


def _setting_problems(env: Sequence[Obj], file: Mapping[str, Any], key: str, wanted: str, why: str) -> list[str]:
    """An LMCache setting: its variable if set (exactly once), else the file's value."""
    name = env_name(key)
    if any(e.get("name") == name for e in env):
        return _single_value(env, name, wanted, why)
    if key in file:
        return (
            [] if str(file[key]) == wanted else [f"{key} is {file[key]!r} in the LMCache file, not {wanted!r} ({why})"]
        )
    return [f"{name} is not set ({why})"]


def _mount_problems(pod: Obj, container: Obj) -> list[str]:
    volumes = {
        v.get("name")
        for v in pod.get("spec", {}).get("volumes", [])
        if v.get("persistentVolumeClaim", {}).get("claimName") == L2_CLAIM
    }
    if not volumes:
        return [f"no volume of claim {L2_CLAIM}"]
    mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == L2_MOUNT_PATH]
    if len(mounts) != 1 or mounts[0].get("name") not in volumes:
        return [f"the {L2_CLAIM} volume is not mounted once at {L2_MOUNT_PATH}"]
    return []


def _single_value(env: Sequence[Obj], name: str, wanted: str, why: str) -> list[str]:
    values = [e.get("value") for e in env if e.get("name") == name]
    if values == [wanted]:
        return []
    if not values:
        return [f"{name} is not set ({why})"]
    return [f"{name} is {', '.join(repr(v) for v in values)}, not {wanted!r} ({why})"]


# ---- Curvine -------------------------------------------------------------------------------------------------------


def curvine_findings(env: Environment, snapshot: Snapshot) -> list[Finding]:
    if not env.hyperpod.installs("curvine"):
        return [Finding("curvine", "cluster", True, "the owner's Curvine (install.curvine: false): not checked")]
    pods = [p for p in _live(snapshot.pods) if _namespace(p) == CURVINE_NAMESPACE]
    masters = [p for p in pods if _has_labels(p, component_labels("master"))]
    ready = sum(_ready(p) for p in masters)
    wanted = env.curvine.masters
    findings = [
        Finding(
            "curvine",
            "masters",
            ready == wanted == len(masters),
            f"{ready} of {wanted} masters ready" + (f" ({len(masters)} pods)" if len(masters) != wanted else ""),
        )
    ]
    gpu_selector = node_selector(env, "gpu")
    gpu_nodes = sorted(_name(n) for n in snapshot.nodes if _has_labels(n, gpu_selector))
    if not gpu_nodes:
        selector = ",".join(f"{k}={v}" for k, v in gpu_selector.items())
        findings.append(Finding("curvine", "workers", False, f"no node matches the GPU selector {selector}"))
    workers = [p for p in pods if _has_labels(p, component_labels("worker"))]
    for node in gpu_nodes:
        on_node = [p for p in workers if p.get("spec", {}).get("nodeName") == node]
        ready_here = sum(_ready(p) for p in on_node)
        ok = len(on_node) == 1 and ready_here == 1
        message = (
            "one worker, ready" if ok else f"{len(on_node)} workers, {ready_here} ready; exactly one ready is needed"
        )
        findings.append(Finding("curvine", f"worker on {node}", ok, message))
    healers = [p for p in pods if _has_labels(p, component_labels("l2-healer"))]
    for node in gpu_nodes:
        findings.append(_mount_finding(node, [p for p in healers if p.get("spec", {}).get("nodeName") == node]))
    stray = sorted({str(p.get("spec", {}).get("nodeName")) for p in workers} - set(gpu_nodes))
    if stray:
        findings.append(
            Finding("curvine", "stray workers", False, f"workers on nodes outside the GPU selector: {stray}")
        )
    return findings


def _mount_finding(node: str, healers: Sequence[Obj]) -> Finding:
    """The node's L2 healer is Ready only while every L2 mount on the node is on the node's live FUSE connection and
    the Curvine master and the node's FUSE answer (its /readyz)."""
    subject = f"L2 mounts on {node}"
    if not healers:
        return Finding("curvine", subject, False, f"no {HEALER} pod: dead L2 mounts there are neither found nor healed")
    if all(_ready(p) for p in healers):
        return Finding("curvine", subject, True, "every L2 mount was on the live FUSE at the healer's last check")
    name = _name(healers[0])
    return Finding(
        "curvine",
        subject,
        False,
        f"an L2 mount is on a dead FUSE, or the Curvine master or the node's FUSE does not answer; the healer "
        f"restarts the pods of dead mounts once both answer: "
        f"kubectl -n {CURVINE_NAMESPACE} logs {name}",
    )


# ---- claims and policies -------------------------------------------------------------------------------------------


def claim_findings(config: Config, snapshot: Snapshot) -> list[Finding]:
    findings: list[Finding] = []
    for lob in config.lobs:
        namespace = lob_namespace(lob.name)
        claims = [c for c in snapshot.pvcs if _namespace(c) == namespace and _name(c) == L2_CLAIM]
        subject = f"{namespace}/{L2_CLAIM}"
        if not claims:
            findings.append(Finding("l2-volume", subject, False, "the claim does not exist"))
            continue
        phase = claims[0].get("status", {}).get("phase", "unknown")
        volume = claims[0].get("spec", {}).get("volumeName", "")
        findings.append(
            Finding("l2-volume", subject, phase == "Bound", f"{phase}" + (f" to {volume}" if volume else ""))
        )
    return findings


def policy_findings(config: Config, snapshot: Snapshot) -> list[Finding]:
    findings: list[Finding] = []
    for lob in config.lobs:
        namespace = lob_namespace(lob.name)
        needed = any(e.mode == "operator" and e.cache.l2 == "curvine" for e in lob.endpoints)
        policies = [p for p in snapshot.policies if _namespace(p) == namespace and _name(p) == POLICY_NAME]
        subject = f"{namespace}/{POLICY_NAME}"
        if not policies:
            if needed:
                findings.append(
                    Finding("kyverno", subject, False, "missing: operator pods would start without their L2 rewiring")
                )
            continue
        ready, reason = _policy_ready(policies[0])
        findings.append(Finding("kyverno", subject, ready, "ready" if ready else f"not ready: {reason}"))
    return findings


def _policy_ready(policy: Obj) -> tuple[bool, str]:
    """Kyverno's IsReady: condition Ready=True (kyverno/kyverno api/kyverno/v1/policy_status.go); older `ready`."""
    status = policy.get("status", {})
    for condition in status.get("conditions", []):
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", str(condition.get("message") or condition.get("reason", ""))
    if "ready" in status:
        return bool(status["ready"]), "status.ready is false"
    return False, "Kyverno has not reported on it (is Kyverno running?)"


# ---- object helpers ------------------------------------------------------------------------------------------------


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))


def _namespace(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("namespace", ""))


def _has_labels(obj: Obj, selector: Mapping[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _live(pods: Sequence[Obj]) -> list[Obj]:
    """Pods that run or will: not being deleted, not finished (evicted pods linger as Failed)."""
    return [
        p
        for p in pods
        if not p.get("metadata", {}).get("deletionTimestamp")
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions", [])
    )
