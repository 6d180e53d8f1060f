"""Issue 14, a first `cdk deploy` that succeeds and is least-privilege: template and manifest assertions on the session
synths (dev, prod), plus the config rules and the Tiered Storage handler's rollback path (Stubber)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from kvtier.catalog import INSTANCE_TYPES
from kvtier.constructs.hyperpod import deep_health_checks
from kvtier.constructs.inference_operator import ALB_POLICY_NAME, role_names
from kvtier.constructs.tiered_storage import QUERY_INTERVAL, TOTAL_TIMEOUT
from kvtier.errors import ConfigError
from kvtier.lambdas.tiered_storage import index
from kvtier.rules import load_checked
from kvtier.upstream import ALB_POLICY_BLOB, alb_policy, alb_policy_bytes
from tests.support import CONFIG_DIR, Synth

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"


def _resolve(value: Any) -> Any:
    """CloudFormation intrinsics of the partition and account resolved as in the commercial partition."""
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join(str(_resolve(p)) for p in parts)
        if value == {"Ref": "AWS::Partition"}:
            return "aws"
        if value == {"Ref": "AWS::AccountId"}:
            return "111122223333"
        if value == {"Ref": "AWS::Region"}:
            return "us-west-2"
        return {k: _resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def _as_list(value: Any) -> list[Any]:
    return sorted(value if isinstance(value, list) else [value], key=_key)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _normalized(statements: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """What a policy grants, one (effect, action, resource, condition) per pair: CDK merges statements that differ
    only in actions or resources (`@aws-cdk/aws-iam:minimizePolicies`), which grants exactly the same."""
    grants = {
        (s["Effect"], action, resource, json.dumps(s.get("Condition", {}), sort_keys=True))
        for s in statements
        for action in _as_list(s["Action"])
        for resource in _as_list(s["Resource"])
    }
    return sorted(grants)


def _role(synth: Synth, kind: str, name: str) -> dict[str, Any]:
    roles = synth.resources(kind, "AWS::IAM::Role").values()
    return next(r for r in roles if r["Properties"].get("RoleName") == name)


def _role_by_description(synth: Synth, kind: str, text: str) -> tuple[str, dict[str, Any]]:
    roles = synth.resources(kind, "AWS::IAM::Role").items()
    return next((k, r) for k, r in roles if text in json.dumps(r["Properties"].get("Description", "")))


def _policies_of(synth: Synth, kind: str, role_id: str) -> list[dict[str, Any]]:
    policies = synth.resources(kind, "AWS::IAM::Policy").values()
    return [
        s
        for p in policies
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


# ---- 1. the ALB controller's policy is upstream's --------------------------------------------------------------------


def test_stored_alb_policy_is_upstreams_file_byte_for_byte() -> None:
    data = alb_policy_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git blob id, not a security use
    assert blob == ALB_POLICY_BLOB


def test_alb_role_carries_the_upstream_policy_unchanged_but_for_the_partition(dev: Synth) -> None:
    role = _role(dev, "platform", role_names("dev", "us-west-2")["alb"])
    (inline,) = [p for p in role["Properties"]["Policies"] if p["PolicyName"] == ALB_POLICY_NAME]
    synthesized = _resolve(inline["PolicyDocument"]["Statement"])
    assert _normalized(synthesized) == _normalized(alb_policy()["Statement"])
    text = json.dumps(inline)
    assert "arn:aws:" not in text  # every ARN takes the stack's partition
    for action in ("wafv2:AssociateWebACL", "shield:CreateProtection", "elasticloadbalancing:DescribeTrustStores"):
        assert action in text


# ---- 2. the S3 CSI driver reads only the LOBs' model buckets ---------------------------------------------------------


def test_s3_csi_role_reads_only_model_buckets_and_never_kvtiers(prod: Synth) -> None:
    role_id, _ = _role_by_description(prod, "cluster", "aws-mountpoint-s3-csi-driver")
    statements = _resolve(_policies_of(prod, "cluster", role_id))
    allow = [s for s in statements if s["Effect"] == "Allow"]
    deny = [s for s in statements if s["Effect"] == "Deny"]
    resources = {r for s in allow for r in _as_list(s["Resource"])}
    assert resources == {"arn:aws:s3:::acme-ml-models", "arn:aws:s3:::acme-ml-models/*"}  # config/lobs/search.yaml
    denied = {r for s in deny for r in _as_list(s["Resource"])}
    assert {"arn:aws:s3:::kvtier-prod-*", "arn:aws:s3:::sagemaker-kvtier-prod-*/*"} <= denied
    assert "arn:aws:s3:::*" not in resources


def test_s3_csi_role_reads_nothing_without_s3_models(dev: Synth) -> None:
    role_id, _ = _role_by_description(dev, "cluster", "aws-mountpoint-s3-csi-driver")  # dev: retail, Hugging Face
    assert [s["Effect"] for s in _policies_of(dev, "cluster", role_id)] == ["Deny"]


def test_a_model_bucket_named_like_kvtiers_own_is_refused(config_copy: Path) -> None:
    path = config_copy / "lobs" / "search.yaml"
    path.write_text(path.read_text().replace("bucket: acme-ml-models", "bucket: kvtier-prod-models"))
    with pytest.raises(ConfigError, match=r"model\.bucket: 'kvtier-prod-models' is named like a bucket kvtier"):
        load_checked(config_copy, "prod")


# ---- 3. termination protection only once established -----------------------------------------------------------------


def test_no_termination_protection_on_a_first_deploy(prod: Synth) -> None:
    manifest = json.loads((prod.outdir / "manifest.json").read_text())
    protected = {
        name: a.get("properties", {}).get("terminationProtection", False)
        for name, a in manifest["artifacts"].items()
        if a["type"] == "aws:cloudformation:stack"
    }
    assert protected and not any(protected.values()), protected  # prod has an account: it was protected before


def test_established_environment_protects_network_and_cluster(tmp_path: Path) -> None:
    from kvtier.app.main import build, new_app

    app = new_app(str(tmp_path))
    app.node.set_context("established", "true")
    stacks = build(app, load_checked(CONFIG_DIR, "prod"))
    protected = {s.stack_name: s.termination_protection for s in stacks.all}
    assert protected["kvtier-prod-network"] and protected["kvtier-prod-cluster"]
    assert not protected["kvtier-prod-platform"]


# ---- 5. network -------------------------------------------------------------------------------------------------


def test_interface_endpoints_accept_only_the_node_group(dev: Synth) -> None:
    network = dev.template("network")["Resources"]
    (endpoint_sg_id,) = [
        k
        for k, r in network.items()
        if r["Type"] == "AWS::EC2::SecurityGroup" and "interface endpoints" in r["Properties"]["GroupDescription"]
    ]
    ingress = network[endpoint_sg_id]["Properties"].get("SecurityGroupIngress", [])
    ingress += [
        r["Properties"]
        for r in network.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
        and r["Properties"].get("GroupId") == {"Fn::GetAtt": [endpoint_sg_id, "GroupId"]}
    ]
    assert ingress and all("CidrIp" not in rule for rule in ingress), ingress  # no VPC-CIDR rule from `open`
    assert all("SourceSecurityGroupId" in rule for rule in ingress)


def test_public_endpoint_needs_explicit_cidrs(config_copy: Path) -> None:
    path = config_copy / "environments" / "dev.yaml"
    path.write_text(path.read_text().replace("public_access_cidrs: [203.0.113.0/24], ", ""))
    with pytest.raises(ConfigError, match=r"eks\.public_access_cidrs: the EKS API endpoint is public"):
        load_checked(config_copy, "dev")


def test_no_admin_warns(config_copy: Path) -> None:
    path = config_copy / "environments" / "dev.yaml"
    text = path.read_text()
    path.write_text(text.replace('admins: ["arn:aws:iam::111122223333:role/PlatformAdmin"]', "admins: []"))
    assert "admins: []" in path.read_text()
    warnings = [str(w) for w in load_checked(config_copy, "dev").warnings]
    assert any("eks.admins: no IAM principal gets cluster-admin access" in w for w in warnings), warnings


def test_dev_eks_endpoint_is_not_open_to_the_internet(dev: Synth) -> None:
    resources = dev.template("cluster")["Resources"]
    without_egress = {  # egress rules aside (the installer's own group: HTTPS out, issue 37)
        k: {**r, "Properties": {p: v for p, v in r.get("Properties", {}).items() if p != "SecurityGroupEgress"}}
        for k, r in resources.items()
    }
    text = json.dumps(without_egress)
    assert "0.0.0.0/0" not in text
    assert "203.0.113.0/24" in text


# ---- 6. trust and partitions --------------------------------------------------------------------------------------


def test_sagemaker_trusts_carry_source_conditions(dev: Synth) -> None:
    names = role_names("dev", "us-west-2")
    for kind, role in (
        ("platform", _role(dev, "platform", names["execution"])),
        ("platform", _role(dev, "platform", names["gated"])),
    ):  # not the node execution role: HyperPod is not documented to send them (issue 26, test_no_stranded_account)
        statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        sagemaker = [s for s in statements if s["Principal"].get("Service") == "sagemaker.amazonaws.com"]
        assert sagemaker, (kind, statements)
        assert all("aws:SourceAccount" in json.dumps(s.get("Condition", {})) for s in sagemaker)


def test_keda_role_trusts_only_its_service_account(dev: Synth) -> None:
    keda = _role(dev, "platform", role_names("dev", "us-west-2")["keda"])
    principals = json.dumps([s["Principal"] for s in keda["Properties"]["AssumeRolePolicyDocument"]["Statement"]])
    assert "sagemaker.amazonaws.com" not in principals and "Federated" in principals


def test_no_hard_coded_commercial_partition_in_iam(dev: Synth, prod: Synth) -> None:
    for synth in (dev, prod):
        for name, template in synth.templates.items():
            for kind in ("AWS::IAM::Role", "AWS::IAM::Policy"):
                for key, resource in template["Resources"].items():
                    if resource["Type"] == kind:
                        text = json.dumps(resource["Properties"]).replace("arn:aws:iam::aws:policy", "")
                        assert '"arn:aws:' not in text, f"{name} {key}"


# ---- 7. HyperPod ------------------------------------------------------------------------------------------------


def test_lifecycle_bucket_name_starts_with_sagemaker(dev: Synth) -> None:
    buckets = dev.resources("cluster", "AWS::S3::Bucket").values()
    names = [_resolve(b["Properties"].get("BucketName")) for b in buckets]
    assert any(str(n).startswith("sagemaker-kvtier-dev-") for n in names), names
    cluster = dev.only("cluster", "AWS::SageMaker::Cluster")["Properties"]
    uri = json.dumps(cluster["InstanceGroups"][0]["LifeCycleConfig"]["SourceS3Uri"])
    assert "LifecycleBucket" in uri


def test_cluster_waits_for_its_execution_roles_policy(dev: Synth) -> None:
    resources = dev.template("cluster")["Resources"]
    (cluster_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::Cluster"]
    policy_ids = [k for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and "HyperPodExecutionRole" in k]
    assert policy_ids and set(policy_ids) <= set(resources[cluster_id].get("DependsOn", []))


def test_deep_health_checks_follow_the_config() -> None:
    gpu = INSTANCE_TYPES["ml.g6e.4xlarge"]
    assert deep_health_checks(gpu, "always", established=True) == ["InstanceStress"]
    assert deep_health_checks(gpu, "on_create", established=False) == ["InstanceStress"]
    assert deep_health_checks(gpu, "on_create", established=True) is None
    assert deep_health_checks(gpu, "off") is None


def test_deep_health_checks_are_off_once_established(tmp_path: Path) -> None:
    from kvtier.app.main import build, new_app
    from kvtier.stacks.cluster import NewClusterStack

    app = new_app(str(tmp_path))
    app.node.set_context("established", "true")
    stacks = build(app, load_checked(CONFIG_DIR, "dev"))
    assert isinstance(stacks.cluster, NewClusterStack)
    groups = stacks.cluster.hyperpod.cluster.instance_groups
    assert isinstance(groups, list) and groups
    from aws_cdk.aws_sagemaker import CfnCluster

    properties = [g for g in groups if isinstance(g, CfnCluster.ClusterInstanceGroupProperty)]
    assert len(properties) == len(groups)
    assert all(g.on_start_deep_health_checks is None for g in properties)


def test_tiered_storage_counts_on_system_nodes_too(config_copy: Path) -> None:
    """90 % of an ml.m5.2xlarge (32 GiB) leaves less than its 6 GiB system reserve; the GPU nodes still fit."""
    path = config_copy / "environments" / "dev.yaml"
    text = path.read_text()
    assert "tiered_storage" in text
    data = yaml.safe_load(text)
    data["hyperpod"]["tiered_storage"] = {"enabled": True, "memory_percent": 90}
    data["hyperpod"]["instance_groups"][1]["instance_type"] = "ml.g6e.48xlarge"
    for lob in ("retail", "search", "support"):
        lob_path = config_copy / "lobs" / f"{lob}.yaml"
        lob_path.write_text(lob_path.read_text().replace("ml.g6e.4xlarge", "ml.g6e.48xlarge"))
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    assert "a ml.m5.2xlarge node has 32 GiB of RAM" in str(raised.value)


# ---- 4. the Tiered Storage handler's rollback ------------------------------------------------------------------------


@pytest.fixture()
def sagemaker() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture()
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    """The waiter's poll state (issue 37): an SSM parameter, read on every poll and written after UpdateCluster."""
    client = boto3.client("ssm", region_name="us-west-2", aws_access_key_id="t", aws_secret_access_key="t")
    monkeypatch.setenv(index.STATE_PARAMETER_ENV, STATE)
    monkeypatch.setattr(index, "_ssm_client", lambda: client)
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


STATE = "/kvtier/dev/poll-state"
REQUEST = "request-1"


def _no_call_sent(ssm: Stubber) -> None:
    ssm.add_response("get_parameter", {"Parameter": {"Name": STATE, "Value": "{}"}}, {"Name": STATE})


def _described(status: str) -> dict[str, Any]:
    return {
        "ClusterArn": ARN,
        "ClusterName": "ml-cluster",
        "ClusterStatus": status,
        "InstanceGroups": [],
        "NodeRecovery": "Automatic",
        "TieredStorageConfig": {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20},
        **({"FailureMessage": "capacity"} if status == "Failed" else {}),
    }


def _event(kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "RequestId": REQUEST,
        "PhysicalResourceId": f"{index.PREFIX}/{ARN}/Disable",
        "ResourceProperties": {"ClusterName": ARN, "Mode": "Enable", "InstanceMemoryAllocationPercentage": "20"},
        **extra,
    }


@pytest.mark.parametrize("status", ["Updating", "SystemUpdating", "Creating"])
def test_delete_skips_the_restore_while_the_cluster_is_busy(sagemaker: tuple[Any, Stubber], status: str) -> None:
    client, stub = sagemaker
    stub.add_response("describe_cluster", _described(status), {"ClusterName": ARN})  # no UpdateCluster stubbed
    result = index.on_event(_event("Delete"), None, client)
    assert result["Data"] == {"Changed": "false"}


def test_delete_restores_when_in_service(sagemaker: tuple[Any, Stubber], ssm: Stubber) -> None:
    client, stub = sagemaker
    stub.add_response("describe_cluster", _described("InService"), {"ClusterName": ARN})
    result = index.on_event(_event("Delete"), None, client)
    assert result["Data"]["Changed"] == "true"
    stub.add_response("describe_cluster", _described("InService"), {"ClusterName": ARN})
    _no_call_sent(ssm)
    stub.add_response(  # the first poll makes the call (issue 26: never from on_event)
        "update_cluster",
        {"ClusterArn": ARN},
        {"ClusterName": ARN, "TieredStorageConfig": {"Mode": "Disable"}, "NodeRecovery": "Automatic"},
    )
    recorded = json.dumps({"RequestId": REQUEST, "UpdatedAt": 2000})
    ssm.add_response("put_parameter", {"Version": 2}, {"Name": STATE, "Value": recorded, "Overwrite": True})
    event = {**_event("Delete"), "Data": result["Data"]}
    assert index.is_complete(event, None, client, now=lambda: 2000.0) == {"IsComplete": False}


def test_waiter_fails_with_hyperpods_status_before_the_framework_times_out(
    sagemaker: tuple[Any, Stubber], ssm: Stubber
) -> None:
    client, stub = sagemaker
    # Cold starts before RequestedAt and 30 s polls plus the Lambda's run: five minutes of margin (issue 26).
    assert index.DEADLINE_S + 10 * QUERY_INTERVAL.to_seconds() <= TOTAL_TIMEOUT.to_seconds()
    described = {**_described("Updating"), "FailureMessage": "instance group gpu: insufficient capacity"}
    for _ in range(2):
        stub.add_response("describe_cluster", described, {"ClusterName": ARN})
        _no_call_sent(ssm)
    waiting = _event("Create", Data={"Changed": "true", "Setting": "Enable-20", "RequestedAt": "1000"})
    assert index.is_complete(waiting, None, client, now=lambda: 1000.0 + index.DEADLINE_S - 1) == {"IsComplete": False}
    with pytest.raises(RuntimeError, match=r"still Updating .* insufficient capacity"):
        index.is_complete(waiting, None, client, now=lambda: 1000.0 + index.DEADLINE_S)
