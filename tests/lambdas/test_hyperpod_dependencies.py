"""The HyperPod dependencies installer Lambda, run locally: a fake helm records calls, archives are built here."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import urllib.parse
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from kvtier.lambdas.eks_api import cluster_access, installer

COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"
TOP = f"sagemaker-hyperpod-cli-{COMMIT}"


def _archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture()
def fake_helm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A helm that logs its arguments; `status` fails unless a release was installed."""
    log = tmp_path / "helm.log"
    script = tmp_path / "helm"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {log}\n'
        f'if [ "$1" = status ]; then grep -q "^upgrade --install" {log}; exit $?; fi\n'
    )
    script.chmod(0o755)
    monkeypatch.setattr(installer, "HELM", str(script))
    monkeypatch.setattr(installer, "write_kubeconfig", lambda _c, _r, work, session=None: work / "kubeconfig.json")
    return log


def _serve(monkeypatch: pytest.MonkeyPatch, archive: bytes) -> list[str]:
    urls: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        assert timeout > 0
        urls.append(url)
        return io.BytesIO(archive)

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    return urls


def _event(kind: str, physical_id: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "RequestType": kind,
        "ResourceProperties": {
            "ClusterName": "kvtier-dev",
            "Region": "us-west-2",
            "Repository": "aws/sagemaker-hyperpod-cli",
            "Commit": COMMIT,
            "ChartPath": "helm_chart/HyperPodHelmChart",
            "ReleaseName": "hyperpod-dependencies",
            "Namespace": "kube-system",
            "Values": json.dumps({"global": {"region": "us-west-2"}}),
        },
    }
    if physical_id:
        event["PhysicalResourceId"] = physical_id
    return event


CHART = {
    f"{TOP}/helm_chart/HyperPodHelmChart/Chart.yaml": b"apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n",
    f"{TOP}/helm_chart/HyperPodHelmChart/values.yaml": b"global:\n  region: ''\n",
    f"{TOP}/README.md": b"not part of the chart",
}


def test_create_installs_the_pinned_chart_without_waiting(fake_helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    urls = _serve(monkeypatch, _archive(CHART))
    result = installer.on_event(_event("Create"), None)
    assert result == {"PhysicalResourceId": "kube-system/hyperpod-dependencies", "Data": {"Commit": COMMIT}}
    assert urls == [f"https://codeload.github.com/aws/sagemaker-hyperpod-cli/tar.gz/{COMMIT}"]
    calls = fake_helm.read_text().splitlines()
    assert calls[0].startswith("dependency update ") and calls[0].split()[2].endswith("helm_chart/HyperPodHelmChart")
    install = calls[1]
    assert install.startswith("upgrade --install hyperpod-dependencies ")
    assert "--namespace kube-system" in install and "--values " in install
    assert "--wait" not in install  # no node exists yet: waiting for pods would hang


def test_delete_uninstalls_only_what_it_installed(fake_helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _archive(CHART))
    installer.on_event(_event("Create"), None)
    installer.on_event(_event("Delete", "kube-system/hyperpod-dependencies"), None)
    assert "uninstall hyperpod-dependencies --namespace kube-system" in fake_helm.read_text()
    fake_helm.write_text("")
    installer.on_event(_event("Delete", "some-other-id"), None)  # a failed create leaves a foreign id
    assert "uninstall" not in fake_helm.read_text()


def test_delete_of_a_foreign_id_reads_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26 (open since the first review): the kubeconfig (DescribeCluster) was written before the foreign-id
    check, so the delete after a failed create failed when the EKS cluster was already gone."""

    def gone(*_args: Any, **_kwargs: Any) -> Path:
        raise RuntimeError("DescribeCluster kvtier-dev: ResourceNotFoundException")

    monkeypatch.setattr(installer, "write_kubeconfig", gone)
    result = installer.on_event(_event("Delete", "AWSCDK::CustomResourceProviderFramework::CREATE_FAILED"), None)
    assert result == {"PhysicalResourceId": "kube-system/hyperpod-dependencies"}


def test_missing_chart_and_helm_failures_are_reported(fake_helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _archive({f"{TOP}/README.md": b"x"}))
    with pytest.raises(RuntimeError, match="helm_chart/HyperPodHelmChart not found in aws/sagemaker-hyperpod-cli@"):
        installer.on_event(_event("Create"), None)
    _serve(monkeypatch, _archive(CHART))
    failing = Path(installer.HELM)
    failing.write_text("#!/usr/bin/env bash\necho 'Error: cluster unreachable' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match="helm dependency failed: Error: cluster unreachable"):
        installer.on_event(_event("Update"), None)


def test_extraction_refuses_paths_that_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evil = dict(CHART)
    evil[f"{TOP}/helm_chart/HyperPodHelmChart/../../../../escape.txt"] = b"x"
    _serve(monkeypatch, _archive(evil))
    with pytest.raises(tarfile.OutsideDestinationError):
        installer.fetch_chart("aws/sagemaker-hyperpod-cli", COMMIT, "helm_chart/HyperPodHelmChart", tmp_path)
    assert not (tmp_path.parent / "escape.txt").exists()


def _session() -> boto3.session.Session:
    core = botocore.session.Session()
    core.set_credentials("AKIDEXAMPLE", "secret")
    return boto3.session.Session(botocore_session=core, region_name="us-west-2")


def test_token_is_a_presigned_sts_call_naming_the_cluster() -> None:
    token = cluster_access.eks_token(_session(), "kvtier-dev", "us-west-2")
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert url.startswith("https://sts.us-west-2.amazonaws.com/?Action=GetCallerIdentity")
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0]
    assert query["X-Amz-Expires"] == ["60"]


def test_kubeconfig_uses_the_cluster_endpoint_and_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session()
    client = session.client("eks", region_name="us-west-2")
    stubber = Stubber(client)
    stubber.add_response(
        "describe_cluster",
        {
            "cluster": {
                "name": "kvtier-dev",
                "endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
                "certificateAuthority": {"data": "Q0E="},
            }
        },
        {"name": "kvtier-dev"},
    )
    monkeypatch.setattr(
        session,
        "client",
        lambda service, region_name=None: (
            client if service == "eks" else _session().client(service, region_name=region_name)
        ),
    )
    with stubber:
        path = cluster_access.write_kubeconfig("kvtier-dev", "us-west-2", tmp_path, session=session)
    config = json.loads(path.read_text())
    assert config["clusters"][0]["cluster"] == {
        "server": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
        "certificate-authority-data": "Q0E=",
    }
    assert config["users"][0]["user"]["token"].startswith("k8s-aws-v1.")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    stubber.assert_no_pending_responses()


def test_a_helm_that_outlives_the_lambda_reports_its_own_error(
    fake_helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _serve(monkeypatch, _archive(CHART))
    Path(installer.HELM).write_text("#!/usr/bin/env bash\nsleep 30\n")

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return (installer.SAFETY_MARGIN_S + 1) * 1000  # one second of work left

    with pytest.raises(RuntimeError, match="helm dependency did not finish in the time this Lambda had left"):
        installer.on_event(_event("Create"), Context())
