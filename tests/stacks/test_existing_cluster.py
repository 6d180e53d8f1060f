"""The example environment with `existing:` (config/environments/byoc.yaml): one synth with cdk-nag for the session.

No VPC, EKS or HyperPod resource; the import with kvtier's kubectl provider; only the switched-on add-ons; the Tiered
Storage custom resource with least-privilege roles; and the same platform and LOB manifests as `dev` except node
selectors (and the environment's name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.addons import addons
from kvtier.config.hyperpod import Role
from kvtier.config.loader import Config
from kvtier.constructs.tiered_storage import RESOURCE_TYPE
from kvtier.k8s.placement import node_selector
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, Synth

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
OIDC = "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF"
CREATED_ONLY_FOR_A_NEW_CLUSTER = {
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::NatGateway",
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::VPCEndpoint",
    "AWS::EC2::FlowLog",
    "AWS::EKS::Cluster",
    "AWS::IAM::OIDCProvider",
    "AWS::KMS::Key",
    "AWS::SageMaker::Cluster",
}


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, "byoc")


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource["Properties"]
    return props


def _all_resources(synth: Synth) -> list[dict[str, Any]]:
    return [r for t in synth.templates.values() for r in t.get("Resources", {}).values()]


def _statements(synth: Synth, kind: str) -> list[dict[str, Any]]:
    return [
        s
        for policy in synth.resources(kind, "AWS::IAM::Policy").values()
        for s in _props(policy)["PolicyDocument"]["Statement"]
    ]


# ---- what is (not) created ----------------------------------------------------------------------------------------


def test_no_network_stack_and_no_cluster_resources(byoc: Synth) -> None:
    assert sorted(byoc.templates) == ["kvtier-byoc-cluster", "kvtier-byoc-platform", "kvtier-byoc-retail"]
    assert byoc.stacks.network is None
    created = {r["Type"] for r in _all_resources(byoc)}
    assert not created & CREATED_ONLY_FOR_A_NEW_CLUSTER
    assert not [t for t in created if t.startswith("Custom::AWSCDK-EKS-Cluster")]


def test_the_tiered_storage_custom_resource(byoc: Synth) -> None:
    resource = byoc.only("cluster", RESOURCE_TYPE)
    props = _props(resource)
    assert props["ClusterName"] == ARN
    assert props["Mode"] == "Enable"
    assert props["InstanceMemoryAllocationPercentage"] == 20
    assert "ServiceToken" in props
    # The waiter polls every 30 s for at most the framework's one hour.
    [machine] = byoc.resources("cluster", "AWS::StepFunctions::StateMachine").values()
    definition = json.dumps(_props(machine)["DefinitionString"])
    assert '\\"IntervalSeconds\\":30' in definition and '\\"MaxAttempts\\":120' in definition
    handlers = {_props(f)["Handler"]: _props(f) for f in byoc.resources("cluster", "AWS::Lambda::Function").values()}
    assert handlers["index.on_event"]["Runtime"] == handlers["index.is_complete"]["Runtime"] == "python3.14"


def test_tiered_storage_roles_are_least_privilege(byoc: Synth) -> None:
    sagemaker = [s for s in _statements(byoc, "cluster") if "sagemaker" in json.dumps(s["Action"])]
    by_sid = {s["Sid"]: s for s in sagemaker}
    assert set(by_sid) == {"TieredStorageOnThisCluster", "ReadThisCluster", "HyperPodNodeVolumes"}
    # UpdateCluster only for is_complete, which calls it once the cluster is InService (issue 26)
    functions = byoc.resources("cluster", "AWS::Lambda::Function")
    [is_complete_role] = [
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in functions.values()
        if f["Properties"].get("Handler") == "index.is_complete"
    ]
    granted = [
        p
        for p in byoc.resources("cluster", "AWS::IAM::Policy").values()
        if "sagemaker:UpdateCluster" in json.dumps(p["Properties"]["PolicyDocument"])
    ]
    assert [p["Properties"]["Roles"] for p in granted] == [[{"Ref": is_complete_role}]]
    orchestrator = [s for s in _statements(byoc, "cluster") if s.get("Sid") == "ReadTheOrchestrator"]
    assert [s["Action"] for s in orchestrator] == ["eks:DescribeCluster"]
    assert sorted(by_sid["TieredStorageOnThisCluster"]["Action"]) == [
        "sagemaker:DescribeCluster",
        "sagemaker:UpdateCluster",
    ]
    assert by_sid["ReadThisCluster"]["Action"] == "sagemaker:DescribeCluster"
    for statement in sagemaker:
        assert statement["Resource"] == ARN
    assert not [s for s in _statements(byoc, "cluster") if "iam:PassRole" in json.dumps(s["Action"])]


def test_the_waiter_records_its_update_call_in_its_own_parameter(byoc: Synth) -> None:
    """Issue 37: is_complete records which request its UpdateCluster was sent for in an SSM parameter of its own
    (the framework passes the same event to every poll); it may read and write that parameter and no other."""
    [(parameter_id, parameter)] = byoc.resources("cluster", "AWS::SSM::Parameter").items()
    assert _props(parameter)["Value"] == "{}"
    functions = byoc.resources("cluster", "AWS::Lambda::Function").values()
    [is_complete] = [f for f in functions if _props(f)["Handler"] == "index.is_complete"]
    assert _props(is_complete)["Environment"]["Variables"]["POLL_STATE_PARAMETER"] == {"Ref": parameter_id}
    [state] = [s for s in _statements(byoc, "cluster") if s.get("Sid") == "PollState"]
    assert sorted(state["Action"]) == ["ssm:GetParameter", "ssm:PutParameter"]
    assert parameter_id in json.dumps(state["Resource"])
    assert not [s for s in _statements(byoc, "cluster") if "ssm:" in json.dumps(s["Action"]) and s is not state]


def test_no_system_node_gate_on_an_existing_cluster(byoc: Synth) -> None:
    """Issue 37: the gate waits for the first system node of a cluster kvtier creates; an existing one has nodes."""
    assert not [n for n, t in byoc.templates.items() if "Custom::KvtierSystemNodeGate" in json.dumps(t)]


def test_kubectl_provider_runs_in_the_owners_vpc_with_an_admin_access_entry(byoc: Synth) -> None:
    functions = [
        _props(f) for f in byoc.resources("cluster", "AWS::Lambda::Function").values() if "VpcConfig" in _props(f)
    ]
    assert functions, "the kubectl handler must run in the VPC"
    for function in functions:
        assert function["VpcConfig"]["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
        assert function["VpcConfig"]["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    [entry] = [_props(e) for e in byoc.resources("cluster", "AWS::EKS::AccessEntry").values()]
    assert entry["ClusterName"] == "ml-cluster-eks"
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])
    manifests = byoc.resources("retail", "Custom::AWSCDK-EKS-KubernetesResource")
    assert all(_props(m)["ClusterName"] == "ml-cluster-eks" for m in manifests.values())


def test_only_the_switched_on_addons_with_irsa_on_the_owners_provider(byoc: Synth) -> None:
    installed = {_props(a)["AddonName"]: _props(a) for a in byoc.resources("cluster", "AWS::EKS::Addon").values()}
    assert set(installed) == {a.name for a in addons("nodes")}  # install.addons: [nodes]
    assert all(a["ClusterName"] == "ml-cluster-eks" for a in installed.values())
    trusts = [
        _props(r)["AssumeRolePolicyDocument"]["Statement"][0]
        for r in byoc.resources("cluster", "AWS::IAM::Role").values()
        if "Federated" in json.dumps(_props(r)["AssumeRolePolicyDocument"])
    ]
    assert trusts
    issuer = OIDC.split(":oidc-provider/")[1]
    for trust in trusts:
        assert trust["Principal"]["Federated"] == OIDC
        assert trust["Condition"]["StringEquals"][f"{issuer}:aud"] == "sts.amazonaws.com"
    assert not byoc.resources("cluster", "Custom::HyperPodDependencies")  # hyperpod_dependencies: false


def test_platform_gets_the_existing_clusters_arns(byoc: Synth) -> None:
    platform = json.dumps(byoc.template("platform"))
    assert ARN in platform
    assert "Fn::ImportValue" not in json.dumps(byoc.only("platform", "AWS::EKS::Addon"))


# ---- the same manifests as a new cluster, except node selectors ----------------------------------------------------


def _manifests(synth: Synth) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stack in [synth.stacks.platform, *synth.stacks.lobs]:
        kind = stack.stack_name.split("-", 2)[2]
        out[kind] = {
            # Observability differs by design: dev runs the Prometheus Operator mode, byoc the HyperPod add-on's; so
            # does the system-node gate's RBAC (issue 37: a cluster kvtier creates only, an existing one has nodes).
            "charts": {
                c.node.id: c.manifests()
                for c in stack.outputs.charts
                if "observability" not in c.node.id and c.node.id != "node-gate"
            },
            "releases": [dict(vars(release)) for release in stack.outputs.releases],
        }
    return out


def _as_dev(value: Any, selectors: dict[Role, tuple[dict[str, str], dict[str, str]]]) -> Any:
    """byoc's manifests in dev's terms: the owner's selectors become kvtier's role labels, the env name dev, and the
    load balancer's source subnets (a fact of each VPC, not of the cluster kind) are set aside."""
    if isinstance(value, dict):
        if "from" in value and isinstance(value["from"], list):  # a NetworkPolicy ingress rule
            value = {**value, "from": [peer for peer in value["from"] if "ipBlock" not in peer]}
        for theirs, ours in selectors.values():
            if theirs.items() <= value.items():  # a node selector, maybe merged with other labels
                rest = {k: v for k, v in value.items() if k not in theirs}
                return {**_as_dev(rest, selectors), **ours}
            [(key, label)] = theirs.items()
            if value.get("key") == key and value.get("values") == [label]:
                [(our_key, our_label)] = ours.items()
                return {**value, "key": our_key, "values": [our_label]}
        return {k: ("<digest>" if k == "kvtier.io/config-digest" else _as_dev(v, selectors)) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_dev(v, selectors) for v in value]
    if isinstance(value, str):
        for theirs, ours in selectors.values():  # a selector passed as an argument, `--node-selector=key=label`
            [(key, label)], [(our_key, our_label)] = theirs.items(), ours.items()
            value = value.replace(f"={key}={label}", f"={our_key}={our_label}")
        return value.replace("byoc", "dev")
    return value


def test_platform_and_lob_manifests_equal_devs_except_node_selectors(byoc: Synth, dev: Synth, config: Config) -> None:
    dev_config = load_checked(CONFIG_DIR, "dev")
    roles: tuple[Role, ...] = ("system", "gpu")
    selectors = {role: (node_selector(config.env, role), node_selector(dev_config.env, role)) for role in roles}
    theirs, ours = _manifests(byoc), _manifests(dev)
    assert ours["platform"]["charts"] and ours["retail"]["charts"]
    text = json.dumps(theirs)
    assert "kvtier.io/role" not in text  # every chart places pods through kvtier.k8s.placement
    for role in roles:
        [(key, label)] = selectors[role][0].items()
        assert f'"{key}": "{label}"' in text
    assert _as_dev(theirs, selectors) == _as_dev(ours, {})  # config digests hash the env name: compared as the TOML


def test_dist_lists_the_custom_resource_free_cluster_stack(byoc: Synth) -> None:
    cluster = byoc.stacks.cluster
    assert cluster.hyperpod_cluster_arn == ARN and cluster.oidc_provider_arn == OIDC
    assert {r.name for r in cluster.outputs.releases} == {a.name for a in addons("nodes")}


def test_outputs_name_the_existing_clusters(byoc: Synth) -> None:
    outputs = byoc.template("cluster")["Outputs"]
    assert outputs["EksClusterName"]["Value"] == "ml-cluster-eks"
    assert outputs["HyperPodClusterArn"]["Value"] == ARN
    assert "ml-cluster-eks" in outputs["UpdateKubeconfigCommand"]["Value"]


def test_config_path_is_the_example(config: Config) -> None:
    assert Path(config.files["env"]).name == "byoc.yaml"
    assert config.env.hyperpod.existing is not None
    assert [lob.name for lob in config.lobs] == ["retail"]


def test_cfn_lint_is_clean(byoc: Synth) -> None:
    from cfnlint.api import ManualArgs, lint_file

    # W3005: aws-cdk-lib emits DependsOn that a GetAtt already implies (as in tests/stacks/test_lint.py).
    ignored = ["W3005"]
    findings = [
        f"{name}: {match.rule.id} {match.message}"
        for name in byoc.templates
        for match in lint_file(
            byoc.outdir / f"{name}.template.json",
            config=ManualArgs(regions=["us-west-2"], ignore_checks=ignored),
        )
    ]
    assert findings == []


def test_addons_on_the_owners_cluster_preserve_what_is_there(byoc: Synth) -> None:
    """Issue 26: OVERWRITE took over an owner's self-managed copy instead of failing as InstallSwitches documents."""
    declared = [_props(a) for a in byoc.resources("cluster", "AWS::EKS::Addon").values()]
    assert declared
    assert {a["ResolveConflicts"] for a in declared} == {"PRESERVE"}
