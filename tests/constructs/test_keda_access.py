"""Issue 33, KEDA: a standalone LOB's AWS autoscaling signs as the LOB's own KEDA role, and the LOB's guard lets a
namespace's TriggerAuthentications name that role only (kvtier/constructs/keda_access.py, kvtier/k8s/lob_admission.py).

`KVTIER_ADMISSION_BREAK=keda` renders the old TriggerAuthentication (no roleArn: KEDA's own identity): the guard
then refuses kvtier's own TriggerAuthentication and `test_aws_triggers_sign_as_the_lob` fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from kvtier.config.endpoint import Autoscaling, CloudWatchTrigger, PrometheusTrigger
from kvtier.config.loader import Config
from kvtier.config.lob import LineOfBusiness
from kvtier.constructs.keda_access import KedaAccess, needs_keda_role
from kvtier.k8s.autoscaling import aws_trigger_authentication
from kvtier.k8s.lob_admission import OPERATOR_SUBJECT, lob_guard
from kvtier.rules import load_checked
from tests.k8s.test_lob_admission import admit
from tests.support import CONFIG_DIR

ROLE = "arn:aws:iam::111122223333:role/kvtier-prod-support-keda"
OTHER = "arn:aws:iam::111122223333:role/kvtier-prod-retail-keda"
WORKSPACE = "ws-0123abcd-4567"
AMP_URL = f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/{WORKSPACE}"
PROVIDER = "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, "prod")


@pytest.fixture(scope="module")
def support(config: Config) -> LineOfBusiness:
    lob = config.lob("support")
    triggers = (
        CloudWatchTrigger(type="cloudwatch", namespace="AWS/SageMaker", metric_name="Invocations", target_value=10),
        PrometheusTrigger(type="prometheus", server_address=AMP_URL, query="sum(up)", target_value=5),
    )
    autoscaling = Autoscaling(min_replicas=1, max_replicas=2, triggers=triggers)
    first = lob.endpoints[0].model_copy(update={"autoscaling": autoscaling})
    assert first.mode == "standalone"
    return lob.model_copy(update={"endpoints": (first, *lob.endpoints[1:])})


@pytest.fixture(scope="module")
def guard(support: LineOfBusiness) -> dict[str, Any]:
    return lob_guard("prod", support, operator_pods=False, inference_operator=True, keda_role_arn=ROLE)


def test_the_lob_role_trusts_kedas_service_account_and_reads_only_its_workspace(
    config: Config, support: LineOfBusiness
) -> None:
    assert needs_keda_role(config.env, support)
    stack = Stack(App(), "T", env={"account": "111122223333", "region": "us-east-1"})
    KedaAccess(stack, "Keda", env=config.env, lob=support, oidc_provider_arn=PROVIDER)
    template = Template.from_stack(stack).to_json()
    (role,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Role"]
    assert role["Properties"]["RoleName"] == "kvtier-prod-support-keda"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity" and trust["Principal"] == {"Federated": PROVIDER}
    assert "system:serviceaccount:hyperpod-inference-system:keda-operator" in str(template)
    (policy,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert str(statements["QueryOwnWorkspaces"]["Resource"]).count("workspace/") == 1
    assert WORKSPACE in str(statements["QueryOwnWorkspaces"]["Resource"])
    assert statements["ReadCloudWatchMetrics"]["Resource"] == "*"  # no resource-level permissions: open (row 11)


def test_aws_triggers_sign_as_the_lob(guard: dict[str, Any]) -> None:
    auth = aws_trigger_authentication("support", "llama31-8b", ROLE)
    assert auth["spec"]["podIdentity"] == {"provider": "aws", "roleArn": ROLE}
    assert admit(guard, auth) is None


def _auth(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": "a", "namespace": "kvtier-support"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"podIdentity": {"provider": "aws"}},  # KEDA's own identity: every LOB's metrics
        {"podIdentity": {"provider": "aws", "roleArn": OTHER}},  # another LOB's role
        {"podIdentity": {"provider": "aws", "identityOwner": "workload"}},  # a role from an annotation it writes
        {"podIdentity": {"provider": "aws-eks"}},  # the same, deprecated
        {"secretTargetRef": [{"parameter": "awsRoleArn", "name": "s", "key": "k"}]},  # any role, via a Secret
        {"awsSecretManager": {"podIdentity": {"provider": "aws"}, "secrets": []}},  # KEDA reads Secrets Manager
    ],
    ids=["keda-identity", "other-lob-role", "workload", "aws-eks", "awsRoleArn-parameter", "secrets-manager"],
)
def test_a_trigger_authentication_cannot_borrow_another_identity(guard: dict[str, Any], spec: dict[str, Any]) -> None:
    assert admit(guard, _auth(spec)) is not None
    assert admit(guard, _auth(spec), "UPDATE") is not None


def _scaled(trigger: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "s", "namespace": "kvtier-support"},
        "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [trigger]},
    }


def test_a_scaler_cannot_use_kedas_or_a_cluster_identity(guard: dict[str, Any]) -> None:
    cluster_auth = {"type": "aws-cloudwatch", "metadata": {}, "authenticationRef": {"name": "x", "kind": "ClusterTriggerAuthentication"}}  # fmt: skip
    operator = {"type": "aws-cloudwatch", "metadata": {"identityOwner": "operator", "awsRegion": "us-east-1"}}
    own = {"type": "aws-cloudwatch", "metadata": {"awsRegion": "us-east-1"}, "authenticationRef": {"name": "a"}}
    assert admit(guard, _scaled(cluster_auth)) is not None
    assert admit(guard, _scaled(operator)) is not None
    assert admit(guard, _scaled(own)) is None


def test_the_operators_own_keda_objects_are_left_to_it(guard: dict[str, Any]) -> None:
    """What the Inference Operator renders from an IEC is UNVERIFIED (closed source): its controller is excluded."""
    user = {"username": f"system:serviceaccount:{OPERATOR_SUBJECT['namespace']}:{OPERATOR_SUBJECT['name']}"}
    assert admit(guard, _auth({"podIdentity": {"provider": "aws"}}), user=user) is None
