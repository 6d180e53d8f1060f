"""`kvtier l2 roll-fuse`: move every GPU node's Curvine FUSE client to the version kvtier pins, one node at a time
(issue 38; docs/l2.md "Upgrading the FUSE clients").

For each node whose FUSE pod runs another image than `curvine.images.csi` (after the platform stack rolled the CSI
node plugin, so the plugin builds the new one):
  1. cordon it, and mark it with the annotation ROLL_ANNOTATION (the target image): a run that stops here is resumed
     from that mark; a node someone else had cordoned is marked KEEP_CORDONED_ANNOTATION too and stays cordoned;
  2. delete its FUSE pod, and wait until it is gone (its preStop unmounts; every L2 mount on the node is dead now);
  3. run the FUSE check pod on it (kvtier/k8s/curvine/fuse_check.py): mounting the check claim makes the node plugin
     start the new FUSE pod, and the pod writes and reads a file through it: the new client answers;
  4. let the L2 healer restart the node's L2 pods (their bind mounts are on the dead connection; the healer evicts
     them through an Eviction dry run, so PodDisruptionBudgets apply, at most one per endpoint per 5 minutes) and
     wait until none that started before the new FUSE pod is left;
  5. delete the check pod, uncordon (unless it was cordoned before), remove the marks.
Every wait is bounded (Bounds); each API request is (kvtier/ops/kube.py). A step that does not finish in time stops
the run with one line (exit 1) that says whether the node stays cordoned and how to finish. The state lives in the
cluster (the mark, the pods), so running the command again resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kvtier.config.environment import Environment
from kvtier.errors import ExitCode, KvtierError
from kvtier.k8s.curvine import healer, names
from kvtier.k8s.curvine.fuse_check import check_pod, pod_name
from kvtier.ops.fuse import (
    FUSE_CONTAINER,
    NodeFuse,
    container_image,
    is_ready,
    node_name,
    plugin_fuse_image,
    read_fleet,
    selector,
)
from kvtier.ops.kube import REQUEST_TIMEOUT_S, list_items, request
from kvtier.serving import L2_CLAIM

ROLL_ANNOTATION = "kvtier.io/fuse-roll"
# Set with the mark on a node that was cordoned before the roll (someone else's cordon): it stays cordoned after.
KEEP_CORDONED_ANNOTATION = "kvtier.io/fuse-roll-keep-cordoned"
MERGE_PATCH = "application/merge-patch+json"


class RollError(KvtierError):
    """A node's step did not finish: the run stops (exit 1), the message says where the node is left."""

    exit_code = ExitCode.PROBLEMS


@dataclass(frozen=True)
class Bounds:
    """How long each wait may take, seconds; `heal_s` None: from the healer's pace and the node's L2 pods."""

    node_ready_s: float = 300.0
    gone_s: float = 120.0  # the FUSE pod's grace period is 30 s (standalone_manager.go)
    fuse_s: float = 240.0  # the node plugin waits 60 s for a FUSE pod, the check pod runs at most 300 s
    heal_s: float | None = None
    poll_s: float = 2.0


def heal_bound(pods: Sequence[Mapping[str, Any]]) -> float:
    """The healer needs DEAD_CHECKS checks to call a mount dead, then removes one pod per endpoint per
    ENDPOINT_INTERVAL_SECONDS: the node's largest group of pods of one controller sets the pace; plus a minute for
    its probes and the API."""
    per_owner: dict[str, int] = {}
    for pod in pods:
        per_owner[owner(pod)] = per_owner.get(owner(pod), 0) + 1
    most = max(per_owner.values(), default=1)
    first = healer.DEAD_CHECKS * healer.INTERVAL_SECONDS
    return first + (most - 1) * healer.ENDPOINT_INTERVAL_SECONDS + 60.0


def owner(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata", {})
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{meta.get('namespace')}/{ref.get('kind')}/{ref.get('name')}"
    return f"{meta.get('namespace')}/Pod/{meta.get('name')}"


def uses_l2(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("namespace") == names.NAMESPACE:
        return False  # the check pod and Curvine's own
    volumes = pod.get("spec", {}).get("volumes") or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == L2_CLAIM for v in volumes)


def live(pod: Mapping[str, Any]) -> bool:
    return not pod.get("metadata", {}).get("deletionTimestamp") and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


@dataclass(frozen=True)
class NodePlan:
    node: str
    current: str  # FUSE image(s) now, or "none"
    action: str  # roll | resume | done | none | blocked
    why: str
    l2_pods: int = 0


@dataclass
class Plan:
    target: str
    nodes: list[NodePlan] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "nodes": [vars(n) for n in self.nodes]}

    @property
    def work(self) -> list[NodePlan]:
        return [n for n in self.nodes if n.action in ("roll", "resume")]


class Cluster:
    """The few calls the roll makes, through kvtier's bounded client (kvtier/ops/kube.py)."""

    def __init__(self, env: Environment, core: Any) -> None:
        self.env = env
        self.core = core
        self.options: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S}

    def fleet(self) -> list[NodeFuse]:
        return read_fleet(self.env, self.core)

    def node(self, name: str) -> dict[str, Any]:
        found = request(partial(self.core.read_node, name, **self.options), f"read node {name}", missing_ok=True)
        if found is None:
            raise RollError(f"node {name} is gone from the cluster; nothing to roll there")
        return found

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        call = partial(self.core.patch_node, name, body, _content_type=MERGE_PATCH, **self.options)
        request(call, f"patch node {name}")

    def pods_on(
        self, node: str, namespace: str | None = None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"field_selector": f"spec.nodeName={node}", **self.options}
        if labels:
            query["label_selector"] = selector(labels)
        if namespace is None:
            return list_items(partial(self.core.list_pod_for_all_namespaces, **query), f"pods on {node}")
        return list_items(partial(self.core.list_namespaced_pod, namespace, **query), f"pods in {namespace} on {node}")

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        call = partial(self.core.read_namespaced_pod, name, namespace, **self.options)
        return request(call, f"read pod {namespace}/{name}", missing_ok=True)

    def create_pod(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        call = partial(self.core.create_namespaced_pod, namespace, body, **self.options)
        request(call, f"create pod {namespace}/{body['metadata']['name']}")

    def delete_pod(self, namespace: str, name: str) -> None:
        call = partial(self.core.delete_namespaced_pod, name, namespace, **self.options)
        request(call, f"delete pod {namespace}/{name}", missing_ok=True)


def plan(env: Environment, fleet: Sequence[NodeFuse], l2_pods: Mapping[str, int] | None = None) -> Plan:
    """What a run would do on each GPU node, nodes left cordoned by an earlier run first."""
    target = env.curvine.images.csi
    out = Plan(target)
    for node in fleet:
        pods = (l2_pods or {}).get(node.node, 0)
        ours = node.annotations.get(ROLL_ANNOTATION)
        if ours is not None:
            out.nodes.append(NodePlan(node.node, node.version, "resume", "cordoned by an earlier run", pods))
        elif not node.fuse_pods:
            out.nodes.append(NodePlan(node.node, "none", "none", "no FUSE pod: its first L2 pod starts the new one"))
        elif node.versions == (target,):
            out.nodes.append(NodePlan(node.node, node.version, "done", "already on the pinned version", pods))
        elif node.plugin is None or plugin_fuse_image(node.plugin) != target:
            plugin = plugin_fuse_image(node.plugin) if node.plugin is not None else "no node plugin"
            out.nodes.append(
                NodePlan(
                    node.node,
                    node.version,
                    "blocked",
                    f"its CSI node plugin builds FUSE pods from {plugin}: deploy the platform stack first",
                    pods,
                )
            )
        else:
            out.nodes.append(NodePlan(node.node, node.version, "roll", "", pods))
    out.nodes.sort(key=lambda n: (n.action != "resume", n.node))
    return out


Say = Callable[[str], None]


@dataclass
class Roller:
    env: Environment
    cluster: Cluster
    bounds: Bounds = Bounds()
    say: Say = print
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @property
    def target(self) -> str:
        return self.env.curvine.images.csi

    @property
    def again(self) -> str:
        return f"`kvtier l2 roll-fuse -e {self.env.name}`"

    def wait(self, what: Callable[[], bool], seconds: float) -> bool:
        """Poll `what` until it holds or `seconds` passed: first every 0.1 s, doubling up to `poll_s`."""
        deadline = self.clock() + seconds
        delay = 0.1
        while True:
            if what():
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(min(delay, self.bounds.poll_s, max(0.0, deadline - self.clock())))
            delay *= 2

    def stuck(self, node: str, problem: str, cordoned: bool) -> RollError:
        if cordoned:
            return RollError(
                f"node {node} stays cordoned: {problem}; fix that and run {self.again} again to finish it, or "
                f"`kubectl uncordon {node}` to leave it as it is"
            )
        return RollError(f"node {node} is unchanged (not cordoned): {problem}; fix that and run {self.again} again")

    # ---- one node --------------------------------------------------------------------------------------------------

    def roll(self, node: str, *, resume: bool) -> None:
        self.say(f"{node}: {'resuming' if resume else 'rolling'} to {self.target}")
        if not self.wait(lambda: is_ready(self.cluster.node(node)), self.bounds.node_ready_s):
            raise self.stuck(node, f"it is not Ready after {self.bounds.node_ready_s:.0f} s", cordoned=resume)
        self.cordon(node)
        old = [p for p in self.fuse_pods(node) if container_image(p, FUSE_CONTAINER) != self.target]
        for pod in old:
            self.say(f"{node}: deleting FUSE pod {pod['metadata']['name']} ({container_image(pod, FUSE_CONTAINER)})")
            self.cluster.delete_pod(names.NAMESPACE, pod["metadata"]["name"])
        if old and not self.wait(lambda: not self.fuse_pods(node, old_only=True), self.bounds.gone_s):
            raise self.stuck(node, f"its old FUSE pod is still there after {self.bounds.gone_s:.0f} s", cordoned=True)
        fuse = self.start_and_check(node)
        self.healed(node, fuse)
        self.cluster.delete_pod(names.NAMESPACE, pod_name(node))
        keep = KEEP_CORDONED_ANNOTATION in (self.cluster.node(node).get("metadata", {}).get("annotations") or {})
        marks = {ROLL_ANNOTATION: None, KEEP_CORDONED_ANNOTATION: None}
        self.cluster.patch_node(
            node, {"spec": {} if keep else {"unschedulable": None}, "metadata": {"annotations": marks}}
        )
        left = "left cordoned, as it was before the roll" if keep else "uncordoned"
        self.say(f"{node}: {left}, FUSE client {self.target}")

    def cordon(self, node: str) -> None:
        """Cordon and mark; a node someone else had cordoned is marked to stay cordoned after the roll."""
        body = self.cluster.node(node)
        annotations = body.get("metadata", {}).get("annotations") or {}
        marks = {ROLL_ANNOTATION: self.target}
        if body.get("spec", {}).get("unschedulable") and ROLL_ANNOTATION not in annotations:
            marks[KEEP_CORDONED_ANNOTATION] = "true"
        self.cluster.patch_node(node, {"spec": {"unschedulable": True}, "metadata": {"annotations": marks}})
        self.say(f"{node}: cordoned")

    def fuse_pods(self, node: str, *, old_only: bool = False) -> list[dict[str, Any]]:
        pods = self.cluster.pods_on(node, names.NAMESPACE, names.FUSE_POD_LABELS)
        pods = [p for p in pods if node_name(p) == node]
        if old_only:
            return [p for p in pods if container_image(p, FUSE_CONTAINER) != self.target]
        return pods

    def start_and_check(self, node: str) -> dict[str, Any]:
        """Steps 3: the check pod makes the node plugin start the new FUSE pod and writes through it."""
        check = self.cluster.pod(names.NAMESPACE, pod_name(node))
        if check is not None and check.get("status", {}).get("phase") == "Failed":
            self.cluster.delete_pod(names.NAMESPACE, pod_name(node))  # an earlier run's: try again
            self.wait(lambda: self.cluster.pod(names.NAMESPACE, pod_name(node)) is None, self.bounds.gone_s)
            check = None
        if check is None:
            self.cluster.create_pod(check_pod(self.env, node))
            self.say(f"{node}: FUSE check pod {pod_name(node)} started")
        found: dict[str, Any] = {}

        def answered() -> bool:
            pod = self.cluster.pod(names.NAMESPACE, pod_name(node)) or {}
            if pod.get("status", {}).get("phase") == "Failed":
                raise self.stuck(
                    node, "the FUSE check pod failed (kubectl -n curvine logs " + pod_name(node) + ")", cordoned=True
                )
            new = [p for p in self.fuse_pods(node) if container_image(p, FUSE_CONTAINER) == self.target and is_ready(p)]
            if new and pod.get("status", {}).get("phase") == "Succeeded":
                found.update(new[0])
                return True
            return False

        if not self.wait(answered, self.bounds.fuse_s):
            ready = is_ready(self.cluster.node(node))
            why = "" if ready else " (the node is not Ready)"
            raise self.stuck(
                node,
                f"the new FUSE client did not answer within {self.bounds.fuse_s:.0f} s{why}: kubectl -n curvine "
                f"describe pod {pod_name(node)}",
                cordoned=True,
            )
        self.say(f"{node}: FUSE pod {found['metadata']['name']} ({self.target}) answers")
        return found

    def healed(self, node: str, fuse: Mapping[str, Any]) -> None:
        """Step 4: every L2 pod that started before the new FUSE pod is gone or on its way out."""
        since = str(fuse.get("metadata", {}).get("creationTimestamp", ""))

        def stale() -> list[dict[str, Any]]:
            pods = [p for p in self.cluster.pods_on(node) if uses_l2(p) and live(p)]
            return [p for p in pods if str(p.get("metadata", {}).get("creationTimestamp", "")) < since]

        left = stale()
        if not left:
            return
        bound = self.bounds.heal_s if self.bounds.heal_s is not None else heal_bound(left)
        self.say(f"{node}: waiting up to {bound:.0f} s for the L2 healer to restart {len(left)} L2 pod(s)")
        if not self.wait(lambda: not stale(), bound):
            names_left = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in stale()[:5])
            raise self.stuck(
                node,
                f"the L2 healer has not restarted {names_left} within {bound:.0f} s (a PodDisruptionBudget may hold "
                f"them: kubectl get pdb -A; the healer's log: kubectl -n curvine logs <the {names.HEALER} pod on "
                f"{node}>)",
                cordoned=True,
            )
        self.say(f"{node}: its L2 pods were restarted by the healer")
