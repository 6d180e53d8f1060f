"""The Tiered Storage custom-resource handler, on a real SageMaker client behind botocore's Stubber (which validates
every request and response against the service model)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from kvtier.lambdas.tiered_storage import index

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
PERCENT = "InstanceMemoryAllocationPercentage"


@pytest.fixture()
def client() -> Any:
    return boto3.client(
        "sagemaker", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture()
def stub(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def _described(
    status: str = "InService", tiered: dict[str, Any] | None = None, recovery: str | None = "None"
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "ClusterArn": ARN,
        "ClusterName": "ml-cluster",
        "ClusterStatus": status,
        "InstanceGroups": [{"InstanceGroupName": "inference", "CurrentCount": 2, "TargetCount": 2}],
    }
    if tiered is not None:
        response["TieredStorageConfig"] = tiered
    if recovery is not None:
        response["NodeRecovery"] = recovery
    if status == "Failed":
        response["FailureMessage"] = "instance group inference: insufficient capacity"
    return response


def _event(kind: str, percent: str = "20", physical_id: str | None = None, **extra: Any) -> dict[str, Any]:
    # CloudFormation passes custom-resource properties as strings.
    event: dict[str, Any] = {
        "RequestType": kind,
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:x",
            "ClusterName": ARN,
            "Mode": "Enable",
            PERCENT: percent,
        },
        **extra,
    }
    if physical_id is not None:
        event["PhysicalResourceId"] = physical_id
    return event


def _expect_describe(stub: Stubber, response: dict[str, Any]) -> None:
    stub.add_response("describe_cluster", response, {"ClusterName": ARN})


def _expect_update(stub: Stubber, config: dict[str, Any], recovery: str = "None") -> None:
    stub.add_response(
        "update_cluster",
        {"ClusterArn": ARN},
        {"ClusterName": ARN, "TieredStorageConfig": config, "NodeRecovery": recovery},
    )


# ---- create --------------------------------------------------------------------------------------------------------


def test_create_records_the_change_and_calls_no_update(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered=None, recovery="None"))
    result = index.on_event(_event("Create"), None, client)  # the Stubber fails on any UpdateCluster
    assert result["PhysicalResourceId"] == f"{index.PREFIX}/{ARN}/Disable"
    assert result["Data"]["Changed"] == "true"
    assert result["Data"]["Setting"] == "Enable-20"


def test_create_does_nothing_when_already_as_asked(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}))
    result = index.on_event(_event("Create"), None, client)  # the Stubber fails on any UpdateCluster
    assert result["PhysicalResourceId"] == f"{index.PREFIX}/{ARN}/{index.UNCHANGED}"
    assert result["Data"]["Changed"] == "false"


def test_create_changes_a_different_percentage_and_records_it(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 35}, recovery="Automatic"))
    result = index.on_event(_event("Create"), None, client)
    assert result["PhysicalResourceId"].endswith("/Enable-35")
    assert result["Data"]["Setting"] == "Enable-20"


def test_rejection_fails_with_awss_message(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described())
    stub.add_client_error(
        "update_cluster",
        service_error_code="ValidationException",
        service_message="1 validation error detected: Value '200' at 'tieredStorageConfig' failed",
        http_status_code=400,
    )
    with pytest.raises(RuntimeError, match=r"UpdateCluster .*ValidationException: 1 validation error"):
        index.is_complete(_waiting(), None, client, now=lambda: 1030.0)


def test_missing_cluster_fails_with_awss_message(client: Any, stub: Stubber) -> None:
    stub.add_client_error(
        "describe_cluster",
        service_error_code="ResourceNotFound",
        service_message="Cluster not found",
        http_status_code=400,
    )
    with pytest.raises(RuntimeError, match=r"DescribeCluster .*ResourceNotFound: Cluster not found"):
        index.on_event(_event("Create"), None, client)


def test_a_cluster_without_node_recovery_is_refused_before_any_update(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(recovery=None))
    with pytest.raises(RuntimeError, match="NodeRecovery"):
        index.on_event(_event("Create"), None, client)


def test_an_old_botocore_is_refused_plainly() -> None:
    shape = SimpleNamespace(members={"ClusterName": None, "NodeRecovery": None})
    model = SimpleNamespace(operation_model=lambda _name: SimpleNamespace(input_shape=shape))
    old = SimpleNamespace(meta=SimpleNamespace(service_model=model))
    with pytest.raises(RuntimeError, match="does not know UpdateCluster TieredStorageConfig"):
        index.on_event(_event("Create"), None, old)  # type: ignore[arg-type]


# ---- update --------------------------------------------------------------------------------------------------------


def test_update_keeps_the_first_recorded_setting(client: Any, stub: Stubber) -> None:
    recorded = f"{index.PREFIX}/{ARN}/Disable"
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}))
    result = index.on_event(_event("Update", "30", recorded), None, client)
    assert result["PhysicalResourceId"] == recorded  # same id: CloudFormation sends no delete that would restore


def test_update_after_an_unchanged_create_records_the_owners_setting(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}))
    result = index.on_event(_event("Update", "30", f"{index.PREFIX}/{ARN}/{index.UNCHANGED}"), None, client)
    assert result["PhysicalResourceId"] == f"{index.PREFIX}/{ARN}/Enable-20"


def test_update_already_as_asked_keeps_the_id(client: Any, stub: Stubber) -> None:
    recorded = f"{index.PREFIX}/{ARN}/Disable"
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}))
    result = index.on_event(_event("Update", "20", recorded), None, client)
    assert result == {"PhysicalResourceId": recorded, "Data": {"Changed": "false", "Setting": "Enable-20"}}


# ---- delete --------------------------------------------------------------------------------------------------------


def test_delete_restores_what_kvtier_replaced(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}, recovery="Automatic"))
    result = index.on_event(_event("Delete", physical_id=f"{index.PREFIX}/{ARN}/Disable"), None, client)
    assert result["Data"]["Changed"] == "true"
    assert result["Data"]["Setting"] == "Disable"
    # is_complete makes the call, with the cluster's NodeRecovery passed back
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}, recovery="Automatic"))
    _expect_update(stub, {"Mode": "Disable"}, recovery="Automatic")
    event = {**_event("Delete", physical_id=result["PhysicalResourceId"]), "Data": result["Data"]}
    assert index.is_complete(event, None, client) == {"IsComplete": False}


def test_delete_restores_a_previous_percentage(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}))
    result = index.on_event(_event("Delete", physical_id=f"{index.PREFIX}/{ARN}/Enable-35"), None, client)
    assert result["Data"]["Setting"] == "Enable-35"


@pytest.mark.parametrize(
    "physical_id",
    [f"{index.PREFIX}/{ARN}/{index.UNCHANGED}", "AWSCDK::CustomResourceProviderFramework::CREATE_FAILED"],
)
@pytest.mark.usefixtures("stub")  # no call stubbed: any call fails
def test_delete_changes_nothing_kvtier_did_not_change(client: Any, physical_id: str) -> None:
    result = index.on_event(_event("Delete", physical_id=physical_id), None, client)
    assert result == {"PhysicalResourceId": physical_id, "Data": {"Changed": "false"}}


def test_delete_leaves_a_setting_changed_since(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 50}))
    result = index.on_event(_event("Delete", physical_id=f"{index.PREFIX}/{ARN}/Disable"), None, client)
    assert result["Data"]["Changed"] == "false"


def test_delete_of_a_vanished_cluster_succeeds(client: Any, stub: Stubber) -> None:
    stub.add_client_error("describe_cluster", service_error_code="ResourceNotFound", service_message="gone")
    result = index.on_event(_event("Delete", physical_id=f"{index.PREFIX}/{ARN}/Disable"), None, client)
    assert result["Data"]["Changed"] == "false"


# ---- is-complete polling -------------------------------------------------------------------------------------------


def _waiting(kind: str = "Create", setting: str = "Enable-20", requested: int = 1000) -> dict[str, Any]:
    return _event(
        kind,
        physical_id=f"{index.PREFIX}/{ARN}/Disable",
        Data={"Changed": "true", "Setting": setting, "RequestedAt": str(requested)},
    )


def test_is_complete_polls_until_in_service_with_the_setting(client: Any, stub: Stubber) -> None:
    enabled = {"Mode": "Enable", PERCENT: 20}
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))  # first poll: ask for the change
    _expect_update(stub, enabled)
    assert index.is_complete(_waiting(), None, client, now=lambda: 1000.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", enabled))  # right after the request: not settled yet
    _expect_describe(stub, _described("Updating", enabled))
    _expect_describe(stub, _described("InService", enabled))
    start = 1000.0
    assert index.is_complete(_waiting(), None, client, now=lambda: start + 1) == {"IsComplete": False}
    assert index.is_complete(_waiting(), None, client, now=lambda: start + 30) == {"IsComplete": False}
    later = start + index.SETTLE_S
    assert index.is_complete(_waiting(), None, client, now=lambda: later) == {"IsComplete": True}


def test_is_complete_fails_on_a_failed_cluster_with_its_message(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described("Failed"))
    with pytest.raises(RuntimeError, match="Failed after the Tiered Storage update: instance group inference"):
        index.is_complete(_waiting(), None, client, now=lambda: 5000.0)


def test_is_complete_fails_when_the_setting_did_not_take_within_the_deadline(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))
    with pytest.raises(RuntimeError, match=r"still InService with Tiered Storage Disable, not Enable-20"):
        index.is_complete(_waiting(), None, client, now=lambda: 1000.0 + index.DEADLINE_S)


@pytest.mark.usefixtures("stub")
def test_is_complete_needs_no_call_when_nothing_changed(client: Any) -> None:
    event = _event("Create", physical_id=f"{index.PREFIX}/{ARN}/{index.UNCHANGED}", Data={"Changed": "false"})
    assert index.is_complete(event, None, client) == {"IsComplete": True}


def test_is_complete_after_a_restore_on_delete(client: Any, stub: Stubber) -> None:
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))
    assert index.is_complete(_waiting("Delete", "Disable"), None, client, now=lambda: 5000.0) == {"IsComplete": True}


def test_is_complete_on_delete_of_a_vanished_cluster(client: Any, stub: Stubber) -> None:
    stub.add_client_error("describe_cluster", service_error_code="ResourceNotFound", service_message="gone")
    assert index.is_complete(_waiting("Delete", "Disable"), None, client, now=lambda: 5000.0) == {"IsComplete": True}


# ---- the recorded setting ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    [{"Mode": "Disable"}, {"Mode": "Enable"}, {"Mode": "Enable", PERCENT: 20}, {"Mode": "Enable", PERCENT: 100}],
)
def test_recorded_settings_round_trip(setting: dict[str, Any]) -> None:
    text = index.encode(setting)
    assert index.decode(text) == setting
    assert index.parse_physical_id(index.make_physical_id(ARN, text)) == (ARN, text)


@pytest.mark.parametrize("text", ["Sometimes", "Enable-x", ""])
def test_unreadable_recorded_settings_fail_loudly(text: str) -> None:
    with pytest.raises(RuntimeError):
        index.decode(text)


def test_percentage_is_matched_only_when_enabled() -> None:
    assert index.matches({"Mode": "Disable", PERCENT: 20}, {"Mode": "Disable"})
    assert not index.matches({"Mode": "Enable", PERCENT: 30}, {"Mode": "Enable", PERCENT: 20})
    assert index.matches({"Mode": "Enable", PERCENT: 30}, {"Mode": "Enable"})


# ---- issue 26: a rollback while HyperPod is still busy (reviews-2026-12-b AWS finding 2, replayed) -----------------


def test_rollback_update_waits_until_in_service_then_restores(client: Any, stub: Stubber) -> None:
    """The forward update (20 -> 30) gave up while HyperPod was still Updating; CloudFormation's rollback sends an
    Update back to 20. Before the fix on_event called UpdateCluster at once, HyperPod answered "Cluster is in
    Updating state" and the stack ended in UPDATE_ROLLBACK_FAILED. Now on_event calls nothing; is_complete waits while Updating and SystemUpdating,
    treats a "cluster is busy" refusal as wait, then calls UpdateCluster and is done at 20."""
    recorded = f"{index.PREFIX}/{ARN}/Disable"
    at_30, at_20 = {"Mode": "Enable", PERCENT: 30}, {"Mode": "Enable", PERCENT: 20}
    _expect_describe(stub, _described("Updating", at_30, recovery="Automatic"))
    result = index.on_event(_event("Update", "20", recorded), None, client)  # any UpdateCluster here fails the stub
    event = {**_event("Update", "20", recorded), "Data": {**result["Data"], "RequestedAt": "1000"}}
    _expect_describe(stub, _described("Updating", at_30, recovery="Automatic"))
    assert index.is_complete(event, None, client, now=lambda: 1030.0) == {"IsComplete": False}
    _expect_describe(stub, _described("SystemUpdating", at_30, recovery="Automatic"))
    assert index.is_complete(event, None, client, now=lambda: 1060.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", at_30, recovery="Automatic"))
    stub.add_client_error(
        "update_cluster",
        service_error_code="ValidationException",
        service_message="Cluster ml-cluster is in SystemUpdating state",
        http_status_code=400,
    )
    assert index.is_complete(event, None, client, now=lambda: 1090.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", at_30, recovery="Automatic"))
    _expect_update(stub, at_20, recovery="Automatic")
    assert index.is_complete(event, None, client, now=lambda: 1120.0) == {"IsComplete": False}
    _expect_describe(stub, _described("Updating", at_20, recovery="Automatic"))
    assert index.is_complete(event, None, client, now=lambda: 1150.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", at_20, recovery="Automatic"))
    assert index.is_complete(event, None, client, now=lambda: 1180.0) == {"IsComplete": True}
