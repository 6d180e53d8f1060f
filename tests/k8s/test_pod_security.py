"""Pod Security Admission on LOB namespaces: every pod template kvtier renders into a LOB namespace passes the level
that namespace enforces, checked by tests/k8s/pod_security.py (the Pod Security Standards table, control by control).

`KVTIER_ADMISSION_BREAK=psa` restores the old unlabelled namespace: the label tests then fail.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.k8s.namespace import PSA_PREFIX
from tests.k8s.pod_security import pod_specs, violations
from tests.support import Synth


def _lob_namespaces(synth: Synth) -> list[tuple[Any, dict[str, Any], list[dict[str, Any]]]]:
    """(LOB stack, its Namespace object, every object it renders into that namespace)."""
    found = []
    for stack in synth.stacks.lobs:
        objects = [o for chart in stack.outputs.charts for o in stack.outputs.objects(chart)]
        (namespace,) = [o for o in objects if o["kind"] == "Namespace"]
        inside = [o for o in objects if o["metadata"].get("namespace") == stack.namespace]
        found.append((stack, namespace, inside))
    return found


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_kvtier_pod_passes_what_its_namespace_enforces(env: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(env)
    checked = 0
    lobs = _lob_namespaces(synth)
    for stack, namespace, objects in lobs:
        labels = namespace["metadata"]["labels"]
        operator = any(e.mode == "operator" for e in stack.lob.endpoints)
        enforce = labels.get(f"{PSA_PREFIX}enforce")
        assert enforce == (None if operator else "baseline"), (stack.namespace, labels)
        assert labels.get(f"{PSA_PREFIX}warn") == ("baseline" if operator else "restricted")
        assert labels.get(f"{PSA_PREFIX}audit") == labels.get(f"{PSA_PREFIX}warn")
        for name, spec, pod_annotations in pod_specs(objects):
            # Every kvtier pod passes baseline, in operator namespaces too (where only the operator's are unknown).
            assert violations(spec, "baseline", pod_annotations) == [], f"{stack.namespace} {name}"
            checked += 1
    assert checked >= len(lobs)  # at least each LOB's janitor


def test_which_kvtier_pods_pass_restricted(prod: Synth) -> None:
    """Why the enforced level is baseline, not restricted: the vLLM engine runs as root (its image's user)."""
    failing: dict[str, list[str]] = {}
    for _, _, objects in _lob_namespaces(prod):
        for name, spec, pod_annotations in pod_specs(objects):
            if found := violations(spec, "restricted", pod_annotations):
                failing[name.split("/")[0] + "/" + name.split("/")[1]] = found
    engines = {name for name in failing if name.startswith("Deployment/") and "router" not in name}
    assert engines and failing == {n: failing[n] for n in engines}, failing  # routers, janitors, benchmarks pass
    assert all(any("Non-root" in line for line in failing[n]) for n in engines)


def _pod(**spec: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "x"}], **spec}


@pytest.mark.parametrize(
    ("spec", "control"),
    [
        (_pod(hostNetwork=True), "Host Namespaces"),
        (_pod(hostPID=True), "Host Namespaces"),
        (_pod(containers=[{"name": "c", "securityContext": {"privileged": True}}]), "Privileged Containers"),
        (_pod(volumes=[{"name": "pool", "hostPath": {"path": "/var/lib/kubelet/plugins/curvine"}}]), "HostPath"),
        (_pod(containers=[{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]), "Capabilit"),
        (_pod(containers=[{"name": "c", "ports": [{"containerPort": 1, "hostPort": 8995}]}]), "Host Ports"),
        (_pod(containers=[{"name": "c", "securityContext": {"procMount": "Unmasked"}}]), "/proc Mount"),
        (_pod(securityContext={"seccompProfile": {"type": "Unconfined"}}), "Seccomp"),
        (_pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}), "Sysctls"),
        # The kubelet sends a probe with a host from the node's address, which Curvine's fence admits (1.34+).
        (_pod(containers=[{"name": "c", "livenessProbe": {"tcpSocket": {"host": "10.0.3.7", "port": 8995}}}]), "host"),
        (
            _pod(containers=[{"name": "c", "lifecycle": {"preStop": {"httpGet": {"host": "10.0.3.7", "port": 9000}}}}]),
            "host",
        ),
        (_pod(containers=[{"name": "c", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]), "AppArmor"),
    ],
)
def test_the_checker_refuses_what_reaches_the_pool_or_the_node(spec: dict[str, Any], control: str) -> None:
    """The hostile pods of docs/security.md row 3 fail baseline, each on its own control."""
    found = violations(spec, "baseline")
    assert found and all(control in line for line in found), found
    assert violations(_pod(), "baseline") == []


def test_the_checker_reads_the_apparmor_annotations() -> None:
    """check_appArmorProfile also reads the pod's beta annotations: only runtime/default, localhost/* or empty."""
    key = "container.apparmor.security.beta.kubernetes.io/c"
    assert violations(_pod(), "baseline", {key: "unconfined"}) == [
        f"AppArmor: annotation {key}='unconfined' must be runtime/default or localhost/*"
    ]
    for allowed in ("runtime/default", "localhost/kvtier", ""):
        assert violations(_pod(), "baseline", {key: allowed}) == []


def test_restricted_refuses_a_pod_level_run_as_root() -> None:
    """check_runAsNonRoot: a pod that sets runAsNonRoot: false fails even when every container sets true; with
    hostUsers: false (a user namespace) neither runAsNonRoot nor runAsUser applies."""
    root = {"name": "c", "securityContext": {"runAsNonRoot": True}}
    found = violations(_pod(containers=[root], securityContext={"runAsNonRoot": False}), "restricted")
    assert "Running as Non-root: the pod must not set runAsNonRoot: false" in found
    relaxed = _pod(hostUsers=False, securityContext={"runAsNonRoot": False, "runAsUser": 0})
    assert not [line for line in violations(relaxed, "restricted") if "Non-root" in line]
