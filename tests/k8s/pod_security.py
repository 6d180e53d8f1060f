"""The Pod Security Standards, baseline and restricted, as a checker of pod specs: no real implementation is on the
registries this project uses (PyPI, npm, Debian; the upstream `k8s.io/pod-security-admission` is Go), so each
control below is one row of the table at https://kubernetes.io/docs/concepts/security/pod-security-standards/
(docs/references.md "Issue 33: admission and identity"), with its restricted fields and allowed values.

`violations(spec, level)` returns one line per failed control (empty: the pod passes that level).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# Baseline "Capabilities": the only capabilities that may be added.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
# Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# Restricted "Volume Types": the only volume sources allowed.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
LEVELS = ("baseline", "restricted")

Check = Callable[[dict[str, Any]], Iterator[str]]


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("containers", []), *spec.get("initContainers", []), *spec.get("ephemeralContainers", [])]


def _ctx(container: dict[str, Any]) -> dict[str, Any]:
    return dict(container.get("securityContext") or {})


def _host_process(spec: dict[str, Any]) -> Iterator[str]:
    contexts = [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]
    if any((c.get("windowsOptions") or {}).get("hostProcess") for c in contexts):
        yield "HostProcess: windowsOptions.hostProcess must be unset or false"


def _host_namespaces(spec: dict[str, Any]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"Host Namespaces: spec.{field} must be unset or false"


def _privileged(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _ctx(c).get("privileged"):
            yield f"Privileged Containers: {c['name']} securityContext.privileged must be unset or false"


def _capabilities(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        extra = set((_ctx(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            yield f"Capabilities: {c['name']} adds {sorted(extra)}"


def _host_path(spec: dict[str, Any]) -> Iterator[str]:
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            yield f"HostPath Volumes: volume {v['name']} is a hostPath"


def _host_ports(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if any(p.get("hostPort") for p in c.get("ports", [])):
            yield f"Host Ports: {c['name']} sets a hostPort"


def _apparmor(spec: dict[str, Any]) -> Iterator[str]:
    contexts = [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]
    for c in contexts:
        if (c.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            yield "AppArmor: appArmorProfile.type must be RuntimeDefault, Localhost or unset"


def _selinux(spec: dict[str, Any]) -> Iterator[str]:
    contexts = [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]
    for c in contexts:
        options = c.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            yield "SELinux: seLinuxOptions type/user/role not allowed"


def _proc_mount(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _ctx(c).get("procMount") not in (None, "Default"):
            yield f"/proc Mount Type: {c['name']} procMount must be Default or unset"


def _seccomp_baseline(spec: dict[str, Any]) -> Iterator[str]:
    contexts = [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]
    if any((c.get("seccompProfile") or {}).get("type") == "Unconfined" for c in contexts):
        yield "Seccomp: Unconfined is not allowed"


def _sysctls(spec: dict[str, Any]) -> Iterator[str]:
    for s in (spec.get("securityContext") or {}).get("sysctls") or []:
        if s["name"] not in SAFE_SYSCTLS:
            yield f"Sysctls: {s['name']} is not in the safe set"


def _volume_types(spec: dict[str, Any]) -> Iterator[str]:
    for v in spec.get("volumes", []):
        sources = set(v) - {"name"}
        if not sources <= RESTRICTED_VOLUMES:
            yield f"Volume Types: volume {v['name']} uses {sorted(sources - RESTRICTED_VOLUMES)}"


def _privilege_escalation(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        if _ctx(c).get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {c['name']} must set allowPrivilegeEscalation: false"


def _non_root(spec: dict[str, Any]) -> Iterator[str]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    for c in _containers(spec):
        own = _ctx(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            yield f"Running as Non-root: {c['name']} must run with runAsNonRoot: true"


def _non_root_user(spec: dict[str, Any]) -> Iterator[str]:
    contexts = [spec.get("securityContext") or {}, *map(_ctx, _containers(spec))]
    if any(c.get("runAsUser") == 0 for c in contexts):
        yield "Running as Non-root user: runAsUser must not be 0"


def _seccomp_restricted(spec: dict[str, Any]) -> Iterator[str]:
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        own = (_ctx(c).get("seccompProfile") or {}).get("type")
        if (own or pod) not in ("RuntimeDefault", "Localhost"):
            yield f"Seccomp: {c['name']} needs RuntimeDefault or Localhost (pod or container)"


def _capabilities_restricted(spec: dict[str, Any]) -> Iterator[str]:
    for c in _containers(spec):
        caps = _ctx(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"Capabilities: {c['name']} must drop ALL and add at most NET_BIND_SERVICE"


BASELINE: list[Check] = [
    _host_process, _host_namespaces, _privileged, _capabilities, _host_path, _host_ports, _apparmor, _selinux,
    _proc_mount, _seccomp_baseline, _sysctls,
]  # fmt: skip
RESTRICTED: list[Check] = [
    *BASELINE, _volume_types, _privilege_escalation, _non_root, _non_root_user, _seccomp_restricted,
    _capabilities_restricted,
]  # fmt: skip


def violations(spec: dict[str, Any], level: str) -> list[str]:
    """The failed controls of pod `spec` at `level` (`privileged` has none)."""
    checks = {"privileged": [], "baseline": BASELINE, "restricted": RESTRICTED}[level]
    return [line for check in checks for line in check(spec)]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every Pod, workload template and CronJob template among `objects`."""
    for o in objects:
        kind, name, spec = o["kind"], o["metadata"].get("name", "?"), o.get("spec") or {}
        if kind == "Pod":
            yield f"Pod/{name}", spec
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            yield f"{kind}/{name}", spec["template"]["spec"]
        elif kind == "CronJob":
            yield f"{kind}/{name}", spec["jobTemplate"]["spec"]["template"]["spec"]
