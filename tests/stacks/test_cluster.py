"""Assertions on the network and cluster stacks of the example environments (one synth per env per session)."""

from __future__ import annotations

import json
from typing import Any

from kvtier.addons import ADDONS, addons
from kvtier.constructs.hyperpod_dependencies import COMMIT, REPOSITORY
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, Synth


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource["Properties"]
    return props


def _logical_id(synth: Synth, kind: str, type_: str, predicate: Any = None) -> str:
    found = [k for k, v in synth.resources(kind, type_).items() if predicate is None or predicate(v)]
    assert len(found) == 1, found
    return found[0]


# ---- network ---------------------------------------------------------------------------------------------------


def test_vpc_uses_the_configured_zones_without_lookup(dev: Synth, prod: Synth) -> None:
    for synth, zones in ((dev, ["us-west-2a", "us-west-2b"]), (prod, ["us-east-1a", "us-east-1b", "us-east-1c"])):
        subnet_zones = {_props(s)["AvailabilityZone"] for s in synth.resources("network", "AWS::EC2::Subnet").values()}
        assert subnet_zones == set(zones)
        manifest = json.loads((synth.outdir / "manifest.json").read_text())
        assert "missing" not in manifest, "a context lookup happened"
    prod_net = prod.templates["kvtier-prod-network"]
    assert "Fn::GetAZs" not in json.dumps(prod_net)


def test_nat_and_private_subnets_follow_config(dev: Synth, prod: Synth) -> None:
    assert len(dev.resources("network", "AWS::EC2::NatGateway")) == 1
    assert len(prod.resources("network", "AWS::EC2::NatGateway")) == 3
    cidrs = sorted(_props(s)["CidrBlock"] for s in dev.resources("network", "AWS::EC2::Subnet").values())
    assert cidrs == ["10.0.0.0/24", "10.0.1.0/24", "10.0.128.0/18", "10.0.64.0/18"]


def test_node_security_group_allows_all_traffic_within_itself(dev: Synth) -> None:
    node_sg = _logical_id(
        dev, "network", "AWS::EC2::SecurityGroup", lambda r: "HyperPod nodes" in _props(r)["GroupDescription"]
    )
    rules = [
        _props(r)
        for r in dev.resources("network", "AWS::EC2::SecurityGroupIngress").values()
        if _props(r)["GroupId"] == {"Fn::GetAtt": [node_sg, "GroupId"]}
    ]
    assert any(
        r["IpProtocol"] == "-1" and r["SourceSecurityGroupId"] == {"Fn::GetAtt": [node_sg, "GroupId"]} for r in rules
    )


def test_interface_endpoints_accept_https_from_nodes_only(dev: Synth) -> None:
    from kvtier.config.network import DEFAULT_INTERFACE_ENDPOINTS

    endpoints = dev.resources("network", "AWS::EC2::VPCEndpoint")
    interface = [_props(e) for e in endpoints.values() if _props(e).get("VpcEndpointType") == "Interface"]
    gateway = [_props(e) for e in endpoints.values() if _props(e).get("VpcEndpointType") == "Gateway"]
    assert len(interface) == len(DEFAULT_INTERFACE_ENDPOINTS)
    assert all(e["PrivateDnsEnabled"] for e in interface)
    assert len(gateway) == 1 and "s3" in json.dumps(gateway[0]["ServiceName"])
    endpoint_sg = _logical_id(
        dev, "network", "AWS::EC2::SecurityGroup", lambda r: "interface endpoints" in _props(r)["GroupDescription"]
    )
    ingress = [
        _props(r)
        for r in dev.resources("network", "AWS::EC2::SecurityGroupIngress").values()
        if _props(r)["GroupId"] == {"Fn::GetAtt": [endpoint_sg, "GroupId"]}
    ]
    assert ingress and all(
        r["FromPort"] == 443 and r["ToPort"] == 443 and "SourceSecurityGroupId" in r for r in ingress
    )
    assert not any("CidrIp" in r for r in ingress)


def test_vpc_flow_logs_capture_all_traffic(dev: Synth) -> None:
    flow = dev.only("network", "AWS::EC2::FlowLog")
    assert _props(flow)["TrafficType"] == "ALL"
    assert _props(dev.only("network", "AWS::Logs::LogGroup"))["RetentionInDays"] == 30


# ---- EKS -------------------------------------------------------------------------------------------------------


def test_eks_cluster_settings(dev: Synth) -> None:
    props = _props(dev.only("cluster", "AWS::EKS::Cluster"))
    assert props["Name"] == "kvtier-dev"
    assert props["Version"] == "1.34"
    assert props["AccessConfig"]["AuthenticationMode"] == "API_AND_CONFIG_MAP"
    assert props["ComputeConfig"] == {"Enabled": False}  # Auto Mode off
    assert props["BootstrapSelfManagedAddons"] is False
    assert sorted(props["Logging"]["ClusterLogging"]["EnabledTypes"], key=lambda t: t["Type"]) == [
        {"Type": t} for t in ("api", "audit", "authenticator", "controllerManager", "scheduler")
    ]
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert "KeyArn" in json.dumps(props["EncryptionConfig"][0]["Provider"])
    sg_ids = json.dumps(props["ResourcesVpcConfig"]["SecurityGroupIds"])
    assert "NodeSecurityGroup" in sg_ids  # the control plane gets the node security group
    assert not dev.resources("cluster", "AWS::EKS::Nodegroup")


def test_endpoint_access_follows_config(dev: Synth, prod: Synth) -> None:
    dev_vpc = _props(dev.only("cluster", "AWS::EKS::Cluster"))["ResourcesVpcConfig"]
    assert dev_vpc["EndpointPublicAccess"] is True and dev_vpc["EndpointPrivateAccess"] is True
    assert dev_vpc["PublicAccessCidrs"] == ["203.0.113.0/24"]  # named in dev.yaml; no 0.0.0.0/0 default
    prod_vpc = _props(prod.only("cluster", "AWS::EKS::Cluster"))["ResourcesVpcConfig"]
    assert prod_vpc["EndpointPublicAccess"] is False and prod_vpc["EndpointPrivateAccess"] is True


def test_kms_key_rotates(dev: Synth) -> None:
    assert _props(dev.only("cluster", "AWS::KMS::Key"))["EnableKeyRotation"] is True


def test_admins_get_access_entries(dev: Synth, prod: Synth) -> None:
    def admin_entries(synth: Synth) -> list[dict[str, Any]]:
        return [
            _props(e)
            for e in synth.resources("cluster", "AWS::EKS::AccessEntry").values()
            if isinstance(_props(e)["PrincipalArn"], str)
        ]

    for synth in (dev, prod):
        [entry] = admin_entries(synth)
        assert entry["PrincipalArn"] == "arn:aws:iam::111122223333:role/PlatformAdmin"
        assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])


def test_oidc_provider_is_native(dev: Synth) -> None:
    provider = _props(dev.only("cluster", "AWS::IAM::OIDCProvider"))
    assert provider["ClientIdList"] == ["sts.amazonaws.com"]


def test_kubectl_provider_uses_the_v34_layer(dev: Synth) -> None:
    descriptions = [
        _props(r).get("Description", "") for r in dev.resources("cluster", "AWS::Lambda::LayerVersion").values()
    ]
    assert any(d.startswith("/opt/kubectl/kubectl 1.34.") for d in descriptions), descriptions


# ---- add-ons ---------------------------------------------------------------------------------------------------


def test_each_addon_is_declared_once_with_its_pinned_version(dev: Synth) -> None:
    declared = [_props(a) for a in dev.resources("cluster", "AWS::EKS::Addon").values()]
    names = [a["AddonName"] for a in declared]
    expected = [a for a in ADDONS if a.phase in ("network", "nodes")]
    assert sorted(names) == sorted(a.name for a in expected)
    for spec in expected:
        [addon] = [a for a in declared if a["AddonName"] == spec.name]
        assert addon["AddonVersion"] == spec.version
        assert addon["ResolveConflicts"] == "OVERWRITE"
        assert ("ServiceAccountRoleArn" in addon) == (spec.service_account is not None)


def test_vpc_cni_enforces_network_policy(dev: Synth) -> None:
    [cni] = [
        _props(a) for a in dev.resources("cluster", "AWS::EKS::Addon").values() if _props(a)["AddonName"] == "vpc-cni"
    ]
    assert json.loads(cni["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    major, minor, patch = (int(x) for x in cni["AddonVersion"].lstrip("v").split("-")[0].split("."))
    assert (major, minor, patch) >= (1, 18, 3)  # HyperPod's minimum


def _trust_subjects(template: dict[str, Any], role_id: str) -> list[str]:
    """The service-account subjects a role's web-identity trust names (through its CfnJson condition)."""
    resources = template["Resources"]
    subjects = []
    for statement in _props(resources[role_id])["AssumeRolePolicyDocument"]["Statement"]:
        condition = statement.get("Condition", {}).get("StringEquals", {})
        cfn_json = resources[condition["Fn::GetAtt"][0]]
        text = "".join(p for p in _props(cfn_json)["Value"]["Fn::Join"][1] if isinstance(p, str))
        subjects += [s.split('"')[0] for s in text.split("system:serviceaccount:")[1:]]
    return subjects


def test_addon_roles_trust_only_their_service_account(dev: Synth) -> None:
    template = dev.template("cluster")
    checked = 0
    for addon in dev.resources("cluster", "AWS::EKS::Addon").values():
        spec = next(a for a in ADDONS if a.name == _props(addon)["AddonName"])
        role = _props(addon).get("ServiceAccountRoleArn")
        assert (role is not None) == (spec.service_account is not None), spec.name
        if role is not None:
            assert _trust_subjects(template, role["Fn::GetAtt"][0]) == [f"{spec.namespace}:{spec.service_account}"]
            checked += 1
    assert checked >= 3


def test_ebs_csi_role_can_attach_hyperpod_node_volumes(dev: Synth) -> None:
    resources = dev.template("cluster")["Resources"]
    [ebs] = [
        _props(a)
        for a in dev.resources("cluster", "AWS::EKS::Addon").values()
        if _props(a)["AddonName"] == "aws-ebs-csi-driver"
    ]
    role_id = ebs["ServiceAccountRoleArn"]["Fn::GetAtt"][0]
    hyperpod_id = _logical_id(dev, "cluster", "AWS::SageMaker::Cluster")
    statements = [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in _props(r)["Roles"]
        for s in _props(r)["PolicyDocument"]["Statement"]
    ]
    [attach] = [s for s in statements if s.get("Sid") == "HyperPodNodeVolumes"]
    assert sorted(attach["Action"]) == ["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"]
    assert attach["Resource"] == {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]}


def test_install_order_network_addons_dependencies_hyperpod_then_node_addons(dev: Synth) -> None:
    template = dev.template("cluster")["Resources"]
    hyperpod_id = _logical_id(dev, "cluster", "AWS::SageMaker::Cluster")
    depends = set(template[hyperpod_id]["DependsOn"])
    network_ids = {
        k
        for k, v in template.items()
        if v["Type"] == "AWS::EKS::Addon" and _props(v)["AddonName"] in {a.name for a in addons("network")}
    }
    assert network_ids <= depends
    [deps_id] = [k for k, v in template.items() if v["Type"] == "Custom::HyperPodDependencies"]
    assert deps_id in depends
    for key, value in template.items():
        if value["Type"] == "AWS::EKS::Addon" and _props(value)["AddonName"] in {a.name for a in addons("nodes")}:
            assert hyperpod_id in value.get("DependsOn", []), key


def test_hyperpod_dependencies_come_from_a_pinned_commit_without_waiting(dev: Synth) -> None:
    release = _props(dev.only("cluster", "Custom::HyperPodDependencies"))
    assert release["Repository"] == REPOSITORY
    assert len(release["Commit"]) == 40 and release["Commit"] == COMMIT
    assert release["Namespace"] == "kube-system"
    assert json.loads(release["Values"])["global"]["region"] == "us-west-2"


# ---- HyperPod --------------------------------------------------------------------------------------------------


def test_hyperpod_cluster(dev: Synth) -> None:
    props = _props(dev.only("cluster", "AWS::SageMaker::Cluster"))
    assert props["ClusterName"] == "kvtier-dev"
    assert "Eks" in props["Orchestrator"]
    assert props["NodeRecovery"] == "Automatic"
    assert props["TieredStorageConfig"] == {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20}
    groups = {g["InstanceGroupName"]: g for g in props["InstanceGroups"]}
    assert groups["system"]["InstanceType"] == "ml.m5.2xlarge"
    gpu = groups["gpu"]
    assert gpu["InstanceType"] == "ml.g6e.4xlarge" and gpu["InstanceCount"] == 3
    assert gpu["KubernetesConfig"]["Labels"] == {"kvtier.io/role": "gpu"}
    assert groups["system"]["KubernetesConfig"]["Labels"] == {"kvtier.io/role": "system"}
    assert gpu["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
    assert gpu["LifeCycleConfig"]["OnCreate"] == "on_create_gpu.sh"
    assert groups["system"]["LifeCycleConfig"]["OnCreate"] == "on_create_system.sh"
    # ml.g6e.4xlarge has no EFA: connectivity checks would fail there.
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress"]
    assert "OnStartDeepHealthChecks" not in groups["system"]


def test_deep_health_checks_follow_efa() -> None:
    from kvtier.catalog import INSTANCE_TYPES
    from kvtier.constructs.hyperpod import deep_health_checks

    assert deep_health_checks(INSTANCE_TYPES["ml.g6e.48xlarge"]) == ["InstanceStress", "InstanceConnectivity"]
    assert deep_health_checks(INSTANCE_TYPES["ml.g6e.4xlarge"]) == ["InstanceStress"]
    assert deep_health_checks(INSTANCE_TYPES["ml.m5.2xlarge"]) is None


def test_taints_reach_the_instance_group(config_copy: Any, tmp_path: Any) -> None:
    import yaml

    from kvtier.k8s.placement import placement

    path = config_copy / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    data["hyperpod"]["instance_groups"][1]["taints"] = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    path.write_text(yaml.safe_dump(data))
    env = load_checked(config_copy, "dev").env
    assert placement(env, "gpu").tolerations == (
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    )
    assert placement(env, "system").tolerations == ()
    assert placement(env, "gpu").node_selector == {"kvtier.io/role": "gpu"}


def test_execution_role_and_lifecycle_bucket(dev: Synth) -> None:
    roles = dev.resources("cluster", "AWS::IAM::Role")
    [execution] = [
        _props(r)
        for r in roles.values()
        if "sagemaker.amazonaws.com" in json.dumps(_props(r)["AssumeRolePolicyDocument"])
    ]
    assert "AmazonSageMakerClusterInstanceRolePolicy" in json.dumps(execution["ManagedPolicyArns"])
    policies = json.dumps([_props(p) for p in dev.resources("cluster", "AWS::IAM::Policy").values()])
    for action in ("ec2:CreateNetworkInterface", "ecr:BatchGetImage", "eks-auth:AssumeRoleForPodIdentity"):
        assert action in policies
    bucket = _props(dev.only("cluster", "AWS::S3::Bucket"))
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    bucket_policy = json.dumps(_props(dev.only("cluster", "AWS::S3::BucketPolicy")))
    assert '"aws:SecureTransport": "false"' in bucket_policy


def test_outputs_a_user_needs(dev: Synth) -> None:
    outputs = dev.template("cluster")["Outputs"]
    assert {
        "EksClusterName",
        "EksClusterArn",
        "HyperPodClusterName",
        "HyperPodClusterArn",
        "UpdateKubeconfigCommand",
    } <= set(outputs)
    assert (
        outputs["UpdateKubeconfigCommand"]["Value"] == "aws eks update-kubeconfig --region us-west-2 --name kvtier-dev"
    )


def test_stack_dependencies_and_environments(dev: Synth, prod: Synth) -> None:
    manifest = json.loads((prod.outdir / "manifest.json").read_text())
    artifacts = manifest["artifacts"]
    assert artifacts["kvtier-prod-cluster"]["environment"] == "aws://111122223333/us-east-1"
    assert "kvtier-prod-network" in artifacts["kvtier-prod-cluster"]["dependencies"]
    dev_manifest = json.loads((dev.outdir / "manifest.json").read_text())
    assert dev_manifest["artifacts"]["kvtier-dev-cluster"]["environment"] == "aws://unknown-account/us-west-2"


def test_every_taggable_resource_carries_the_environment_tag(prod: Synth) -> None:
    config = load_checked(CONFIG_DIR, "prod")
    for stack in ("network", "cluster"):
        for key, resource in prod.template(stack)["Resources"].items():
            tags = _props(resource).get("Tags") if "Properties" in resource else None
            if isinstance(tags, list):
                pairs = {t["Key"]: t["Value"] for t in tags}
                assert pairs.get("kvtier:environment") == "prod", key
                for user_key, value in config.env.tags.items():
                    assert pairs.get(user_key) == value, key
