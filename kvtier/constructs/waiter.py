"""kvtier's waiting custom resources (the byoc Tiered Storage setting, the system-node gate): their Python handler
functions and the CDK Provider framework's is-complete waiter, logged, with the cdk-nag findings it brings.

The waiter gives is_complete the same event on every poll and accepts `Data` only from the last one
(docs/references.md "Issue 37"); each handler stamps `RequestedAt` in on_event and fails with its own message before
`total_timeout`, which stays under CloudFormation's one hour for a custom resource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from kvtier.constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge, acknowledge_all


def handler_function(
    scope: Construct,
    id: str,
    *,
    handler: str,
    code: lambda_.Code,
    description: str,
    vpc: ec2.IVpc | None = None,
    subnets: Sequence[ec2.ISubnet] = (),
    security_group: ec2.ISecurityGroup | None = None,
) -> lambda_.Function:
    """A short-lived handler (one poll) with a log group of its own, retained a month; in the VPC when given one."""
    placement = {}
    if vpc is not None:
        placement = {
            "vpc": vpc,
            "vpc_subnets": ec2.SubnetSelection(subnets=list(subnets)),
            "security_groups": [security_group] if security_group is not None else None,
        }
    return lambda_.Function(
        scope,
        id,
        runtime=lambda_.Runtime.PYTHON_3_14,
        handler=handler,
        code=code,
        timeout=Duration.minutes(1),
        memory_size=256,
        log_group=logs.LogGroup(scope, f"{id}Logs", retention=logs.RetentionDays.ONE_MONTH),
        description=description,
        **placement,  # type: ignore[arg-type]
    )


def waiting_resource(
    scope: Construct,
    id: str,
    *,
    on_event: lambda_.Function,
    is_complete: lambda_.Function,
    query_interval: Duration,
    total_timeout: Duration,
    resource_type: str,
    properties: Mapping[str, Any],
) -> CustomResource:
    """The custom resource `id`, served by the Provider framework with an is-complete waiter (construct ids
    `Provider` and `WaiterLogs` in `scope`)."""
    provider = cr.Provider(
        scope,
        "Provider",
        on_event_handler=on_event,
        is_complete_handler=is_complete,
        query_interval=query_interval,
        total_timeout=total_timeout,
        # The waiter's executions are the record of how long the wait took; no execution data (it holds ARNs).
        disable_waiter_state_machine_logging=False,
        waiter_state_machine_log_options=cr.LogOptions(
            destination=logs.LogGroup(scope, "WaiterLogs", retention=logs.RetentionDays.ONE_MONTH),
            level=sfn.LogLevel.ALL,
            include_execution_data=False,
        ),
    )
    _acknowledge(scope, provider, (on_event, is_complete), in_vpc=is_complete.is_bound_to_vpc)
    return CustomResource(
        scope, id, service_token=provider.service_token, resource_type=resource_type, properties=dict(properties)
    )


def _acknowledge(
    scope: Construct, provider: cr.Provider, handlers: Sequence[lambda_.Function], *, in_vpc: bool
) -> None:
    stack = Stack.of(scope)
    reasons = {
        LAMBDA_BASIC: "Lambda basic execution role: the handlers write only their own logs.",
        "AwsSolutions-L1": "The provider framework's runtime is chosen by aws-cdk-lib, which is pinned.",
        "AwsSolutions-SF2": "The provider framework's waiter state machine offers no tracing option; it logs ALL.",
    }
    if in_vpc:
        reasons[LAMBDA_VPC] = "The handler runs in the VPC to reach a private-only EKS endpoint."
    framework = [provider.node.find_child(f"framework-{name}") for name in ("isComplete", "onTimeout")]
    for function in (*handlers, *framework):
        function_id = stack.get_logical_id(function.node.default_child)  # type: ignore[arg-type]
        reasons[f"AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]"] = (
            "The provider framework invokes its handler's versions."
        )
    acknowledge_all(scope, reasons)
    waiter_role = provider.node.find_child("waiter-state-machine").node.find_child("Role")
    acknowledge(
        waiter_role,
        "AwsSolutions-IAM5[Resource::*]",
        "Step Functions log delivery (logs:CreateLogDelivery and related) supports no resource-level permissions.",
    )
