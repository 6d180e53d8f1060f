"""Custom-resource handler: install the HyperPod dependencies Helm chart from a pinned upstream commit.

AWS documents only `git clone` + `helm install` of `helm_chart/HyperPodHelmChart` (there is no chart repository),
so at deploy time this downloads the commit's source archive, takes that folder, and runs `helm upgrade --install`
without waiting for pods: the chart must be installed before the HyperPod cluster creates any node
(reference aws-hyperpod.md 7). Synth stays offline and no chart code is vendored.

Runs in AWS Lambda with the kubectl layer (helm at /opt/helm/helm); uses only the standard library and boto3. The
asset is the `eks_api` package (handler `eks_api.installer.on_event`), shared with the node gate (cluster_access).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .cluster_access import write_kubeconfig

ARCHIVE_URL = "https://codeload.github.com/{repo}/tar.gz/{commit}"
HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
DOWNLOAD_TIMEOUT_S = 120
SAFETY_MARGIN_S = 20  # left for reporting an error before the Lambda itself is stopped
DEFAULT_BUDGET_S = 600  # outside Lambda (tests, local runs)


class Budget:
    """The time this invocation has left, so a slow helm ends with its own error, not 'Task timed out'."""

    def __init__(self, context: Any = None) -> None:
        remaining = context.get_remaining_time_in_millis() / 1000 if context is not None else DEFAULT_BUDGET_S
        self.deadline = time.monotonic() + max(1.0, remaining - SAFETY_MARGIN_S)

    def seconds(self, cap: float | None = None) -> float:
        left = max(1.0, self.deadline - time.monotonic())
        return min(left, cap) if cap is not None else left


def on_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    budget = Budget(context)
    props = event["ResourceProperties"]
    release, namespace = props["ReleaseName"], props["Namespace"]
    physical_id = f"{namespace}/{release}"
    if event["RequestType"] == "Delete" and event.get("PhysicalResourceId") != physical_id:
        # A failed create leaves a foreign id: nothing was installed, and the cluster may be gone (a rollback of
        # the cluster stack), so nothing is read either, not even the kubeconfig.
        return {"PhysicalResourceId": physical_id}
    with tempfile.TemporaryDirectory() as work:
        kubeconfig = write_kubeconfig(props["ClusterName"], props["Region"], Path(work))
        if event["RequestType"] == "Delete":
            if release_exists(release, namespace, kubeconfig, budget):
                helm(["uninstall", release, "--namespace", namespace], kubeconfig, budget)
            return {"PhysicalResourceId": physical_id}
        chart = fetch_chart(props["Repository"], props["Commit"], props["ChartPath"], Path(work), budget)
        helm(["dependency", "update", str(chart)], kubeconfig, budget)
        values = Path(work) / "values.json"
        values.write_text(props.get("Values", "{}"), encoding="utf-8")
        helm(
            [
                "upgrade",
                "--install",
                release,
                str(chart),
                "--namespace",
                namespace,
                "--values",
                str(values),
                "--history-max",
                "5",
            ],
            kubeconfig,
            budget,
        )
    return {"PhysicalResourceId": physical_id, "Data": {"Commit": props["Commit"]}}


def fetch_chart(repo: str, commit: str, chart_path: str, work: Path, budget: Budget | None = None) -> Path:
    """Download the archive of `repo` at `commit` and extract only `chart_path` (safely) under `work`."""
    url = ARCHIVE_URL.format(repo=repo, commit=commit)
    archive = work / "source.tar.gz"
    timeout = (budget or Budget()).seconds(DOWNLOAD_TIMEOUT_S)
    with urllib.request.urlopen(url, timeout=timeout) as response, archive.open("wb") as out:
        shutil.copyfileobj(response, out)
    target = work / "source"
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if _under(m.name, chart_path)]
        if not members:
            raise RuntimeError(f"{chart_path} not found in {repo}@{commit}")
        tar.extractall(target, members=members, filter="data")
    top = members[0].name.split("/", 1)[0]
    chart = target / top / chart_path
    if not (chart / "Chart.yaml").is_file():
        raise RuntimeError(f"{chart_path} in {repo}@{commit} has no Chart.yaml")
    return chart


def _under(member: str, chart_path: str) -> bool:
    parts = member.split("/", 1)  # archives put everything under "<repo>-<commit>/"
    return len(parts) == 2 and (parts[1] == chart_path or parts[1].startswith(chart_path.rstrip("/") + "/"))


def release_exists(release: str, namespace: str, kubeconfig: Path, budget: Budget | None = None) -> bool:
    try:
        result = subprocess.run(
            [HELM, "status", release, "--namespace", namespace, "--kubeconfig", str(kubeconfig)],
            capture_output=True,
            text=True,
            timeout=(budget or Budget()).seconds(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError("helm status did not finish in the time this Lambda had left") from None
    return result.returncode == 0


def helm(args: list[str], kubeconfig: Path, budget: Budget | None = None) -> str:
    try:
        result = _run_helm(args, kubeconfig, (budget or Budget()).seconds())
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"helm {args[0]} did not finish in the time this Lambda had left") from None
    if result.returncode != 0:
        raise RuntimeError(f"helm {args[0]} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _run_helm(args: list[str], kubeconfig: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HELM, *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/helm/cache",
            "HELM_CONFIG_HOME": "/tmp/helm/config",
            "HELM_DATA_HOME": "/tmp/helm/data",
        },
    )
