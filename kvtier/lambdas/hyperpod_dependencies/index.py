"""Custom-resource handler: install the HyperPod dependencies Helm chart from a pinned upstream commit.

AWS documents only `git clone` + `helm install` of `helm_chart/HyperPodHelmChart` (there is no chart repository),
so at deploy time this downloads the commit's source archive, takes that folder, and runs `helm upgrade --install`
without waiting for pods: the chart must be installed before the HyperPod cluster creates any node
(reference aws-hyperpod.md 7). Synth stays offline and no chart code is vendored.

Runs in AWS Lambda with the kubectl layer (helm at /opt/helm/helm); uses only the standard library and boto3.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from botocore.signers import RequestSigner

ARCHIVE_URL = "https://codeload.github.com/{repo}/tar.gz/{commit}"
HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
DOWNLOAD_TIMEOUT_S = 120
HELM_TIMEOUT_S = 600


def on_event(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    props = event["ResourceProperties"]
    release, namespace = props["ReleaseName"], props["Namespace"]
    physical_id = f"{namespace}/{release}"
    with tempfile.TemporaryDirectory() as work:
        kubeconfig = write_kubeconfig(props["ClusterName"], props["Region"], Path(work))
        if event["RequestType"] == "Delete":
            if event.get("PhysicalResourceId") == physical_id and release_exists(release, namespace, kubeconfig):
                helm(["uninstall", release, "--namespace", namespace], kubeconfig)
            return {"PhysicalResourceId": physical_id}
        chart = fetch_chart(props["Repository"], props["Commit"], props["ChartPath"], Path(work))
        helm(["dependency", "update", str(chart)], kubeconfig)
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
        )
    return {"PhysicalResourceId": physical_id, "Data": {"Commit": props["Commit"]}}


def fetch_chart(repo: str, commit: str, chart_path: str, work: Path) -> Path:
    """Download the archive of `repo` at `commit` and extract only `chart_path` (safely) under `work`."""
    url = ARCHIVE_URL.format(repo=repo, commit=commit)
    archive = work / "source.tar.gz"
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, archive.open("wb") as out:
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


def release_exists(release: str, namespace: str, kubeconfig: Path) -> bool:
    result = subprocess.run(
        [HELM, "status", release, "--namespace", namespace, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT_S,
        check=False,
    )
    return result.returncode == 0


def helm(args: list[str], kubeconfig: Path) -> str:
    result = subprocess.run(
        [HELM, *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT_S,
        check=False,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/helm/cache",
            "HELM_CONFIG_HOME": "/tmp/helm/config",
            "HELM_DATA_HOME": "/tmp/helm/data",
        },
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm {args[0]} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def write_kubeconfig(cluster_name: str, region: str, work: Path, session: boto3.session.Session | None = None) -> Path:
    """A kubeconfig (JSON is valid YAML) with a short-lived token from the Lambda's own role."""
    session = session or boto3.session.Session(region_name=region)
    cluster = session.client("eks", region_name=region).describe_cluster(name=cluster_name)["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {
                    "server": cluster["endpoint"],
                    "certificate-authority-data": cluster["certificateAuthority"]["data"],
                },
            }
        ],
        "users": [{"name": "lambda", "user": {"token": eks_token(session, cluster_name, region)}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": "lambda"}}],
        "current-context": cluster_name,
    }
    path = work / "kubeconfig.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    path.chmod(0o600)
    return path


def eks_token(session: boto3.session.Session, cluster_name: str, region: str) -> str:
    """The bearer token `aws eks get-token` prints: a presigned STS GetCallerIdentity URL naming the cluster."""
    sts = session.client("sts", region_name=region)
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials in the Lambda environment")
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4", credentials, session.events)
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
