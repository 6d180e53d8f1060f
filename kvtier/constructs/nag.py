"""cdk-nag acknowledgements: each finding kvtier accepts is acknowledged next to the code causing it, with why."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Stack, Token, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (exact id, e.g. `AwsSolutions-IAM5[Resource::*]`) on `scope`."""
    acknowledge_all(scope, {finding: reason})


def acknowledge_all(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """Acknowledge several findings on `scope` ({finding id: reason}) in one call to the jsii kernel."""
    rules = [Acknowledgment(id=f"{PACK}::{finding}", reason=reason) for finding, reason in reasons.items()]
    Validations.of(scope).acknowledge(*rules)


def account(scope: IConstruct) -> str:
    """How cdk-nag writes the stack's account inside finding ids: literal when bound, else a placeholder."""
    value = Stack.of(scope).account
    return "<AWS::AccountId>" if Token.is_unresolved(value) else value


def managed_policy(name: str) -> str:
    """The IAM4 finding id for an AWS managed policy."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"


LAMBDA_BASIC = managed_policy("service-role/AWSLambdaBasicExecutionRole")
LAMBDA_VPC = managed_policy("service-role/AWSLambdaVPCAccessExecutionRole")
