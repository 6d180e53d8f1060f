"""`kvtier verify`: the failures that are otherwise silent, checked on the objects of a live cluster.

- Every endpoint pod: exactly one LMCACHE_REMOTE_URL pointing at its own L2 identity directory, the L2 mount,
  PYTHONHASHSEED and the serde (a pod without them runs, with L2 hits silently at zero); on vLLM's own connector
  (`cache.connector: vllm`) the rendered `--kv-transfer-config` with its fs tier on that directory, the block hash
  and PYTHONHASHSEED (each connector's `pod_problems`, kvtier/connectors/).
- Curvine: one ready worker on every GPU node, every master ready, and every L2 mount on every GPU node answering
  (the node's L2 healer is Ready only then).
- Every LOB's `l2-cache` claim bound, and its Kyverno Policy ready where operator pods need the rewiring.
- Every endpoint pod whose engine or init container (an adapter's fetch or check, issue 35) keeps failing: its exit
  and the one line of its last log that says why (the container's termination message, which kvtier renders from
  its logs on error), so a missing adapter or an engine that cannot start is one line, not a wiring pass.

Pure functions over a `Snapshot` (what kvtier.ops.kube reads), so they are tested on stored objects. Names, labels and
values come from the charts' own modules, so the checks follow the charts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.config.loader import Config
from kvtier.connectors import CONNECTORS, connector_for
from kvtier.errors import ExitCode
from kvtier.k8s.curvine.names import HEALER, component_labels
from kvtier.k8s.curvine.names import NAMESPACE as CURVINE_NAMESPACE
from kvtier.k8s.endpoint_names import ENGINE_CONTAINER as STANDALONE_CONTAINER
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.k8s.placement import node_selector
from kvtier.naming import lob_namespace
from kvtier.serving import L2_CLAIM, L2_MARKER

Obj = Mapping[str, Any]  # a Kubernetes object as the API returns it (JSON)

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
                problems = [*pod_problems(endpoint, pod, configmaps), *failing_containers(pod)]
                message = "; ".join(problems) if problems else _wiring_ok(endpoint)
                findings.append(Finding("endpoint", f"{subject} pod {_name(pod)}", not problems, message))
    return findings


def _wiring_ok(endpoint: Endpoint) -> str:
    return connector_for(endpoint).wiring_summary(endpoint)


def pod_problems(endpoint: Endpoint, pod: Obj, configmaps: Sequence[Obj] = ()) -> list[str]:
    """What is wrong with one endpoint pod's cache wiring (empty when nothing is), as its connector checks it
    (kvtier/connectors/: LMCache's URL, file and serde, or vLLM's `--kv-transfer-config`; the mount and seed)."""
    container = serving_container(endpoint, pod)
    if container is None:
        return ["no vLLM container found (named after the endpoint, `engine`, or carrying LMCache settings)"]
    return connector_for(endpoint).pod_problems(endpoint, pod, container, configmaps)


def serving_container(endpoint: Endpoint, pod: Obj) -> Obj | None:
    containers = [c for c in pod.get("spec", {}).get("containers", []) if isinstance(c, Mapping)]
    for container in containers:  # operator: the worker container is named after the endpoint; standalone: `engine`
        if container.get("name") in (endpoint.name, STANDALONE_CONTAINER):
            return container
    prefixes = tuple(p for c in CONNECTORS for p in c.env_prefixes)
    for container in containers:
        names = {e.get("name", "") for e in container.get("env", [])}
        if L2_MARKER in names or any(str(n).startswith(prefixes) for n in names):
            return container
    return None


# Waiting reasons of a container that is being set up, not failing.
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
ERROR_LINE = re.compile(r"\b\w+(?:Error|Exception): \S")
LINE_MAX = 300


def why_it_failed(message: str) -> str:
    """The line of a container's termination message (its last log lines) that says why: kvtier's own line (the
    adapter check's), else the last `SomethingError: ...` (the exception that ended it), else the last line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "no log; read it with kubectl logs --previous"
    for wanted in (lambda line: line.startswith("kvtier:"), lambda line: bool(ERROR_LINE.search(line))):
        found = [line for line in lines if wanted(line)]
        if found:
            return found[-1][:LINE_MAX]
    return lines[-1][:LINE_MAX]


def failing_containers(pod: Obj) -> list[str]:
    """Init and main containers of the pod that failed or cannot start, one line each (a running container is not
    failing, whatever it did before)."""
    status = pod.get("status", {})
    out: list[str] = []
    for kind, key in (("init container", "initContainerStatuses"), ("container", "containerStatuses")):
        for container in status.get(key) or []:
            state = container.get("state") or {}
            waiting, ended = state.get("waiting") or {}, state.get("terminated") or {}
            reason = waiting.get("reason")
            if ended:
                failed = ended if ended.get("exitCode", 0) != 0 else None
            elif reason and reason not in STARTING:
                failed = (container.get("lastState") or {}).get("terminated")
            else:
                continue
            name = container.get("name", "?")
            if failed:
                again = f", {reason}, {container.get('restartCount', 0)} restarts" if reason else ""
                why = why_it_failed(str(failed.get("message", "")))
                out.append(f"{kind} {name} failed (exit {failed.get('exitCode')}{again}): {why}")
            elif reason:
                out.append(f"{kind} {name} is waiting: {reason}: {str(waiting.get('message', ''))[:LINE_MAX]}")
    return out


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
