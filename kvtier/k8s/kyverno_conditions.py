"""Kyverno `deny` conditions over the admission request, for kvtier's LOB guard (lob_admission.py): the variable and
count helpers, and the Pod Security Standards' baseline level as conditions on a Pod.

Why the guard carries baseline itself: a namespace with operator endpoints only warns at baseline (its pods are
not documented to pass it: they mount hostPath `/dev/shm`, kvtier/k8s/namespace.py), and what baseline forbids
there is what reaches a GPU node: added capabilities (`SYS_MODULE` loads a kernel module, `DAC_READ_SEARCH` opens
host files by handle), an unmasked /proc, a probe the kubelet sends from the node's address (which Curvine's fence
admits), a hostPort on the node. So the guard refuses every baseline control but one allowance, hostPaths in
`allowed_host_paths`, in every LOB namespace. Each control is one check of `kubernetes/pod-security-admission@v0.34.9`
(Kubernetes 1.34, `policy/check_<name>.go`, named below); tests/k8s/test_lob_admission.py holds the guard to the
Pod Security checker of the tests on generated pods. Not expressed: the AppArmor beta annotations (JMESPath cannot
pair an annotation's key with its value without Kyverno's own `items()`): Pod Security still warns on them.

Every path that may be absent ends in `|| <default>`: Kyverno's JMESPath returns an error for a key missing from an
object, and a condition whose variable fails is a rule error, which the guard's `failurePolicy: Fail` turns into a
refusal (docs/references.md "Issue 33: admission and identity").
"""

from __future__ import annotations

from typing import Any

# check_capabilities_baseline: the only capabilities a container may add.
BASELINE_CAPABILITIES = [
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
]  # fmt: skip
# check_sysctls: the safe set of 1.32-1.36.
SAFE_SYSCTLS = [
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
]  # fmt: skip
# check_seLinuxOptions (1.31+): the types a pod or container may set ("" is unset).
SELINUX_TYPES = ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"]

SPEC = "request.object.spec"
CONTAINERS = f"[{SPEC}.containers || `[]`, {SPEC}.initContainers || `[]`, {SPEC}.ephemeralContainers || `[]`][]"  # every container the upstream `visitContainers` visits
CONTEXTS = f"[[{SPEC}.securityContext], {CONTAINERS}.securityContext][]"  # the pod's security context and each one's
VOLUMES = f"({SPEC}.volumes || `[]`)"
APPARMOR_DISALLOWED = (
    "appArmorProfile && appArmorProfile.type != 'RuntimeDefault' && appArmorProfile.type != 'Localhost'"
)
HANDLERS = f"{CONTAINERS}.[livenessProbe, readinessProbe, startupProbe, lifecycle.postStart, lifecycle.preStop][]"


def var(expr: str) -> str:
    """A Kyverno variable: a string that is one `{{ }}` keeps the type of what `expr` returns."""
    return f"{{{{ {expr} }}}}"


def non_empty(expr: str) -> dict[str, Any]:
    """A deny condition: `expr` (a JMESPath list) is not empty."""
    return {"key": var(f"length({expr})"), "operator": "GreaterThan", "value": 0}


def any_not_in(expr: str, allowed: list[str]) -> list[dict[str, Any]]:
    """Deny conditions: `expr` (a string or a list of strings) has an element not in `allowed`, or one holding `*` or
    `?`: Kyverno's AnyNotIn matches wildcards in both directions, so a key `*` would pass as allowed."""
    return [
        {"key": var(expr), "operator": "AnyNotIn", "value": allowed},
        non_empty(f"[{expr}][] | [?contains(@, '*') || contains(@, '?')]"),
    ]


def pod_baseline(allowed_host_paths: list[str]) -> list[dict[str, Any]]:
    """Deny conditions: the Pod fails a baseline control, a hostPath in `allowed_host_paths` excepted."""
    return [
        non_empty(f"{CONTEXTS} | [?windowsOptions.hostProcess]"),  # check_windowsHostProcess
        non_empty(f"[{SPEC}.hostNetwork, {SPEC}.hostPID, {SPEC}.hostIPC][?@]"),  # check_hostNamespaces
        non_empty(f"{CONTAINERS} | [?securityContext.privileged == `true`]"),  # check_privileged
        *any_not_in(f"{CONTAINERS}.securityContext.capabilities.add[]", BASELINE_CAPABILITIES),
        *any_not_in(f"{VOLUMES}[?hostPath].hostPath.path", allowed_host_paths),  # check_hostPathVolumes
        non_empty(f"{CONTAINERS}.ports[] | [?hostPort > `0`]"),  # check_hostPorts
        non_empty(f"{CONTEXTS} | [?{APPARMOR_DISALLOWED}]"),  # check_appArmorProfile (fields only: module doc)
        non_empty(f"{CONTEXTS} | [?seLinuxOptions.user || seLinuxOptions.role]"),  # check_seLinuxOptions
        *any_not_in(f"{CONTEXTS} | [].seLinuxOptions.type", SELINUX_TYPES),
        *any_not_in(f"{CONTAINERS}.securityContext.procMount", ["Default"]),  # check_procMount_baseline
        non_empty(f"{CONTEXTS} | [?seccompProfile.type == 'Unconfined']"),  # check_seccompProfile_baseline
        *any_not_in(f"{SPEC}.securityContext.sysctls[].name || `[]`", SAFE_SYSCTLS),  # check_sysctls
        non_empty(f"{HANDLERS} | [?httpGet.host || tcpSocket.host]"),  # check_hostProbesAndhostLifecycle
    ]
