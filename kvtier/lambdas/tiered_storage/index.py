"""Custom-resource handler: HyperPod Tiered Storage on a cluster kvtier did not create.

CloudFormation does not manage the owner's cluster, so the setting goes through the SageMaker API (reference
aws-hyperpod.md 1-2). It runs under the CDK custom-resource Provider framework: `on_event` records what is wanted and
`is_complete` does it, poll by poll, because an update can outlast one Lambda run and the cluster may be busy.

- on_event (Create/Update/Delete) never calls UpdateCluster. It reads the cluster and decides the target: the setting
  asked for, or on Delete the one kvtier replaced. CloudFormation does not say whether an Update is a rollback, and
  a rollback's Update often comes while HyperPod is still Updating from the forward one: calling UpdateCluster then
  is refused and the stack ends in UPDATE_ROLLBACK_FAILED.
- is_complete, on each poll: waits while the cluster is not InService (Creating, Updating, SystemUpdating); calls
  UpdateCluster when it is InService without the target (a "cluster is busy" ValidationException means "wait");
  is done when it is InService with the target, and, if it called UpdateCluster, SETTLE_S after that call.
- `RollingBack` before kvtier's own UpdateCluster of this request means "wait": HyperPod is undoing an earlier update
  (typically the forward update this rollback's request undoes), not ours. Only after kvtier's call does it mean our
  update failed. The Provider framework gives is_complete the same event on every poll and refuses `Data` from a poll
  that is not complete (docs/references.md "Issue 37"), so which request kvtier's call was sent for, and when, is
  recorded in an SSM parameter of this resource (`POLL_STATE_PARAMETER`), keyed by CloudFormation's RequestId. UpdateCluster carries `TieredStorageConfig` and the cluster's
  current `NodeRecovery` passed back unchanged (an update with only `TieredStorageConfig` is rejected with a
  ValidationException; reference aws-hyperpod.md 2). No instance groups are passed, so no iam:PassRole is needed.
- The setting found before kvtier changed it is kept in the physical id (CloudFormation sends nothing else back on
  Delete). Delete restores it only if kvtier changed it and the cluster still has the setting kvtier asked for.
- Delete restores nothing while the cluster is not InService (the restore could not start within the hour and the
  rollback would fail); it logs the command that restores the setting by hand.
- Every other API error fails the deployment with AWS's own code and message; a cluster that is not InService with
  the target within the waiter's hour fails with HyperPod's status and failure message, before the framework's
  generic timeout.

Runs in AWS Lambda; standard library and boto3 only.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import boto3
import botocore
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_sagemaker.literals import ClusterNodeRecoveryType
    from mypy_boto3_sagemaker.type_defs import ClusterTieredStorageConfigTypeDef, DescribeClusterResponseTypeDef

PREFIX = "kvtier-tiered-storage"
UNCHANGED = "unchanged"  # physical-id state: kvtier found the setting as asked and changed nothing
# Right after UpdateCluster the cluster may still read InService before it turns Updating: InService counts as done
# only this many seconds after kvtier's call (how long the transition takes is not documented; UNVERIFIED).
SETTLE_S = 60
FAILED = ("Failed", "RollingBack", "Deleting")
ROLLING_BACK = "RollingBack"  # a failure only once kvtier's own UpdateCluster of this request was sent
STATE_PARAMETER_ENV = "POLL_STATE_PARAMETER"  # the SSM parameter that records kvtier's UpdateCluster (PollState)
# The Provider framework's waiter gives up after one hour in all (kvtier/constructs/tiered_storage.py TOTAL_TIMEOUT)
# with a generic message; is_complete fails first, with HyperPod's status and message. RequestedAt is stamped after
# two cold starts and each poll is 30 s plus the Lambda's run, so the margin is five minutes, not two polls.
DEADLINE_S = 3600 - 300
PERCENT: Final = "InstanceMemoryAllocationPercentage"
# HyperPod's refusal while a cluster is busy reads "Cluster <name> is in Updating state" (replayed in tests/lambdas).
BUSY: Final = re.compile(r"\bis in \w+ state\b|\bstate\b.*\b(Updating|SystemUpdating|Creating)\b", re.IGNORECASE)

Setting = dict[str, Any]  # {"Mode": "Enable" | "Disable", "InstanceMemoryAllocationPercentage"?: int}


def on_event(event: dict[str, Any], _context: Any, client: SageMakerClient | None = None) -> dict[str, Any]:
    sagemaker = client or _client()
    _require_tiered_storage_support(sagemaker)
    if event["RequestType"] == "Delete":
        return _delete(event, sagemaker)
    props = event["ResourceProperties"]
    cluster = props["ClusterName"]
    want = desired(props)
    described = describe(sagemaker, cluster)
    current = current_setting(described)
    recorded = parse_physical_id(event.get("PhysicalResourceId", "")) if event["RequestType"] == "Update" else None
    same_cluster = recorded is not None and recorded[0] == cluster
    if matches(current, want):
        _log("already as asked", cluster=cluster, setting=current)
        physical_id = event["PhysicalResourceId"] if same_cluster else make_physical_id(cluster, UNCHANGED)
        return {"PhysicalResourceId": physical_id, "Data": {"Changed": "false", "Setting": encode(current)}}
    _require_node_recovery(cluster, described)
    # The first setting kvtier replaced is the one to restore, however many updates follow.
    previous = recorded[1] if recorded is not None and same_cluster and recorded[1] != UNCHANGED else encode(current)
    _log("Tiered Storage to change; is_complete updates the cluster once it is InService", cluster=cluster, want=want)
    return {
        "PhysicalResourceId": make_physical_id(cluster, previous),
        "Data": {"Changed": "true", "Setting": encode(want), "RequestedAt": str(int(time.time()))},
    }


def _delete(event: dict[str, Any], sagemaker: SageMakerClient) -> dict[str, Any]:
    physical_id = event["PhysicalResourceId"]
    unchanged = {"PhysicalResourceId": physical_id, "Data": {"Changed": "false"}}
    recorded = parse_physical_id(physical_id)
    if recorded is None or recorded[1] == UNCHANGED:
        return unchanged  # kvtier changed nothing (or the create failed before it did)
    cluster, previous = recorded
    try:
        described = describe(sagemaker, cluster)
    except ClusterNotFoundError:
        _log("cluster is gone; nothing to restore", cluster=cluster)
        return unchanged
    current, target = current_setting(described), decode(previous)
    if matches(current, target):
        return unchanged
    status = described["ClusterStatus"]
    if status != "InService":
        # UpdateCluster would fail with a ValidationException while the cluster is Updating (e.g. after the waiter
        # gave up), and the stack would end in ROLLBACK_FAILED: leave the setting and say how to restore it.
        _log(
            "cluster is not InService; not restoring Tiered Storage",
            cluster=cluster,
            status=status,
            restore=f"aws sagemaker update-cluster --cluster-name {cluster} --tiered-storage-config "
            f"{json.dumps(_config(target))} --node-recovery {described.get('NodeRecovery', 'Automatic')}",
        )
        return unchanged
    asked = desired(event.get("ResourceProperties", {}))
    if not matches(current, asked):
        _log("setting changed since kvtier set it; leaving it", cluster=cluster, setting=current)
        return unchanged
    return {
        "PhysicalResourceId": physical_id,
        "Data": {"Changed": "true", "Setting": previous, "RequestedAt": str(int(time.time()))},
    }


def is_complete(
    event: dict[str, Any],
    _context: Any,
    client: SageMakerClient | None = None,
    now: Callable[[], float] = time.time,
) -> dict[str, Any]:
    data = event.get("Data") or {}
    if data.get("Changed") != "true":
        return {"IsComplete": True}
    sagemaker = client or _client()
    cluster = parse_physical_id(event["PhysicalResourceId"])
    if cluster is None:
        raise RuntimeError(f"unexpected physical id {event['PhysicalResourceId']!r}")
    target = decode(data["Setting"])
    try:
        described = describe(sagemaker, cluster[0])
    except ClusterNotFoundError:
        if event["RequestType"] == "Delete":
            return {"IsComplete": True}
        raise
    status = described["ClusterStatus"]
    state = _poll_state()
    sent_at = state.sent_at(event["RequestId"])
    if status in FAILED and not (status == ROLLING_BACK and sent_at is None):
        message = described.get("FailureMessage") or "no failure message"
        raise RuntimeError(f"HyperPod cluster {cluster[0]} is {status} after the Tiered Storage update: {message}")
    elapsed = now() - int(data.get("RequestedAt", "0"))
    current = current_setting(described)
    done = status == "InService" and matches(current, target)
    if not done and elapsed >= DEADLINE_S:
        # Fail before the Provider framework's waiter times out with its generic "Operation timed out": say what
        # HyperPod reports instead.
        message = described.get("FailureMessage") or "no failure message"
        raise RuntimeError(
            f"HyperPod cluster {cluster[0]} is still {status} with Tiered Storage {encode(current)}, not "
            f"{encode(target)}, {int(elapsed // 60)} minutes after the request (HyperPod says: {message}); check "
            f"`aws sagemaker describe-cluster --cluster-name {cluster[0]}`"
        )
    if status == "InService" and not done:
        if update(sagemaker, cluster[0], target, described):
            state.record(event["RequestId"], now())
        return {"IsComplete": False}
    # Right after UpdateCluster the cluster may still read InService before it turns Updating: the settle window
    # starts at kvtier's call, not at the request (the cluster may have been busy for long before it).
    if not done or (sent_at is not None and now() - sent_at < SETTLE_S):
        _log("waiting", cluster=cluster[0], status=status, update_sent=sent_at is not None)
        return {"IsComplete": False}
    return {"IsComplete": True}


# ---- the setting ---------------------------------------------------------------------------------------------------


def desired(props: dict[str, Any]) -> Setting:
    """The setting asked for. CloudFormation passes custom-resource properties as strings."""
    mode = props.get("Mode", "Enable")
    if mode not in ("Enable", "Disable"):
        raise RuntimeError(f"Mode must be Enable or Disable, not {mode!r}")
    setting: Setting = {"Mode": mode}
    percent = props.get(PERCENT)
    if mode == "Enable" and percent not in (None, ""):
        setting[PERCENT] = int(percent)
    return setting


def current_setting(described: DescribeClusterResponseTypeDef) -> Setting:
    """The cluster's setting; a cluster that never had one reads as Disable."""
    config = described.get("TieredStorageConfig")
    if not config:
        return {"Mode": "Disable"}
    setting: Setting = {"Mode": config["Mode"]}
    if config["Mode"] == "Enable" and PERCENT in config:
        setting[PERCENT] = config[PERCENT]
    return setting


def matches(current: Setting, wanted: Setting) -> bool:
    """Same mode and, when enabled and a percentage is asked for, the same percentage."""
    if current["Mode"] != wanted["Mode"]:
        return False
    return wanted["Mode"] == "Disable" or PERCENT not in wanted or current.get(PERCENT) == wanted[PERCENT]


def encode(setting: Setting) -> str:
    """`Disable`, `Enable` or `Enable-<percent>`: short enough for a physical id."""
    if setting["Mode"] == "Enable" and PERCENT in setting:
        return f"Enable-{setting[PERCENT]}"
    return str(setting["Mode"])


def decode(text: str) -> Setting:
    mode, _, percent = text.partition("-")
    if mode not in ("Enable", "Disable") or (percent and not percent.isdigit()):
        raise RuntimeError(f"cannot read the recorded Tiered Storage setting {text!r}")
    setting: Setting = {"Mode": mode}
    if percent:
        setting[PERCENT] = int(percent)
    return setting


def make_physical_id(cluster: str, state: str) -> str:
    return f"{PREFIX}/{cluster}/{state}"


def parse_physical_id(physical_id: str) -> tuple[str, str] | None:
    """(cluster, state) of an id this handler made; None for anything else (e.g. the framework's failed-create id)."""
    if not physical_id.startswith(PREFIX + "/"):
        return None
    cluster, _, state = physical_id[len(PREFIX) + 1 :].rpartition("/")
    return (cluster, state) if cluster and state else None


# ---- the poll state ------------------------------------------------------------------------------------------------


class PollState:
    """The one request kvtier's UpdateCluster was last accepted for, and when: `{"RequestId": ..., "UpdatedAt": ...}`
    in an SSM parameter of this resource. Keyed by RequestId, so a rollback's request never reads the forward
    request's call as its own."""

    def __init__(self, ssm: Any, name: str) -> None:  # an SSM client
        self.ssm, self.name = ssm, name

    def sent_at(self, request_id: str) -> float | None:
        """When kvtier's UpdateCluster was accepted for `request_id`; None while it was not."""
        try:
            value = self.ssm.get_parameter(Name=self.name)["Parameter"].get("Value", "")
        except ClientError as err:
            raise RuntimeError(f"GetParameter {self.name}: {_aws_message(err)}") from err
        try:
            recorded = json.loads(value)
        except json.JSONDecodeError:
            recorded = None
        if not isinstance(recorded, dict) or recorded.get("RequestId") != request_id:
            return None
        return float(recorded["UpdatedAt"])

    def record(self, request_id: str, at: float) -> None:
        value = json.dumps({"RequestId": request_id, "UpdatedAt": int(at)})
        try:
            self.ssm.put_parameter(Name=self.name, Value=value, Overwrite=True)
        except ClientError as err:
            raise RuntimeError(f"PutParameter {self.name}: {_aws_message(err)}") from err
        _log("UpdateCluster sent", request=request_id, at=int(at))


def _poll_state() -> PollState:
    name = os.environ.get(STATE_PARAMETER_ENV)
    if not name:
        raise RuntimeError(f"{STATE_PARAMETER_ENV} is not set: this handler records its UpdateCluster there")
    return PollState(_ssm_client(), name)


def _ssm_client() -> Any:
    return boto3.client("ssm")


# ---- the API -------------------------------------------------------------------------------------------------------


class ClusterNotFoundError(RuntimeError):
    pass


def describe(sagemaker: SageMakerClient, cluster: str) -> DescribeClusterResponseTypeDef:
    try:
        return sagemaker.describe_cluster(ClusterName=cluster)
    except ClientError as err:
        if _code(err) in ("ResourceNotFound", "ResourceNotFoundException"):
            raise ClusterNotFoundError(f"DescribeCluster {cluster}: {_aws_message(err)}") from err
        raise RuntimeError(f"DescribeCluster {cluster}: {_aws_message(err)}") from err


def update(
    sagemaker: SageMakerClient, cluster: str, setting: Setting, described: DescribeClusterResponseTypeDef
) -> bool:
    """UpdateCluster with the new setting and the current NodeRecovery passed back unchanged. False when HyperPod
    refuses it because the cluster is busy (a ValidationException naming its state): the caller waits."""
    node_recovery = _require_node_recovery(cluster, described)
    config = _config(setting)
    _log("UpdateCluster", cluster=cluster, setting=setting, node_recovery=node_recovery)
    try:
        sagemaker.update_cluster(ClusterName=cluster, TieredStorageConfig=config, NodeRecovery=node_recovery)
    except ClientError as err:
        message = str(err.response.get("Error", {}).get("Message", ""))
        if _code(err) == "ValidationException" and BUSY.search(message):
            _log("cluster is busy; waiting", cluster=cluster, error=_aws_message(err))
            return False
        raise RuntimeError(f"UpdateCluster {cluster} (Tiered Storage {encode(setting)}): {_aws_message(err)}") from err
    return True


def _require_node_recovery(cluster: str, described: DescribeClusterResponseTypeDef) -> ClusterNodeRecoveryType:
    node_recovery = described.get("NodeRecovery")
    if node_recovery is None:
        raise RuntimeError(
            f"HyperPod cluster {cluster} reports no NodeRecovery, which UpdateCluster needs next to TieredStorageConfig; "
            "set it once (aws sagemaker update-cluster --cluster-name <name> --node-recovery Automatic|None) and deploy again"
        )
    return node_recovery


def _config(setting: Setting) -> ClusterTieredStorageConfigTypeDef:
    config: ClusterTieredStorageConfigTypeDef = {"Mode": setting["Mode"]}
    if PERCENT in setting:
        config["InstanceMemoryAllocationPercentage"] = setting[PERCENT]
    return config


def _require_tiered_storage_support(sagemaker: SageMakerClient) -> None:
    """An older botocore in the Lambda runtime would reject the field, or silently drop it from DescribeCluster."""
    shape = sagemaker.meta.service_model.operation_model("UpdateCluster").input_shape
    if shape is None or "TieredStorageConfig" not in shape.members:
        raise RuntimeError(
            f"botocore {botocore.__version__} in this Lambda runtime does not know UpdateCluster TieredStorageConfig; "
            "use a newer Python runtime"
        )


def _client() -> SageMakerClient:
    return boto3.client("sagemaker")


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _aws_message(err: ClientError) -> str:
    error = err.response.get("Error", {})
    return f"{error.get('Code', 'Error')}: {error.get('Message', str(err))}"


def _log(message: str, **fields: Any) -> None:
    print(json.dumps({"message": message, **fields}, default=str))
