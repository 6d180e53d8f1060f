"""`kvtier status` on real SageMaker and EKS clients behind botocore's Stubber: healthy, degraded and missing clusters,
no credentials; the CLI's exit codes, table and JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import boto3
import pytest
from botocore.stub import Stubber

from kvtier.cli import main as cli
from kvtier.cli import status as status_cli
from kvtier.config.loader import Config
from kvtier.errors import UnavailableError
from kvtier.ops import status
from kvtier.ops.status import ExpectedAddon, addon_check, collect, expected_addons, hyperpod_checks
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
EKS_ARN = "arn:aws:eks:us-west-2:111122223333:cluster/ml-cluster-eks"


def _client(service: Literal["sagemaker", "eks"]) -> Any:
    return boto3.client(service, region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def byoc() -> Config:
    return load_checked(CONFIG_DIR, "byoc")


@pytest.fixture()
def clients() -> Iterator[tuple[Any, Any, Stubber, Stubber]]:
    sagemaker, eks = _client("sagemaker"), _client("eks")
    with Stubber(sagemaker) as sm_stub, Stubber(eks) as eks_stub:
        yield sagemaker, eks, sm_stub, eks_stub
        sm_stub.assert_no_pending_responses()
        eks_stub.assert_no_pending_responses()


def _cluster(**changes: Any) -> dict[str, Any]:
    groups = [
        {
            "InstanceGroupName": "controllers",
            "InstanceType": "ml.m5.2xlarge",
            "CurrentCount": 2,
            "TargetCount": 2,
            "Status": "InService",
        },
        {
            "InstanceGroupName": "inference",
            "InstanceType": "ml.g6e.4xlarge",
            "CurrentCount": 3,
            "TargetCount": 3,
            "Status": "InService",
        },
        {
            "InstanceGroupName": "training",
            "InstanceType": "ml.p5.48xlarge",
            "CurrentCount": 0,
            "TargetCount": 1,
            "Status": "Creating",
        },
    ]
    response: dict[str, Any] = {
        "ClusterArn": ARN,
        "ClusterName": "ml-cluster",
        "ClusterStatus": "InService",
        "InstanceGroups": groups,
        "Orchestrator": {"Eks": {"ClusterArn": EKS_ARN}},
        "NodeRecovery": "Automatic",
        "TieredStorageConfig": {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20},
    }
    response.update(changes)
    return response


def _addon(spec: ExpectedAddon, **changes: Any) -> dict[str, Any]:
    if spec.configuration:
        changes.setdefault("configurationValues", json.dumps(dict(spec.configuration)))
    addon = {
        "addonName": spec.name,
        "clusterName": "ml-cluster-eks",
        "status": "ACTIVE",
        "addonVersion": spec.version,
        "health": {"issues": []},
    }
    addon.update(changes)
    return {"addon": addon}


def _expect_cluster(sm_stub: Stubber, eks_stub: Stubber, cluster: dict[str, Any], version: str = "1.34") -> None:
    sm_stub.add_response("describe_cluster", cluster, {"ClusterName": ARN})
    eks_stub.add_response(
        "describe_cluster",
        {"cluster": {"name": "ml-cluster-eks", "status": "ACTIVE", "version": version}},
        {"name": "ml-cluster-eks"},
    )


def _expect_addons(eks_stub: Stubber, addons: list[ExpectedAddon], overrides: dict[str, Any] | None = None) -> None:
    for spec in addons:
        params = {"clusterName": "ml-cluster-eks", "addonName": spec.name}
        change = (overrides or {}).get(spec.name)
        if change == "missing":
            eks_stub.add_client_error(
                "describe_addon", service_error_code="ResourceNotFoundException", expected_params=params
            )
        else:
            eks_stub.add_response("describe_addon", _addon(spec, **(change or {})), params)


def test_expected_addons_follow_the_registry_and_the_switches(byoc: Config) -> None:
    from kvtier.addons import ADDONS

    addons = {a.name: a for a in expected_addons(byoc.env)}
    assert set(addons) == {a.name for a in ADDONS}
    for spec in ADDONS:  # byoc.yaml installs the "nodes" phase and the operator, nothing of "network"
        wanted = spec.phase == "nodes" or (
            spec.phase == "platform" and byoc.env.hyperpod.installs("inference_operator")
        )
        assert addons[spec.name].installed_by_kvtier is wanted, spec.name
    dev = load_checked(CONFIG_DIR, "dev")
    assert all(a.installed_by_kvtier for a in expected_addons(dev.env))


def test_healthy_cluster(byoc: Config, clients: tuple[Any, Any, Stubber, Stubber]) -> None:
    sagemaker, eks, sm_stub, eks_stub = clients
    addons = expected_addons(byoc.env)
    _expect_cluster(sm_stub, eks_stub, _cluster())
    _expect_addons(eks_stub, addons)
    report = collect(byoc.env, sagemaker, eks, addons)
    assert report.healthy, [c for c in report.checks if c.verdict != "ok"]
    assert int(report.exit_code) == 0
    by_name = {(c.area, c.name): c for c in report.checks}
    assert by_name[("tiered storage", "TieredStorageConfig")].value == "Enable, 20% of memory"
    assert by_name[("node recovery", "NodeRecovery")].value == "Automatic"
    assert by_name[("instance group", "inference")].value == "3/3 nodes, ml.g6e.4xlarge, InService"
    assert by_name[("instance group", "training")].detail == "not used by kvtier"  # the owner's other group
    assert len([c for c in report.checks if c.area == "add-on"]) == len(addons)


def test_degraded_cluster(byoc: Config, clients: tuple[Any, Any, Stubber, Stubber]) -> None:
    sagemaker, eks, sm_stub, eks_stub = clients
    addons = expected_addons(byoc.env)
    cluster = _cluster(TieredStorageConfig={"Mode": "Disable"})
    cluster["InstanceGroups"][1].update(CurrentCount=2, Status="Degraded")
    _expect_cluster(sm_stub, eks_stub, cluster)
    issue = {
        "code": "InsufficientNumberOfReplicas",
        "message": "The add-on is unhealthy because it doesn't have the desired number of replicas.",
    }
    _expect_addons(
        eks_stub,
        addons,
        {
            "cert-manager": {"status": "DEGRADED", "health": {"issues": [issue]}},
            "metrics-server": "missing",
            "aws-ebs-csi-driver": {"addonVersion": "v1.40.0-eksbuild.1"},
            "vpc-cni": {"addonVersion": "v1.19.0-eksbuild.1"},  # the owner's: another version is fine...
            "coredns": {"addonVersion": "v1.11.4-eksbuild.2"},
        },
    )
    report = collect(byoc.env, sagemaker, eks, addons)
    assert not report.healthy
    assert int(report.exit_code) == 1
    bad = {c.name: c for c in report.checks if c.verdict != "ok"}
    assert set(bad) == {"inference", "TieredStorageConfig", "cert-manager", "metrics-server", "aws-ebs-csi-driver"}
    assert "1 of 3 nodes missing" in bad["inference"].detail and "group is Degraded" in bad["inference"].detail
    assert "InsufficientNumberOfReplicas" in bad["cert-manager"].detail
    assert bad["metrics-server"].value == "not installed"
    assert "kvtier pins" in bad["aws-ebs-csi-driver"].detail


def test_an_owners_vpc_cni_without_network_policy_is_degraded(
    byoc: Config, clients: tuple[Any, Any, Stubber, Stubber]
) -> None:
    """The LOBs' NetworkPolicies are silently not enforced without vpc-cni's enableNetworkPolicy."""
    sagemaker, eks, sm_stub, eks_stub = clients
    addons = [a for a in expected_addons(byoc.env) if a.name == "vpc-cni"]
    assert addons and not addons[0].installed_by_kvtier and addons[0].configuration
    _expect_cluster(sm_stub, eks_stub, _cluster())
    _expect_addons(eks_stub, addons, {"vpc-cni": {"configurationValues": "{}"}})
    [check] = [c for c in collect(byoc.env, sagemaker, eks, addons).checks if c.area == "add-on"]
    assert check.verdict == "degraded" and "enableNetworkPolicy is None, kvtier needs 'true'" in check.detail
    yaml_values = addon_check(
        addons[0],
        {"status": "ACTIVE", "addonVersion": addons[0].version, "configurationValues": "enableNetworkPolicy: 'true'"},
    )
    assert yaml_values.verdict == "ok"


def test_missing_cluster_cannot_be_checked(byoc: Config, clients: tuple[Any, Any, Stubber, Stubber]) -> None:
    sagemaker, eks, sm_stub, _ = clients
    sm_stub.add_client_error(
        "describe_cluster", service_error_code="ResourceNotFound", service_message=f"Cluster {ARN} not found"
    )
    with pytest.raises(UnavailableError, match=r"there is no HyperPod cluster .* in us-west-2 \(ResourceNotFound"):
        collect(byoc.env, sagemaker, eks, [])


def test_refused_credentials_cannot_be_checked(byoc: Config, clients: tuple[Any, Any, Stubber, Stubber]) -> None:
    sagemaker, eks, sm_stub, _ = clients
    sm_stub.add_client_error(
        "describe_cluster",
        service_error_code="ExpiredTokenException",
        service_message="The security token included in the request is expired",
    )
    with pytest.raises(UnavailableError, match=r"AWS refused the request .*ExpiredTokenException"):
        collect(byoc.env, sagemaker, eks, [])


def test_no_credentials_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    assert cli(["status", "-e", "byoc", "--config-dir", str(CONFIG_DIR)]) == 3
    assert "no AWS credentials" in capsys.readouterr().err


def test_unknown_profile_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["status", "-e", "byoc", "--config-dir", str(CONFIG_DIR), "--profile", "kvtier-no-such-profile"]) == 3
    assert "kvtier-no-such-profile" in capsys.readouterr().err


@pytest.mark.parametrize("degraded", [False, True])
def test_cli_table_and_json(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clients: tuple[Any, Any, Stubber, Stubber],
    byoc: Config,
    degraded: bool,
) -> None:
    sagemaker, eks, sm_stub, eks_stub = clients
    monkeypatch.setattr(status, "clients", lambda _env, _profile=None: (sagemaker, eks))
    monkeypatch.setattr(status, "cloudformation_client", lambda _env, _profile=None: None)  # orphans: test_preflight
    # The FUSE clients come from the Kubernetes API: tests/ops/test_fuse_roll.py
    monkeypatch.setattr(status_cli, "fuse_checks", lambda _env, _context: [])
    addons = expected_addons(byoc.env)
    for _ in range(2):  # once for the table, once for --json
        _expect_cluster(sm_stub, eks_stub, _cluster(ClusterStatus="Updating") if degraded else _cluster())
        _expect_addons(eks_stub, addons)
    code = 1 if degraded else 0
    assert cli(["status", "-e", "byoc", "--config-dir", str(CONFIG_DIR)]) == code
    table = capsys.readouterr().out
    assert ("degraded" in table) is degraded and "ml-cluster" in table
    assert cli(["status", "-e", "byoc", "--config-dir", str(CONFIG_DIR), "--json"]) == code
    data = json.loads(capsys.readouterr().out)
    assert data["healthy"] is not degraded
    assert data["hyperpod_cluster"] == ARN and data["eks_cluster"] == "ml-cluster-eks"
    cluster_check = next(c for c in data["checks"] if c["area"] == "cluster")
    assert cluster_check["verdict"] == ("degraded" if degraded else "ok")


def test_a_new_cluster_is_read_by_name_and_compared_with_its_config(clients: tuple[Any, Any, Stubber, Stubber]) -> None:
    dev = load_checked(CONFIG_DIR, "dev")
    sagemaker, eks, sm_stub, eks_stub = clients
    groups = [
        {
            "InstanceGroupName": "system",
            "InstanceType": "ml.m5.2xlarge",
            "CurrentCount": 2,
            "TargetCount": 2,
            "Status": "InService",
        },
        {
            "InstanceGroupName": "gpu",
            "InstanceType": "ml.g6e.4xlarge",
            "CurrentCount": 3,
            "TargetCount": 3,
            "Status": "InService",
        },
    ]
    sm_stub.add_response(
        "describe_cluster",
        _cluster(
            ClusterName="kvtier-dev",
            InstanceGroups=groups,
            NodeRecovery="None",
            Orchestrator={"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:111122223333:cluster/kvtier-dev"}},
        ),
        {"ClusterName": "kvtier-dev"},
    )
    eks_stub.add_response(
        "describe_cluster",
        {"cluster": {"name": "kvtier-dev", "status": "ACTIVE", "version": "1.33"}},
        {"name": "kvtier-dev"},
    )
    report = collect(dev.env, sagemaker, eks, [])
    bad = {c.area: c for c in report.checks if c.verdict != "ok"}
    assert set(bad) == {"node recovery", "eks"}
    assert "Automatic" in bad["node recovery"].detail
    assert "1.34 only" in bad["eks"].detail


def test_addon_check_without_access_is_unknown() -> None:
    check = addon_check(ExpectedAddon("cert-manager", "v1", True), None, "AccessDeniedException: no")
    assert check.verdict == "unknown" and "AccessDenied" in check.detail


def test_a_group_still_provisioning_is_shown_as_such() -> None:
    """Issue 26: with continuous provisioning a group stays InService while HyperPod retries missing nodes; status
    says so (and where the events are) instead of calling the nodes missing."""
    dev = load_checked(CONFIG_DIR, "dev")
    groups = [
        {
            "InstanceGroupName": "system",
            "InstanceType": "ml.m5.2xlarge",
            "CurrentCount": 2,
            "TargetCount": 2,
            "Status": "InService",
        },
        {
            "InstanceGroupName": "gpu",
            "InstanceType": "ml.g6e.4xlarge",
            "CurrentCount": 1,
            "TargetCount": 3,
            "Status": "InService",
        },
    ]
    checks = {c.name: c for c in hyperpod_checks(dev.env, _cluster(ClusterName="kvtier-dev", InstanceGroups=groups))}
    gpu = checks["gpu"]
    assert gpu.verdict == "degraded" and gpu.value == "1/3 nodes, ml.g6e.4xlarge, InService"
    assert "2 of 3 nodes still provisioning" in gpu.detail
    assert "aws sagemaker list-cluster-events --cluster-name kvtier-dev" in gpu.detail
    assert checks["system"].verdict == "ok"


def test_a_failed_group_is_missing_nodes_not_provisioning() -> None:
    dev = load_checked(CONFIG_DIR, "dev")
    groups = [
        {
            "InstanceGroupName": "gpu",
            "InstanceType": "ml.g6e.4xlarge",
            "CurrentCount": 0,
            "TargetCount": 3,
            "Status": "Failed",
        }
    ]
    gpu = next(c for c in hyperpod_checks(dev.env, _cluster(InstanceGroups=groups)) if c.name == "gpu")
    assert "group is Failed" in gpu.detail and "3 of 3 nodes missing" in gpu.detail


def test_status_reports_protection_off_on_an_established_environment() -> None:
    """Issue 26: a deploy without `established` silently turned termination protection off; status says so."""
    from kvtier.ops.status import _protection

    dev = load_checked(CONFIG_DIR, "dev")
    cloudformation = boto3.client(
        "cloudformation", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )

    def stack(name: str, status: str, protected: bool) -> dict[str, Any]:
        entry = {"StackName": name, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": status}
        return {"Stacks": [{**entry, "EnableTerminationProtection": protected}]}

    with Stubber(cloudformation) as stub:
        stub.add_response(
            "describe_stacks", stack("kvtier-dev-network", "UPDATE_COMPLETE", True), {"StackName": "kvtier-dev-network"}
        )
        stub.add_response(
            "describe_stacks",
            stack("kvtier-dev-cluster", "UPDATE_COMPLETE", False),
            {"StackName": "kvtier-dev-cluster"},
        )
        checks = _protection(dev.env, cloudformation)
        stub.add_response(
            "describe_stacks",
            stack("kvtier-dev-network", "CREATE_COMPLETE", False),
            {"StackName": "kvtier-dev-network"},
        )
        stub.add_client_error(
            "describe_stacks",
            service_error_code="ValidationError",
            service_message="Stack with id kvtier-dev-cluster does not exist",
            expected_params={"StackName": "kvtier-dev-cluster"},
        )
        first = _protection(dev.env, cloudformation)
    assert [(c.name, c.verdict) for c in checks] == [
        ("kvtier-dev-network", "ok"),
        ("kvtier-dev-cluster", "degraded"),
    ]
    assert "established" in checks[1].detail
    assert [(c.value, c.verdict) for c in first] == [("off, CREATE_COMPLETE", "ok"), ("absent", "ok")]
