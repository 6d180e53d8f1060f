"""The L2 janitor as a chart builder: a one-replica Deployment on GPU nodes that keeps one L2 claim within its age and
size budget, in a loop every JANITOR_INTERVAL_SECONDS (docs/l2.md).

The logic is scripts/l2_janitor.py, shipped in a ConfigMap next to the Deployment and run by the Curvine runtime image's
python3 (that image is already on every GPU node for the workers, so the janitor pulls nothing new). The script takes
its rules as arguments; what a connector's files look like comes from its `layout` (kvtier/connectors/).
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s

from kvtier.config.environment import Environment
from kvtier.connectors import CONNECTORS
from kvtier.k8s.base import api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY, digest, env_var
from kvtier.k8s.curvine.scripts import JANITOR, script_text
from kvtier.k8s.curvine.scripts.l2_janitor import TMP_SUFFIX
from kvtier.k8s.placement import placement
from kvtier.serving import L2_MOUNT_PATH
from kvtier.sizing import JANITOR_INTERVAL_SECONDS, JANITOR_RESOURCES, JANITOR_TARGET_FRACTION

UNUSED_GRACE_MINUTES = 60  # a directory no endpoint names goes only after this (a new endpoint may precede its config)
PROBE_MAX_FILES = 5000  # files read for lost blocks per pass at most (about 10-20 s through FUSE at 2-4 ms a file)
PROBE_SECONDS = 10  # and at most this long: a pass stays well inside the 30 s interval and the liveness window
METRICS_PORT = 9400  # /metrics and /healthz (the observability rules read the names in the script)
SCRIPT_DIR = "/opt/kvtier/janitor"
COMPONENT = "l2-janitor"  # value of kvtier.io/component
COMPONENT_LABEL = "kvtier.io/component"


def temp_max_age_minutes() -> int:
    """How old a temporary file of any connector may grow before it counts as an interrupted write: the LOB's
    directory may hold every connector's files (an endpoint that changed connector leaves its old ones to the
    janitor), so the longest any connector allows. Each connector's temporary files must end in the suffix the
    script treats as temporary (its TMP_SUFFIX; tests/connectors/test_janitor_rules.py runs the script on them)."""
    for connector in CONNECTORS:
        if connector.layout.temp_suffix != TMP_SUFFIX:
            raise ValueError(
                f"connector {connector.name} writes temporary files ending in {connector.layout.temp_suffix!r}; the "
                f"janitor script knows only {TMP_SUFFIX!r}: teach scripts/{JANITOR} its suffix first"
            )
    return max(c.layout.temp_max_age_minutes for c in CONNECTORS)


def janitor_args(
    env: Environment, lob: str, budget_gb: float, max_age_hours: float, in_use: Sequence[str]
) -> list[str]:
    masters = [f"--master-url={names.master_web_url(i)}" for i in range(env.curvine.masters)]
    return [
        L2_MOUNT_PATH,
        f"--lob={lob}",
        f"--budget-gb={budget_gb:g}",
        f"--max-age-hours={max_age_hours:g}",
        f"--tmp-max-age-minutes={temp_max_age_minutes()}",
        f"--target-fraction={JANITOR_TARGET_FRACTION:g}",
        "--delete-unused",
        f"--unused-grace-minutes={UNUSED_GRACE_MINUTES}",
        *(f"--in-use={directory}" for directory in sorted(set(in_use))),
        *masters,
        # Lost-block probing after the budget step, bounded per pass, its progress kept on the volume (docs/l2.md).
        "--keep-state",
        f"--probe-max-files={PROBE_MAX_FILES}",
        f"--probe-seconds={PROBE_SECONDS}",
        f"--interval-seconds={JANITOR_INTERVAL_SECONDS}",
        f"--metrics-port={METRICS_PORT}",
    ]


def add_janitor(
    chart: cdk8s.Chart,
    id: str,
    *,
    env: Environment,
    lob: str,
    namespace: str,
    claim_name: str,
    budget_gb: float,
    max_age_hours: float,
    in_use: Sequence[str],
) -> cdk8s.ApiObject:
    """Add the janitor of claim `claim_name` in `namespace` to `chart`; returns the Deployment (its ConfigMap, named
    `<claim>-janitor`, is added too). `budget_gb` is decimal GB (10^9 bytes), like the LOB's l2.budget_gb; `in_use`
    are the endpoints' directories below the claim's root (kvtier.connectors.l2_subdir): everything else goes."""
    if budget_gb <= 0 or max_age_hours <= 0:
        raise ValueError(f"budget_gb ({budget_gb}) and max_age_hours ({max_age_hours}) must be positive")
    name = f"{claim_name}-janitor"
    labels = {"app.kubernetes.io/name": COMPONENT, "app.kubernetes.io/instance": name, COMPONENT_LABEL: COMPONENT}
    script = api_object(
        chart,
        f"{id}-script",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {JANITOR: script_text(JANITOR)},
        },
    )
    container = {
        "name": "janitor",
        "image": env.curvine.images.curvine,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{SCRIPT_DIR}/{JANITOR}"],
        "args": janitor_args(env, lob, budget_gb, max_age_hours, in_use),
        "env": [env_var("PYTHONDONTWRITEBYTECODE", "1"), env_var("PYTHONUNBUFFERED", "1")],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        # /healthz turns 503 when no pass succeeded for 5 intervals + 60 s (a hung mount): the kubelet restarts it.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 30,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": JANITOR_RESOURCES,
        # Root without capabilities: LMCache's files belong to root (the vLLM images run as root) and deleting them
        # needs write permission on their directories; the janitor only unlinks inside the mount.
        "securityContext": {**RESTRICTED_READ_ONLY, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            {"name": "l2", "mountPath": L2_MOUNT_PATH},  # the same path as the endpoint pods (design)
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    pod_spec = {
        "automountServiceAccountToken": False,  # no API access needed
        "enableServiceLinks": False,
        # GPU nodes: only there does the CSI node plugin mount L2.
        **placement(env, "gpu").pod_spec(),
        "securityContext": dict(POD_SECURITY),
        "containers": [container],
        "volumes": [
            {"name": "l2", "persistentVolumeClaim": {"claimName": claim_name}},
            {"name": "script", "configMap": {"name": name}},
        ],
    }
    if env.hyperpod.installs("curvine"):
        pod_spec["priorityClassName"] = names.PRIORITY_CLASS  # kvtier's, made with the Curvine charts
    deployment = api_object(
        chart,
        id,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # two janitors would race on the same files
                "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            **names.prometheus_annotations(METRICS_PORT),
                            "kvtier.io/config-digest": digest(script_text(JANITOR)),  # a new script rolls the pod
                        },
                    },
                    "spec": pod_spec,
                },
            },
        },
    )
    deployment.add_dependency(script)
    return deployment
