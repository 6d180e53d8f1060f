"""The Tiered Storage custom-resource handler, on real SageMaker and SSM clients behind botocore's Stubber (which
validates every request and response against the service model). SSM holds the poll state: which request kvtier's
own UpdateCluster was sent for, and when (index.PollState)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from kvtier.lambdas.tiered_storage import index

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"
PERCENT = "InstanceMemoryAllocationPercentage"
STATE = "/kvtier/byoc/tiered-storage-poll-state"
FORWARD, ROLLBACK = "request-forward", "request-rollback"  # CloudFormation RequestIds


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


@pytest.fixture(autouse=True)
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    """The poll state's SSM client, behind its own Stubber (raising=False: the handler before issue 37 had none, and
    the replays below must fail on it for what it does, not for a missing attribute)."""
    client = boto3.client("ssm", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing")
    monkeypatch.setenv("POLL_STATE_PARAMETER", STATE)  # what the construct sets (index.STATE_PARAMETER_ENV)
    monkeypatch.setattr(index, "_ssm_client", lambda: client, raising=False)
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def _state(ssm: Stubber, request: str | None = None, at: int = 0) -> None:
    """One poll's read of the state: kvtier's UpdateCluster was sent for `request` at `at` (None: never sent)."""
    value = json.dumps({"RequestId": request, "UpdatedAt": at}) if request else "{}"
    parameter = {"Name": STATE, "Type": "String", "Value": value, "Version": 1}
    ssm.add_response("get_parameter", {"Parameter": parameter}, {"Name": STATE})


def _record(ssm: Stubber, request: str, at: int) -> None:
    """kvtier records its accepted UpdateCluster: this request, at this time."""
    value = json.dumps({"RequestId": request, "UpdatedAt": at})
    ssm.add_response("put_parameter", {"Version": 2}, {"Name": STATE, "Value": value, "Overwrite": True})


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


def _event(
    kind: str, percent: str = "20", physical_id: str | None = None, request: str = FORWARD, **extra: Any
) -> dict[str, Any]:
    # CloudFormation passes custom-resource properties as strings.
    event: dict[str, Any] = {
        "RequestType": kind,
        "RequestId": request,
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


def test_rejection_fails_with_awss_message(client: Any, stub: Stubber, ssm: Stubber) -> None:
    _expect_describe(stub, _described())
    _state(ssm)
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


def test_delete_restores_what_kvtier_replaced(client: Any, stub: Stubber, ssm: Stubber) -> None:
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}, recovery="Automatic"))
    result = index.on_event(_event("Delete", physical_id=f"{index.PREFIX}/{ARN}/Disable"), None, client)
    assert result["Data"]["Changed"] == "true"
    assert result["Data"]["Setting"] == "Disable"
    # is_complete makes the call, with the cluster's NodeRecovery passed back
    _expect_describe(stub, _described(tiered={"Mode": "Enable", PERCENT: 20}, recovery="Automatic"))
    _state(ssm)
    _expect_update(stub, {"Mode": "Disable"}, recovery="Automatic")
    _record(ssm, FORWARD, 5000)
    event = {**_event("Delete", physical_id=result["PhysicalResourceId"]), "Data": result["Data"]}
    assert index.is_complete(event, None, client, now=lambda: 5000.0) == {"IsComplete": False}


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


def _waiting(
    kind: str = "Create", setting: str = "Enable-20", requested: int = 1000, request: str = FORWARD
) -> dict[str, Any]:
    return _event(
        kind,
        physical_id=f"{index.PREFIX}/{ARN}/Disable",
        request=request,
        Data={"Changed": "true", "Setting": setting, "RequestedAt": str(requested)},
    )


def test_is_complete_polls_until_in_service_with_the_setting(client: Any, stub: Stubber, ssm: Stubber) -> None:
    enabled = {"Mode": "Enable", PERCENT: 20}
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))  # first poll: ask for the change
    _state(ssm)
    _expect_update(stub, enabled)
    _record(ssm, FORWARD, 1000)
    assert index.is_complete(_waiting(), None, client, now=lambda: 1000.0) == {"IsComplete": False}
    for status in ("InService", "Updating", "InService"):  # right after the call: not settled yet
        _expect_describe(stub, _described(status, enabled))
        _state(ssm, FORWARD, 1000)
    start = 1000.0
    assert index.is_complete(_waiting(), None, client, now=lambda: start + 1) == {"IsComplete": False}
    assert index.is_complete(_waiting(), None, client, now=lambda: start + 30) == {"IsComplete": False}
    later = start + index.SETTLE_S
    assert index.is_complete(_waiting(), None, client, now=lambda: later) == {"IsComplete": True}


def test_is_complete_fails_on_a_failed_cluster_with_its_message(client: Any, stub: Stubber, ssm: Stubber) -> None:
    _expect_describe(stub, _described("Failed"))
    _state(ssm)
    with pytest.raises(RuntimeError, match="Failed after the Tiered Storage update: instance group inference"):
        index.is_complete(_waiting(), None, client, now=lambda: 5000.0)


def test_is_complete_fails_when_the_setting_did_not_take_within_the_deadline(
    client: Any, stub: Stubber, ssm: Stubber
) -> None:
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))
    _state(ssm)
    with pytest.raises(RuntimeError, match=r"still InService with Tiered Storage Disable, not Enable-20"):
        index.is_complete(_waiting(), None, client, now=lambda: 1000.0 + index.DEADLINE_S)


@pytest.mark.usefixtures("stub")
def test_is_complete_needs_no_call_when_nothing_changed(client: Any) -> None:
    event = _event("Create", physical_id=f"{index.PREFIX}/{ARN}/{index.UNCHANGED}", Data={"Changed": "false"})
    assert index.is_complete(event, None, client) == {"IsComplete": True}


def test_is_complete_after_a_restore_on_delete(client: Any, stub: Stubber, ssm: Stubber) -> None:
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))
    _state(ssm, FORWARD, 4000)
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


def test_rollback_update_waits_until_in_service_then_restores(client: Any, stub: Stubber, ssm: Stubber) -> None:
    """The forward update (20 -> 30) gave up while HyperPod was still Updating; CloudFormation's rollback sends an
    Update back to 20. Before the fix on_event called UpdateCluster at once, HyperPod answered "Cluster is in
    Updating state" and the stack ended in UPDATE_ROLLBACK_FAILED. Now on_event calls nothing; is_complete waits while Updating and SystemUpdating,
    treats a "cluster is busy" refusal as wait, then calls UpdateCluster and is done at 20."""
    recorded = f"{index.PREFIX}/{ARN}/Disable"
    at_30, at_20 = {"Mode": "Enable", PERCENT: 30}, {"Mode": "Enable", PERCENT: 20}
    _expect_describe(stub, _described("Updating", at_30, recovery="Automatic"))
    result = index.on_event(_event("Update", "20", recorded, ROLLBACK), None, client)  # no UpdateCluster here
    event = {**_event("Update", "20", recorded, ROLLBACK), "Data": {**result["Data"], "RequestedAt": "1000"}}
    _expect_describe(stub, _described("Updating", at_30, recovery="Automatic"))
    _state(ssm, FORWARD, 900)
    assert index.is_complete(event, None, client, now=lambda: 1030.0) == {"IsComplete": False}
    _expect_describe(stub, _described("SystemUpdating", at_30, recovery="Automatic"))
    _state(ssm, FORWARD, 900)
    assert index.is_complete(event, None, client, now=lambda: 1060.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", at_30, recovery="Automatic"))
    _state(ssm, FORWARD, 900)
    stub.add_client_error(
        "update_cluster",
        service_error_code="ValidationException",
        service_message="Cluster ml-cluster is in SystemUpdating state",
        http_status_code=400,
    )
    assert index.is_complete(event, None, client, now=lambda: 1090.0) == {"IsComplete": False}  # busy: not recorded
    _expect_describe(stub, _described("InService", at_30, recovery="Automatic"))
    _state(ssm, FORWARD, 900)
    _expect_update(stub, at_20, recovery="Automatic")
    _record(ssm, ROLLBACK, 1120)
    assert index.is_complete(event, None, client, now=lambda: 1120.0) == {"IsComplete": False}
    _expect_describe(stub, _described("Updating", at_20, recovery="Automatic"))
    _state(ssm, ROLLBACK, 1120)
    assert index.is_complete(event, None, client, now=lambda: 1150.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", at_20, recovery="Automatic"))
    _state(ssm, ROLLBACK, 1120)
    assert index.is_complete(event, None, client, now=lambda: 1180.0) == {"IsComplete": True}


# ---- issue 37: HyperPod's own rollback, and the settle window (reviews-2026-12-c AWS S2-5 and S3-6, replayed) ------
# The handler before issue 37 fails the rollback replays (it raised on any RollingBack) and the settle replay (it
# counted the window from the request): run this file against `git show 3792c29~1:kvtier/lambdas/...`.

AT_20, AT_30 = {"Mode": "Enable", PERCENT: 20}, {"Mode": "Enable", PERCENT: 30}
KEPT = f"{index.PREFIX}/{ARN}/Enable-20"  # the physical id: the owner had 20 before kvtier's first update


def test_forward_update_fails_when_hyperpod_rolls_back_kvtiers_own_call(
    client: Any, stub: Stubber, ssm: Stubber
) -> None:
    """20 -> 30: kvtier's UpdateCluster is accepted and recorded, HyperPod turns Updating, then RollingBack: that is
    our update failing, and the forward request fails with HyperPod's message (CloudFormation then rolls back)."""
    _expect_describe(stub, _described("InService", AT_20))
    result = index.on_event(_event("Update", "30", KEPT, FORWARD), None, client)
    event = {**_event("Update", "30", KEPT, FORWARD), "Data": {**result["Data"], "RequestedAt": "1000"}}
    _expect_describe(stub, _described("InService", AT_20))
    _state(ssm, "an-earlier-request", 100)
    _expect_update(stub, AT_30)
    _record(ssm, FORWARD, 1010)
    assert index.is_complete(event, None, client, now=lambda: 1010.0) == {"IsComplete": False}
    _expect_describe(stub, _described("Updating", AT_30))
    _state(ssm, FORWARD, 1010)
    assert index.is_complete(event, None, client, now=lambda: 1040.0) == {"IsComplete": False}
    rolling_back = {**_described("RollingBack", AT_30), "FailureMessage": "instance group inference: update failed"}
    _expect_describe(stub, rolling_back)
    _state(ssm, FORWARD, 1010)
    with pytest.raises(RuntimeError, match="is RollingBack after the Tiered Storage update: instance group inference"):
        index.is_complete(event, None, client, now=lambda: 1070.0)


def test_rollback_arriving_during_rolling_back_waits_for_hyperpod(client: Any, stub: Stubber, ssm: Stubber) -> None:
    """The review's replay: the forward update failed, CloudFormation's rollback Update (back to 20) arrives while
    HyperPod is still RollingBack and reports the forward percentage. kvtier has sent nothing for this request, so
    RollingBack is HyperPod undoing the forward call: wait; once HyperPod is back InService at 20 the rollback is
    done, with no UpdateCluster at all. Before the fix the first poll raised: UPDATE_ROLLBACK_FAILED."""
    _expect_describe(stub, _described("RollingBack", AT_30))
    result = index.on_event(_event("Update", "20", KEPT, ROLLBACK), None, client)
    assert result["Data"]["Changed"] == "true"  # DescribeCluster still shows the forward target
    event = {**_event("Update", "20", KEPT, ROLLBACK), "Data": {**result["Data"], "RequestedAt": "2000"}}
    for poll in (2000.0, 2030.0, 2060.0):
        _expect_describe(stub, _described("RollingBack", AT_30))
        _state(ssm, FORWARD, 1010)  # the forward request's call, not this one's
        assert index.is_complete(event, None, client, now=functools.partial(float, poll)) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", AT_20))
    _state(ssm, FORWARD, 1010)
    assert index.is_complete(event, None, client, now=lambda: 2090.0) == {"IsComplete": True}  # no UpdateCluster


def test_rollback_arriving_after_rolling_back_restores_and_settles_from_its_call(
    client: Any, stub: Stubber, ssm: Stubber
) -> None:
    """The rollback Update arrives after HyperPod's RollingBack ended, with the cluster InService still at 30: kvtier
    calls UpdateCluster (recorded for this request), waits SETTLE_S from that call, and is done at 20. A RollingBack
    after this call would be our restore failing, and fails."""
    _expect_describe(stub, _described("InService", AT_30))
    result = index.on_event(_event("Update", "20", KEPT, ROLLBACK), None, client)
    event = {**_event("Update", "20", KEPT, ROLLBACK), "Data": {**result["Data"], "RequestedAt": "3000"}}
    _expect_describe(stub, _described("InService", AT_30))
    _state(ssm, FORWARD, 1010)
    _expect_update(stub, AT_20)
    _record(ssm, ROLLBACK, 3030)
    assert index.is_complete(event, None, client, now=lambda: 3030.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", AT_20))  # still InService right after the call: not settled
    _state(ssm, ROLLBACK, 3030)
    assert index.is_complete(event, None, client, now=lambda: 3060.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", AT_20))
    _state(ssm, ROLLBACK, 3030)
    assert index.is_complete(event, None, client, now=lambda: 3030.0 + index.SETTLE_S) == {"IsComplete": True}
    _expect_describe(stub, _described("RollingBack", AT_20))
    _state(ssm, ROLLBACK, 3030)
    with pytest.raises(RuntimeError, match="RollingBack after the Tiered Storage update"):
        index.is_complete(event, None, client, now=lambda: 3120.0)


def test_the_settle_window_starts_at_kvtiers_call_not_at_the_request(client: Any, stub: Stubber, ssm: Stubber) -> None:
    """S3-6: the cluster was busy for 200 s after the request; kvtier's UpdateCluster goes out at 1200. A poll 30 s
    later that reads InService with the target is HyperPod not yet Updating, not done. Before the fix the window ran
    from the request (1000), so that poll completed at once."""
    event = _waiting(requested=1000)
    _expect_describe(stub, _described("Updating", {"Mode": "Disable"}))
    _state(ssm)
    assert index.is_complete(event, None, client, now=lambda: 1100.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", {"Mode": "Disable"}))
    _state(ssm)
    _expect_update(stub, AT_20)
    _record(ssm, FORWARD, 1200)
    assert index.is_complete(event, None, client, now=lambda: 1200.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", AT_20))
    _state(ssm, FORWARD, 1200)
    assert index.is_complete(event, None, client, now=lambda: 1230.0) == {"IsComplete": False}
    _expect_describe(stub, _described("Updating", AT_20))
    _state(ssm, FORWARD, 1200)
    assert index.is_complete(event, None, client, now=lambda: 1245.0) == {"IsComplete": False}
    _expect_describe(stub, _described("InService", AT_20))
    _state(ssm, FORWARD, 1200)
    assert index.is_complete(event, None, client, now=lambda: 1260.0) == {"IsComplete": True}


def test_a_failed_cluster_fails_even_before_kvtiers_call(client: Any, stub: Stubber, ssm: Stubber) -> None:
    """Only RollingBack waits for kvtier's call; Failed and Deleting fail at once, as before."""
    for status in ("Failed", "Deleting"):
        _expect_describe(stub, _described(status))
        _state(ssm)
        with pytest.raises(RuntimeError, match=f"is {status} after the Tiered Storage update"):
            index.is_complete(_waiting(), None, client, now=lambda: 1030.0)


def test_the_poll_state_is_read_only_for_its_own_request() -> None:
    """A record of another request (the forward one, seen by the rollback) or an unreadable value is 'not sent'."""
    ssm = boto3.client("ssm", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing")
    state = index.PollState(ssm, STATE)
    with Stubber(ssm) as stubber:
        for value in (json.dumps({"RequestId": FORWARD, "UpdatedAt": 5}), "{}", "not json"):
            stubber.add_response("get_parameter", {"Parameter": {"Name": STATE, "Value": value}}, {"Name": STATE})
        assert state.sent_at(FORWARD) == 5.0
        assert state.sent_at(ROLLBACK) is None
        assert state.sent_at(ROLLBACK) is None
        stubber.add_client_error("get_parameter", service_error_code="AccessDeniedException", service_message="no")
        with pytest.raises(RuntimeError, match=f"GetParameter {STATE}: AccessDeniedException: no"):
            state.sent_at(FORWARD)
