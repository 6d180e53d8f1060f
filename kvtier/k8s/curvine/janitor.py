"""The L2 janitor as a chart builder: a CronJob on GPU nodes that keeps one L2 claim within its age and size budget.

The logic is scripts/l2_janitor.py, shipped in a ConfigMap next to the CronJob and run by the Curvine runtime image's
python3 (that image is already on every GPU node for the workers, so the janitor pulls nothing new).
"""

from __future__ import annotations

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import api_object
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY, env_var
from kvtier.k8s.curvine.scripts import JANITOR, script_text
from kvtier.placement import placement
from kvtier.serving import L2_MOUNT_PATH

DEFAULT_SCHEDULE = "*/10 * * * *"
TMP_MAX_AGE_MINUTES = 60  # LMCache renames `<file>.tmp` as soon as the write ends: an hour-old one was interrupted
TARGET_FRACTION = 0.9
SCRIPT_DIR = "/opt/kvtier/janitor"


def janitor_args(budget_gb: float, max_age_hours: float) -> list[str]:
    return [
        L2_MOUNT_PATH,
        f"--budget-gb={budget_gb:g}",
        f"--max-age-hours={max_age_hours:g}",
        f"--tmp-max-age-minutes={TMP_MAX_AGE_MINUTES}",
        f"--target-fraction={TARGET_FRACTION:g}",
    ]


def add_janitor(
    chart: cdk8s.Chart,
    id: str,
    *,
    env: Environment,
    namespace: str,
    claim_name: str,
    budget_gb: float,
    max_age_hours: float,
    schedule: str = DEFAULT_SCHEDULE,
) -> cdk8s.ApiObject:
    """Add the janitor of claim `claim_name` in `namespace` to `chart`; returns the CronJob (its ConfigMap, named
    `<claim>-janitor`, is added too). `budget_gb` is decimal GB (10^9 bytes), like the LOB's l2.budget_gb."""
    if budget_gb <= 0 or max_age_hours <= 0:
        raise ValueError(f"budget_gb ({budget_gb}) and max_age_hours ({max_age_hours}) must be positive")
    name = f"{claim_name}-janitor"
    labels = {"app.kubernetes.io/name": "l2-janitor", "app.kubernetes.io/instance": name}
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
        "args": janitor_args(budget_gb, max_age_hours),
        "env": [env_var("PYTHONDONTWRITEBYTECODE", "1")],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        # Root without capabilities: LMCache's files belong to root (the vLLM images run as root); the janitor only
        # unlinks inside the mount.
        "securityContext": dict(RESTRICTED_READ_ONLY),
        "volumeMounts": [
            {"name": "l2", "mountPath": L2_MOUNT_PATH},  # the same path as the endpoint pods (design)
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    cronjob = api_object(
        chart,
        id,
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "schedule": schedule,
                "timeZone": "Etc/UTC",
                "concurrencyPolicy": "Forbid",  # two passes would race on the same files
                "startingDeadlineSeconds": 300,
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "backoffLimit": 1,
                        "activeDeadlineSeconds": 1800,
                        "ttlSecondsAfterFinished": 86400,
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {
                                "restartPolicy": "Never",
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
                            },
                        },
                    },
                },
            },
        },
    )
    cronjob.add_dependency(script)
    return cronjob
