"""The Pod Security Standards, baseline and restricted, at Kubernetes 1.34 (kvtier.versions.KUBERNETES_VERSION), as a
checker of pods.

No implementation can run here: the upstream one, `k8s.io/pod-security-admission`, is Go (and the kube-apiserver
that embeds it is on no registry this project reaches), and what PyPI, npm and Debian hold was searched
(docs/references.md "Issue 33: admission and identity"): Kyverno's CLI, Polaris, kube-linter and kubescape are on none
of them, and the one PyPI auditor that claims the standards (`k8s-policy-guard` 1.0.0) refuses capabilities baseline
allows and misses ones it forbids. So each control below is one check of the upstream package at the tag matching
1.34, `kubernetes/pod-security-admission@v0.34.9` (`policy/check_<name>.go`, named on each function), with its
restricted fields and allowed values for that version.

`violations(spec, level, annotations)` returns one line per failed control (empty: the pod passes that level).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# check_capabilities_baseline: the only capabilities that may be added.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
# check_sysctls: the safe set up to 1.32 (1.37 adds more; 1.34 has these).
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}  # fmt: skip
# check_seLinuxOptions (1.31+ adds container_engine_t).
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# check_restrictedVolumes: the only volume sources allowed.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
LEVELS = ("baseline", "restricted")

Check = Callable[[dict[str, Any], dict[str, str]], Iterator[str]]


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container the upstream `visitContainers` visits: init, regular and ephemeral."""
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def _ctx(container: dict[str, Any]) -> dict[str, Any]:
    return dict(container.get("securityContext") or {})


def _contexts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's security context and every container's."""
    return [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]


def _user_namespace(spec: dict[str, Any]) -> bool:
    """helpers.go `relaxPolicyForUserNamespacePod`: runAsNonRoot and runAsUser do not apply with hostUsers: false."""
    return spec.get("hostUsers") is False


def _host_process(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_windowsHostProcess
    if any((c.get("windowsOptions") or {}).get("hostProcess") for c in _contexts(spec)):
        yield "HostProcess: windowsOptions.hostProcess must be unset or false"


def _host_namespaces(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_hostNamespaces
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"Host Namespaces: spec.{field} must be unset or false"


def _privileged(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_privileged
    for c in _containers(spec):
        if _ctx(c).get("privileged"):
            yield f"Privileged Containers: {c['name']} securityContext.privileged must be unset or false"


def _capabilities(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_capabilities_baseline
    for c in _containers(spec):
        extra = set((_ctx(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            yield f"Capabilities: {c['name']} adds {sorted(extra)}"


def _host_path(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_hostPathVolumes
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            yield f"HostPath Volumes: volume {v['name']} is a hostPath"


def _host_ports(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_hostPorts
    for c in _containers(spec):
        if any(p.get("hostPort") for p in c.get("ports", [])):
            yield f"Host Ports: {c['name']} sets a hostPort"


def _apparmor(spec: dict[str, Any], annotations: dict[str, str]) -> Iterator[str]:  # check_appArmorProfile
    for c in _contexts(spec):
        if (c.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            yield "AppArmor: appArmorProfile.type must be RuntimeDefault, Localhost or unset"
    for key, value in sorted(annotations.items()):
        allowed = not value or value == "runtime/default" or value.startswith("localhost/")
        if key.startswith(APPARMOR_ANNOTATION) and not allowed:
            yield f"AppArmor: annotation {key}={value!r} must be runtime/default or localhost/*"


def _selinux(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_seLinuxOptions
    for c in _contexts(spec):
        options = c.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            yield "SELinux: seLinuxOptions type/user/role not allowed"


def _proc_mount(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_procMount_baseline (1.0-1.34)
    for c in _containers(spec):
        if _ctx(c).get("procMount") not in (None, "Default"):
            yield f"/proc Mount Type: {c['name']} procMount must be Default or unset"


def _seccomp_baseline(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_seccompProfile_baseline
    if any((c.get("seccompProfile") or {}).get("type") == "Unconfined" for c in _contexts(spec)):
        yield "Seccomp: Unconfined is not allowed"


def _sysctls(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_sysctls
    for s in (spec.get("securityContext") or {}).get("sysctls") or []:
        if s["name"] not in SAFE_SYSCTLS:
            yield f"Sysctls: {s['name']} is not in the safe set"


def _probe_hosts(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_hostProbesAndhostLifecycle (1.34)
    """A probe or lifecycle handler with a `host` is sent by the kubelet, from the node's address."""
    for c in _containers(spec):
        lifecycle = c.get("lifecycle") or {}
        handlers = [c.get(p) for p in PROBES] + [lifecycle.get("postStart"), lifecycle.get("preStop")]
        for handler in filter(None, handlers):
            for action in ("httpGet", "tcpSocket"):
                if (handler.get(action) or {}).get("host"):
                    yield f"Probe or lifecycle host: {c['name']} {action}.host must be unset"


def _volume_types(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_restrictedVolumes
    for v in spec.get("volumes", []):
        sources = set(v) - {"name"}
        if not sources <= RESTRICTED_VOLUMES:
            yield f"Volume Types: volume {v['name']} uses {sorted(sources - RESTRICTED_VOLUMES)}"


def _privilege_escalation(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_allowPrivilegeEscalation
    for c in _containers(spec):
        if _ctx(c).get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {c['name']} must set allowPrivilegeEscalation: false"


def _non_root(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_runAsNonRoot
    if _user_namespace(spec):
        return
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    if pod is False:
        yield "Running as Non-root: the pod must not set runAsNonRoot: false"
    for c in _containers(spec):
        own = _ctx(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            yield f"Running as Non-root: {c['name']} must run with runAsNonRoot: true"


def _non_root_user(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_runAsUser
    if not _user_namespace(spec) and any(c.get("runAsUser") == 0 for c in _contexts(spec)):
        yield "Running as Non-root user: runAsUser must not be 0"


def _seccomp_restricted(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_seccompProfile_restricted
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        own = (_ctx(c).get("seccompProfile") or {}).get("type")
        if (own or pod) not in ("RuntimeDefault", "Localhost"):
            yield f"Seccomp: {c['name']} needs RuntimeDefault or Localhost (pod or container)"


def _capabilities_restricted(spec: dict[str, Any], _: dict[str, str]) -> Iterator[str]:  # check_capabilities_restricted
    for c in _containers(spec):
        caps = _ctx(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {c['name']} must drop ALL and add at most NET_BIND_SERVICE"


BASELINE: list[Check] = [
    _host_process, _host_namespaces, _privileged, _capabilities, _host_path, _host_ports, _apparmor, _selinux,
    _proc_mount, _seccomp_baseline, _sysctls, _probe_hosts,
]  # fmt: skip
RESTRICTED: list[Check] = [
    *BASELINE, _volume_types, _privilege_escalation, _non_root, _non_root_user, _seccomp_restricted,
    _capabilities_restricted,
]  # fmt: skip


def violations(spec: dict[str, Any], level: str, annotations: dict[str, str] | None = None) -> list[str]:
    """The failed controls of pod `spec` (with its metadata `annotations`) at `level` (`privileged` has none)."""
    checks = {"privileged": [], "baseline": BASELINE, "restricted": RESTRICTED}[level]
    return [line for check in checks for line in check(spec, annotations or {})]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(kind/name, pod spec, pod annotations) of every Pod, workload template and CronJob template among `objects`."""
    for o in objects:
        kind, name, spec = o["kind"], o["metadata"].get("name", "?"), o.get("spec") or {}
        if kind == "Pod":
            yield f"Pod/{name}", spec, o["metadata"].get("annotations") or {}
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"):
            template = spec["jobTemplate"]["spec"]["template"] if kind == "CronJob" else spec["template"]
            yield f"{kind}/{name}", template["spec"], (template.get("metadata") or {}).get("annotations") or {}
