"""IAM roles for Kubernetes service accounts (IRSA): the one way kvtier writes their web-identity trust."""

from __future__ import annotations

from aws_cdk import CfnJson, Token
from aws_cdk import aws_iam as iam
from constructs import Construct


def irsa_principal(
    scope: Construct,
    id: str,
    *,
    provider_arn: str,
    issuer: str,
    namespace: str,
    service_account: str,
    like: bool = False,
) -> iam.IPrincipal:
    """Trust `system:serviceaccount:<namespace>:<service_account>` through the cluster's IAM OIDC provider.

    `issuer` is the provider's host/path (`oidc.eks.<region>.amazonaws.com/id/<id>`), the prefix of the condition
    keys; `like` makes the subject a StringLike pattern. Keys that contain tokens go through CfnJson, because
    CloudFormation must resolve them before IAM reads the document.
    """
    value = {
        f"{issuer}:aud": "sts.amazonaws.com",
        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
    }
    conditions = CfnJson(scope, id, value=value) if Token.is_unresolved(issuer) else value
    return iam.FederatedPrincipal(
        provider_arn,
        conditions={"StringLike" if like else "StringEquals": conditions},
        assume_role_action="sts:AssumeRoleWithWebIdentity",
    )
