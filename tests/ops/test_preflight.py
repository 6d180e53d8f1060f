"""`kvtier preflight` on real boto3 clients behind botocore's Stubber (every request and response is validated against
the service models): each check passing and failing, the CLI's exit codes, and no credentials (exit 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from kvtier.cli import main as cli
from kvtier.config.loader import Config
from kvtier.errors import UnavailableError
from kvtier.naming import inference_role_names
from kvtier.ops import preflight
from kvtier.ops.checks import Check
from kvtier.ops.preflight import (
    BOOTSTRAP_STACK,
    QUOTA_ACROSS_CLUSTERS,
    QUOTA_EBS_GB,
    QUOTA_PER_CLUSTER,
    Clients,
    addons_to_check,
    collect,
)
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

SERVICES = {
    "cloudformation": "cloudformation",
    "sts": "sts",
    "service_quotas": "service-quotas",
    "ec2": "ec2",
    "eks": "eks",
    "sagemaker": "sagemaker",
    "iam": "iam",
    "s3": "s3",
    "s3control": "s3control",
}
ACCOUNT = "111122223333"
PROD_ZONES = [("us-east-1a", "use1-az4"), ("us-east-1b", "use1-az6"), ("us-east-1c", "use1-az1")]


@dataclass
class Stubs:
    clients: Clients
    stubs: dict[str, Stubber]

    def __getitem__(self, name: str) -> Stubber:
        return self.stubs[name]


def _client(service: str, region: str) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


@pytest.fixture(scope="module")
def byoc() -> Config:
    return load_checked(CONFIG_DIR, "byoc")


def _stubs(region: str) -> Iterator[Stubs]:
    made = {attr: _client(service, region) for attr, service in SERVICES.items()}
    stubs = {attr: Stubber(client) for attr, client in made.items()}
    for stub in stubs.values():
        stub.activate()
    try:
        yield Stubs(Clients(**made), stubs)
        for stub in stubs.values():
            stub.assert_no_pending_responses()
    finally:
        for stub in stubs.values():
            stub.deactivate()


@pytest.fixture()
def east() -> Iterator[Stubs]:
    yield from _stubs("us-east-1")


@pytest.fixture()
def west() -> Iterator[Stubs]:
    yield from _stubs("us-west-2")


# ---- responses -----------------------------------------------------------------------------------------------------


def _bootstrap(s: Stubs, *, status: str = "UPDATE_COMPLETE", version: str = "28", absent: bool = False) -> None:
    if absent:
        s["cloudformation"].add_client_error(
            "describe_stacks",
            service_error_code="ValidationError",
            service_message=f"Stack with id {BOOTSTRAP_STACK} does not exist",
            expected_params={"StackName": BOOTSTRAP_STACK},
        )
        return
    stack = {
        "StackName": BOOTSTRAP_STACK,
        "CreationTime": "2026-01-01T00:00:00Z",
        "StackStatus": status,
        "Outputs": [{"OutputKey": "BootstrapVersion", "OutputValue": version}],
    }
    s["cloudformation"].add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": BOOTSTRAP_STACK})


def _caller(s: Stubs, account: str = ACCOUNT) -> None:
    s["sts"].add_response(
        "get_caller_identity", {"Account": account, "Arn": f"arn:aws:iam::{account}:user/x", "UserId": "AIDX"}, {}
    )


def _quota(name: str, value: float, code: str = "L-00000000") -> dict[str, Any]:
    return {"ServiceCode": "sagemaker", "QuotaName": name, "QuotaCode": code, "Value": value}


def _quotas(s: Stubs, applied: list[dict[str, Any]], defaults: list[dict[str, Any]] | None = None) -> None:
    s["service_quotas"].add_response(
        "list_aws_default_service_quotas", {"Quotas": defaults or []}, {"ServiceCode": "sagemaker"}
    )
    s["service_quotas"].add_response("list_service_quotas", {"Quotas": applied}, {"ServiceCode": "sagemaker"})


def _prod_quotas(**changes: float) -> list[dict[str, Any]]:
    # prod: 3 x ml.m5.2xlarge and 8 x ml.g6e.4xlarge (config/environments/prod.yaml), 500 GB EBS at most.
    values = {
        "ml.m5.2xlarge for cluster usage": 3.0,
        "ml.g6e.4xlarge for cluster usage": 8.0,
        QUOTA_PER_CLUSTER: 20.0,
        QUOTA_ACROSS_CLUSTERS: 30.0,
        QUOTA_EBS_GB: 1024.0,
        **{k.replace("_", " "): v for k, v in changes.items()},
    }
    return [_quota(name, value) for name, value in values.items()]


def _zones(s: Stubs, zones: list[tuple[str, str]], state: str = "available") -> None:
    region = "us-east-1" if zones[0][0].startswith("us-east-1") else "us-west-2"
    s["ec2"].add_response(
        "describe_availability_zones",
        {
            "AvailabilityZones": [
                {"ZoneName": n, "ZoneId": i, "State": state, "RegionName": region, "ZoneType": "availability-zone"}
                for n, i in zones
            ]
        },
        {"AllAvailabilityZones": False},
    )


def _addons(s: Stubs, config: Config, *, offered: dict[str, list[str]] | None = None) -> None:
    for spec in addons_to_check(config.env):
        versions = (offered or {}).get(spec.name, [spec.version, "v9.9.9-eksbuild.1"])
        addons = (
            [{"addonName": spec.name, "addonVersions": [{"addonVersion": v} for v in versions]}] if versions else []
        )
        s["eks"].add_response(
            "describe_addon_versions",
            {"addons": addons},
            {"addonName": spec.name, "kubernetesVersion": config.env.kubernetes_version},
        )


def _offerings(s: Stubs, config: Config, zone_ids: list[str], missing: dict[str, list[str]] | None = None) -> None:
    """DescribeInstanceTypeOfferings by AZ ID for the config's instance types; `missing`: type -> zones without it."""
    types = sorted({g.instance_type.removeprefix("ml.") for g in config.env.hyperpod.instance_groups})
    offerings = [
        {"InstanceType": t, "LocationType": "availability-zone-id", "Location": z}
        for t in types
        for z in zone_ids
        if z not in (missing or {}).get(t, [])
    ]
    s["ec2"].add_response(
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": offerings},
        {"LocationType": "availability-zone-id", "Filters": [{"Name": "instance-type", "Values": types}]},
    )


def _not_found(s: Stubs, client: str, operation: str, code: str, params: dict[str, Any], status: int = 404) -> None:
    s[client].add_client_error(
        operation, service_error_code=code, service_message="not found", http_status_code=status, expected_params=params
    )


def _leftovers(s: Stubs, config: Config, account: str = ACCOUNT, **found: Any) -> None:
    """The leftover reads of a first deploy; `found` overrides: stack=True (deployed), hyperpod=[(name, status)],
    eks=status, roles=[names], bucket="exists"|"foreign"."""
    env = config.env
    cluster_stack = f"kvtier-{env.name}-cluster"
    if found.get("stack"):
        s["cloudformation"].add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": cluster_stack,
                        "CreationTime": "2026-01-01T00:00:00Z",
                        "StackStatus": "UPDATE_COMPLETE",
                    }
                ]
            },
            {"StackName": cluster_stack},
        )
        return
    s["cloudformation"].add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message=f"Stack with id {cluster_stack} does not exist",
        expected_params={"StackName": cluster_stack},
    )
    _caller(s, account)
    name = env.hyperpod_cluster_name
    summaries = [
        {
            "ClusterArn": f"arn:aws:sagemaker:{env.region}:{account}:cluster/abc",
            "ClusterName": n,
            "ClusterStatus": st,
            "CreationTime": "2026-01-01T00:00:00Z",
        }
        for n, st in found.get("hyperpod", [])
    ]
    s["sagemaker"].add_response("list_clusters", {"ClusterSummaries": summaries}, {"NameContains": name})
    if "eks" in found:
        s["eks"].add_response(
            "describe_cluster",
            {"cluster": {"name": env.eks_cluster_name, "status": found["eks"]}},
            {"name": env.eks_cluster_name},
        )
    else:
        _not_found(s, "eks", "describe_cluster", "ResourceNotFoundException", {"name": env.eks_cluster_name})
    for role in sorted(inference_role_names(env.name, env.region).values()):
        if role in found.get("roles", []):
            s["iam"].add_response(
                "get_role",
                {
                    "Role": {
                        "Path": "/",
                        "RoleName": role,
                        "RoleId": "AROAEXAMPLEEXAMPLE1",
                        "CreateDate": "2026-01-01T00:00:00Z",
                        "Arn": f"arn:aws:iam::{account}:role/{role}",
                    }
                },
                {"RoleName": role},
            )
        else:
            _not_found(s, "iam", "get_role", "NoSuchEntity", {"RoleName": role})
    bucket = f"sagemaker-kvtier-{env.name}-{account}-{env.region}"
    params = {"Bucket": bucket, "ExpectedBucketOwner": account}
    if found.get("bucket") == "exists":
        s["s3"].add_response("head_bucket", {}, params)
    elif found.get("bucket") == "foreign":
        _not_found(s, "s3", "head_bucket", "403", params, status=403)
    else:
        _not_found(s, "s3", "head_bucket", "404", params)


def _admin_role(s: Stubs, name: str = "PlatformAdmin", arn: str | None = None) -> None:
    """iam:GetRole of one admin by name; `arn`: what IAM answers (default: the role without a path)."""
    role = {
        "Path": "/",
        "RoleName": name,
        "RoleId": "AROAEXAMPLEEXAMPLE2",
        "CreateDate": "2026-01-01T00:00:00Z",
        "Arn": arn or f"arn:aws:iam::{ACCOUNT}:role/{name}",
    }
    s["iam"].add_response("get_role", {"Role": role}, {"RoleName": name})


def _ready_prod(s: Stubs, prod: Config, **overrides: Any) -> None:
    _bootstrap(s, **overrides.get("bootstrap", {}))
    _caller(s, overrides.get("account", ACCOUNT))
    _quotas(s, overrides.get("quotas", _prod_quotas()))
    zones = overrides.get("zones", PROD_ZONES)
    _zones(s, zones)
    _offerings(s, prod, [i for _, i in zones], overrides.get("missing"))
    _leftovers(s, prod, overrides.get("account", ACCOUNT), **overrides.get("leftovers", {}))
    overrides.get("admins", _admin_role)(s)
    _addons(s, prod, offered=overrides.get("offered"))


def _bad(report: preflight.PreflightReport) -> list[tuple[str, str, str]]:
    return [(c.area, c.name, c.verdict) for c in report.checks if c.verdict != "ok"]


# ---- a ready account, then each check failing ----------------------------------------------------------------------


def test_a_ready_account_passes_every_check(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    report = collect(prod.env, east.clients)
    assert report.ready, _bad(report)
    areas = {c.area for c in report.checks}
    assert areas == {"bootstrap", "account", "quota", "zone", "instance type", "leftovers", "admin", "add-on"}
    assert {c.name for c in report.checks if c.area == "add-on"} == {s.name for s in addons_to_check(prod.env)}
    zone = next(c for c in report.checks if c.area == "zone")
    assert zone.value == "us-east-1a = use1-az4, available"  # the AZ ID a zone name maps to in this account


@pytest.mark.parametrize(
    ("bootstrap", "detail"),
    [
        ({"absent": True}, "run `cdk bootstrap aws://111122223333/us-east-1` first"),
        ({"status": "ROLLBACK_COMPLETE"}, "the bootstrap stack is ROLLBACK_COMPLETE"),
        ({"version": "5"}, "need bootstrap version 6 or later"),
    ],
)
def test_bootstrap_stack_missing_broken_or_old(
    east: Stubs, prod: Config, bootstrap: dict[str, Any], detail: str
) -> None:
    _ready_prod(east, prod, bootstrap=bootstrap)
    report = collect(prod.env, east.clients)
    (bad,) = [c for c in report.checks if c.verdict != "ok"]
    assert bad.area == "bootstrap" and detail in bad.detail
    assert report.exit_code == 1


def test_credentials_of_another_account(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, account="444455556666")
    assert _bad(collect(prod.env, east.clients)) == [("account", "caller", "problem")]


def test_quotas_below_the_config(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, quotas=_prod_quotas(**{"ml.g6e.4xlarge for cluster usage": 0.0}))
    report = collect(prod.env, east.clients)
    (bad,) = [c for c in report.checks if c.verdict != "ok"]
    assert (bad.area, bad.name, bad.verdict) == ("quota", "ml.g6e.4xlarge for cluster usage", "problem")
    assert "request an increase to at least 8" in bad.detail


def test_a_quota_never_applied_falls_back_to_aws_default(east: Stubs, prod: Config) -> None:
    applied = [q for q in _prod_quotas() if q["QuotaName"] != "ml.g6e.4xlarge for cluster usage"]
    _bootstrap(east)
    _caller(east)
    _quotas(east, applied, defaults=[_quota("ml.g6e.4xlarge for cluster usage", 0.0, "L-A15DF696")])
    _zones(east, PROD_ZONES)
    _offerings(east, prod, [i for _, i in PROD_ZONES])
    _leftovers(east, prod)
    _admin_role(east)
    _addons(east, prod)
    (bad,) = [c for c in collect(prod.env, east.clients).checks if c.verdict != "ok"]
    assert bad.name == "ml.g6e.4xlarge for cluster usage" and "L-A15DF696" in bad.value


def test_total_instances_quota(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, quotas=_prod_quotas(**{QUOTA_ACROSS_CLUSTERS: 5.0}))
    assert _bad(collect(prod.env, east.clients)) == [("quota", QUOTA_ACROSS_CLUSTERS, "problem")]


def test_unknown_quota_is_not_a_pass(east: Stubs, prod: Config) -> None:
    quotas = [q for q in _prod_quotas() if q["QuotaName"] != QUOTA_EBS_GB]
    _ready_prod(east, prod, quotas=quotas)
    assert _bad(collect(prod.env, east.clients)) == [("quota", QUOTA_EBS_GB, "unknown")]


def test_a_zone_missing_or_impaired(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, zones=PROD_ZONES[:2])
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("zone", "us-east-1c", "problem")]
    assert "us-east-1a (use1-az4)" in next(c for c in report.checks if c.verdict != "ok").detail


def test_zone_ids_resolve_to_the_accounts_names(west: Stubs, config_copy: Any) -> None:
    path = config_copy / "environments" / "dev.yaml"
    path.write_text(path.read_text().replace("[us-west-2a, us-west-2b]", "[usw2-az1, usw2-az9]"))
    dev = load_checked(config_copy, "dev")
    _bootstrap(west)
    _caller(west)
    _quotas(
        west,
        [
            _quota(n, 100.0)
            for n in (
                "ml.m5.2xlarge for cluster usage",
                "ml.g6e.4xlarge for cluster usage",
                QUOTA_PER_CLUSTER,
                QUOTA_ACROSS_CLUSTERS,
                QUOTA_EBS_GB,
            )
        ],
    )
    _zones(west, [("us-west-2a", "usw2-az2"), ("us-west-2b", "usw2-az1"), ("us-west-2c", "usw2-az3")])
    _offerings(west, dev, ["usw2-az1"])  # usw2-az9 does not resolve: the zone check reports it, not this one
    _leftovers(west, dev)
    _addons(west, dev)
    report = collect(dev.env, west.clients)
    zones = {c.name: (c.value, c.verdict) for c in report.checks if c.area == "zone"}
    assert zones == {"usw2-az1": ("us-west-2b = usw2-az1, available", "ok"), "usw2-az9": ("absent", "problem")}


def test_a_pinned_addon_version_eks_does_not_offer(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, offered={"aws-mountpoint-s3-csi-driver": ["v2.8.0-eksbuild.1"]})
    report = collect(prod.env, east.clients)
    (bad,) = [c for c in report.checks if c.verdict != "ok"]
    assert bad.name == "aws-mountpoint-s3-csi-driver" and "v2.8.0-eksbuild.1" in bad.detail


def test_inference_addon_not_offered_in_the_region(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, offered={"amazon-sagemaker-hyperpod-inference": []})
    (bad,) = [c for c in collect(prod.env, east.clients).checks if c.verdict != "ok"]
    assert (
        bad.name == "amazon-sagemaker-hyperpod-inference"
        and "offers no version of this add-on in us-east-1" in bad.detail
    )


def test_an_api_error_makes_one_check_unknown(east: Stubs, prod: Config) -> None:
    _bootstrap(east)
    _caller(east)
    east["service_quotas"].add_client_error(
        "list_aws_default_service_quotas", service_error_code="AccessDeniedException", service_message="no"
    )
    _zones(east, PROD_ZONES)
    _offerings(east, prod, [i for _, i in PROD_ZONES])
    _leftovers(east, prod)
    _admin_role(east)
    _addons(east, prod)
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("quota", "SageMaker quotas", "unknown")]
    assert report.exit_code == 1


# ---- issue 26: instance types per zone and leftovers of an earlier attempt -------------------------------------------


def test_an_instance_type_not_offered_in_a_configured_zone(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, missing={"g6e.4xlarge": ["use1-az1"]})
    report = collect(prod.env, east.clients)
    (bad,) = [c for c in report.checks if c.verdict != "ok"]
    assert (bad.area, bad.name, bad.verdict) == ("instance type", "ml.g6e.4xlarge", "problem")
    assert "EC2 does not offer g6e.4xlarge in use1-az1" in bad.detail and "availability_zones" in bad.detail
    assert report.exit_code == 1


def test_offerings_unreadable_is_unknown_not_ready(east: Stubs, prod: Config) -> None:
    _bootstrap(east)
    _caller(east)
    _quotas(east, _prod_quotas())
    _zones(east, PROD_ZONES)
    east["ec2"].add_client_error(
        "describe_instance_type_offerings", service_error_code="UnauthorizedOperation", service_message="no"
    )
    _leftovers(east, prod)
    _admin_role(east)
    _addons(east, prod)
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("instance type", "EC2 offerings", "unknown")]
    assert report.exit_code == 1


@pytest.mark.parametrize(
    ("found", "bad"),
    [
        ({"hyperpod": [("kvtier-prod", "Failed")]}, "HyperPod cluster kvtier-prod"),
        ({"eks": "ACTIVE"}, "EKS cluster kvtier-prod"),
        (
            {"roles": ["SageMakerHyperPodInference-prod-us-east-1"]},
            "IAM role SageMakerHyperPodInference-prod-us-east-1",
        ),
        ({"bucket": "exists"}, f"bucket sagemaker-kvtier-prod-{ACCOUNT}-us-east-1"),
        ({"bucket": "foreign"}, f"bucket sagemaker-kvtier-prod-{ACCOUNT}-us-east-1"),
    ],
)
def test_leftovers_of_an_earlier_failed_attempt(east: Stubs, prod: Config, found: dict[str, Any], bad: str) -> None:
    _ready_prod(east, prod, leftovers=found)
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("leftovers", bad, "problem")]
    assert report.exit_code == 1


def test_a_deployed_environment_owns_its_names(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod, leftovers={"stack": True})  # no list/describe/get/head call is stubbed: none is made
    report = collect(prod.env, east.clients)
    assert report.ready, _bad(report)
    assert [(c.area, c.value) for c in report.checks if c.area == "leftovers"] == [("leftovers", "exists")]


def test_leftovers_unreadable_is_unknown(east: Stubs, prod: Config) -> None:
    _bootstrap(east)
    _caller(east)
    _quotas(east, _prod_quotas())
    _zones(east, PROD_ZONES)
    _offerings(east, prod, [i for _, i in PROD_ZONES])
    east["cloudformation"].add_client_error(
        "describe_stacks", service_error_code="AccessDenied", service_message="no", http_status_code=403
    )
    _admin_role(east)
    _addons(east, prod)
    assert _bad(collect(prod.env, east.clients)) == [("leftovers", "earlier attempts", "unknown")]


# ---- an existing cluster -------------------------------------------------------------------------------------------


def _byoc_ready(
    s: Stubs,
    byoc: Config,
    status: str = "InService",
    eks: str = "ml-cluster-eks",
    recovery: str | None = "Automatic",
    issuer: str = "",
    provider: str | None = "",
) -> None:
    _bootstrap(s)
    _caller(s)
    _zones(s, [("us-west-2a", "usw2-az2"), ("us-west-2b", "usw2-az1")])
    _addons(s, byoc)
    existing = byoc.env.hyperpod.existing
    assert existing is not None
    s["sagemaker"].add_response(
        "describe_cluster",
        {
            "ClusterArn": existing.hyperpod_cluster_arn,
            "ClusterName": "ml-cluster",
            "ClusterStatus": status,
            "InstanceGroups": [],
            "Orchestrator": {"Eks": {"ClusterArn": f"arn:aws:eks:us-west-2:{ACCOUNT}:cluster/{eks}"}},
            **({"NodeRecovery": recovery} if recovery is not None else {}),
        },
        {"ClusterName": existing.hyperpod_cluster_arn},
    )
    own_issuer = "oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF"  # byoc.yaml's provider
    s["eks"].add_response(
        "describe_cluster",
        {
            "cluster": {
                "name": existing.eks_cluster_name,
                "identity": {"oidc": {"issuer": f"https://{issuer or own_issuer}"}},
            }
        },
        {"name": existing.eks_cluster_name},
    )
    arn = {"OpenIDConnectProviderArn": existing.oidc_provider_arn}
    if provider is None:
        _not_found(s, "iam", "get_open_id_connect_provider", "NoSuchEntity", arn)
    else:
        s["iam"].add_response("get_open_id_connect_provider", {"Url": provider or own_issuer}, arn)


def test_existing_cluster_in_service_with_its_eks(west: Stubs, byoc: Config) -> None:
    _byoc_ready(west, byoc)
    report = collect(byoc.env, west.clients)
    assert report.ready, _bad(report)
    assert not [c for c in report.checks if c.area == "quota"]  # nothing to create


@pytest.mark.parametrize(
    ("status", "eks", "bad"), [("Updating", "ml-cluster-eks", "ml-cluster"), ("InService", "other", "orchestrator")]
)
def test_existing_cluster_busy_or_orchestrated_elsewhere(
    west: Stubs, byoc: Config, status: str, eks: str, bad: str
) -> None:
    _byoc_ready(west, byoc, status, eks)
    assert _bad(collect(byoc.env, west.clients)) == [("cluster", bad, "problem")]


def test_existing_cluster_without_node_recovery(west: Stubs, byoc: Config) -> None:
    _byoc_ready(west, byoc, recovery=None)
    report = collect(byoc.env, west.clients)
    assert _bad(report) == [("cluster", "NodeRecovery", "problem")]
    assert "--node-recovery Automatic" in next(c for c in report.checks if c.verdict != "ok").detail


@pytest.mark.parametrize(
    ("issuer", "provider", "value"),
    [
        ("oidc.eks.us-west-2.amazonaws.com/id/FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", "", "oidc.eks"),  # another cluster's
        ("", None, "absent"),
    ],
)
def test_existing_cluster_oidc_provider_missing_or_not_the_clusters(
    west: Stubs, byoc: Config, issuer: str, provider: str | None, value: str
) -> None:
    _byoc_ready(west, byoc, issuer=issuer, provider=provider)
    report = collect(byoc.env, west.clients)
    (bad,) = [c for c in report.checks if c.verdict != "ok"]
    assert (bad.area, bad.verdict) == ("oidc", "problem") and bad.value.startswith(value)


def test_existing_cluster_oidc_unreadable_is_unknown(west: Stubs, byoc: Config) -> None:
    _bootstrap(west)
    _caller(west)
    _zones(west, [("us-west-2a", "usw2-az2"), ("us-west-2b", "usw2-az1")])
    _addons(west, byoc)
    existing = byoc.env.hyperpod.existing
    assert existing is not None
    west["sagemaker"].add_response(
        "describe_cluster",
        {
            "ClusterArn": existing.hyperpod_cluster_arn,
            "ClusterName": "ml-cluster",
            "ClusterStatus": "InService",
            "InstanceGroups": [],
            "NodeRecovery": "Automatic",
            "Orchestrator": {"Eks": {"ClusterArn": f"arn:aws:eks:us-west-2:{ACCOUNT}:cluster/ml-cluster-eks"}},
        },
        {"ClusterName": existing.hyperpod_cluster_arn},
    )
    west["eks"].add_client_error("describe_cluster", service_error_code="AccessDeniedException", service_message="no")
    assert _bad(collect(byoc.env, west.clients)) == [("oidc", existing.oidc_provider_arn, "unknown")]


# ---- issue 26: a LOB's model bucket is readable by the S3 CSI driver (S3 ABAC and the environment's tag) -------------

MODEL_BUCKET = "acme-ml-models"  # config/lobs/search.yaml
PROD_TAG = {"Key": "kvtier:model-reader:prod", "Value": "true"}


def _tagged_env(prod: Config) -> Config:
    """prod with `model_bucket_access: tagged` (the shipped prod reads its buckets by name)."""
    return replace(prod, env=prod.env.model_copy(update={"model_bucket_access": "tagged"}))


def _model_bucket(
    s: Stubs, bucket: str = MODEL_BUCKET, *, abac: str | None = "Enabled", tags: list[dict[str, str]] | None = None
) -> None:
    """The reads of one model bucket: `abac` None answers NoSuchBucket; `tags` default: the prod tag only."""
    _caller(s)
    params = {"Bucket": bucket, "ExpectedBucketOwner": ACCOUNT}
    if abac is None:
        _not_found(s, "s3", "get_bucket_abac", "NoSuchBucket", params)
        return
    s["s3"].add_response("get_bucket_abac", {"AbacStatus": {"Status": abac}}, params)
    if abac != "Enabled":
        return
    listed = [{"Key": "cost-center", "Value": "ml"}, PROD_TAG] if tags is None else tags
    s["s3control"].add_response(
        "list_tags_for_resource",
        {"Tags": listed},
        {"AccountId": ACCOUNT, "ResourceArn": f"arn:aws:s3:::{bucket}"},
    )


def test_a_model_bucket_with_abac_and_the_environments_tag_passes(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    _model_bucket(east)
    report = collect(_tagged_env(prod).env, east.clients, prod.model_buckets())
    assert report.ready, _bad(report)
    (check,) = [c for c in report.checks if c.area == "model bucket"]
    assert (check.name, check.value) == (MODEL_BUCKET, "ABAC Enabled, kvtier:model-reader:prod=true")


@pytest.mark.parametrize(
    ("abac", "tags", "value", "fix"),
    [
        ("Disabled", None, "ABAC Disabled", f"aws s3api put-bucket-abac --bucket {MODEL_BUCKET} --abac-status "),
        (
            "Enabled",
            [{"Key": "kvtier:model-reader:dev", "Value": "true"}],  # tagged for another environment only
            "ABAC Enabled, kvtier:model-reader:prod=<absent>",
            f"aws s3control tag-resource --account-id {ACCOUNT} --resource-arn arn:aws:s3:::{MODEL_BUCKET} "
            "--tags Key=kvtier:model-reader:prod,Value=true",
        ),
        ("Enabled", [{**PROD_TAG, "Value": "false"}], "ABAC Enabled, kvtier:model-reader:prod=false", "tag-resource"),
        (None, None, "absent", f"no bucket {MODEL_BUCKET} in account {ACCOUNT}"),
    ],
)
def test_a_model_bucket_the_s3_csi_driver_cannot_read(
    east: Stubs, prod: Config, abac: str | None, tags: list[dict[str, str]] | None, value: str, fix: str
) -> None:
    _ready_prod(east, prod)
    _model_bucket(east, abac=abac, tags=tags)
    report = collect(_tagged_env(prod).env, east.clients, prod.model_buckets())
    assert _bad(report) == [("model bucket", MODEL_BUCKET, "problem")]
    (check,) = [c for c in report.checks if c.area == "model bucket"]
    assert check.value == value
    assert fix in check.detail
    assert report.exit_code == 1


def test_a_model_bucket_unreadable_is_unknown(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    _caller(east)
    east["s3"].add_client_error(
        "get_bucket_abac", service_error_code="AccessDenied", service_message="Access Denied", http_status_code=403
    )
    report = collect(_tagged_env(prod).env, east.clients, prod.model_buckets())
    assert _bad(report) == [("model bucket", MODEL_BUCKET, "unknown")]
    (check,) = [c for c in report.checks if c.area == "model bucket"]
    assert check.detail == "AccessDenied: Access Denied"


def test_config_lists_each_model_bucket_once(prod: Config) -> None:
    assert prod.model_buckets() == (MODEL_BUCKET,)


def test_named_bucket_access_checks_no_bucket_tags(east: Stubs, prod: Config) -> None:
    """The shipped prod grants its buckets by name (cluster stack): no ABAC or tag read, no bucket check."""
    assert prod.env.model_bucket_access == "named"
    _ready_prod(east, prod)
    report = collect(prod.env, east.clients, prod.model_buckets())
    assert report.ready, _bad(report)
    assert [c for c in report.checks if c.area == "model bucket"] == []


# ---- the CLI -------------------------------------------------------------------------------------------------------


def test_cli_json_and_exit_codes(east: Stubs, prod: Config, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(preflight, "clients", lambda _env, _profile=None: east.clients)
    _ready_prod(east, prod)
    _encryption(east)  # search's bucket, read in either bucket-access mode (issue 37)
    assert cli(["preflight", "-e", "prod", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ready"] is True
    _ready_prod(east, prod, bootstrap={"absent": True})
    _encryption(east)
    assert cli(["preflight", "-e", "prod"]) == 1
    assert "not ready" in capsys.readouterr().out


def test_cli_names_an_untagged_model_bucket(
    east: Stubs, prod: Config, monkeypatch: pytest.MonkeyPatch, capsys: Any, config_copy: Path
) -> None:
    """With `model_bucket_access: tagged` the CLI checks the bucket config/lobs/search.yaml names."""
    env_file = config_copy / "environments" / "prod.yaml"
    env_file.write_text(env_file.read_text().replace("model_bucket_access: named", "model_bucket_access: tagged"))
    monkeypatch.setattr(preflight, "clients", lambda _env, _profile=None: east.clients)
    _ready_prod(east, prod)
    _model_bucket(east, tags=[])
    _encryption(east)
    assert cli(["preflight", "-e", "prod", "--config-dir", str(config_copy), "--json"]) == 1
    bad = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["verdict"] != "ok"]
    assert [(c["area"], c["name"]) for c in bad] == [("model bucket", MODEL_BUCKET)]
    assert "aws s3control tag-resource" in bad[0]["detail"]


def test_no_credentials_exits_3(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup: nothing leaves the machine
    assert cli(["preflight", "-e", "dev"]) == 3
    assert "no AWS credentials" in capsys.readouterr().err


def test_refused_credentials_are_unavailable(east: Stubs, prod: Config) -> None:
    east["cloudformation"].add_client_error(
        "describe_stacks", service_error_code="InvalidClientTokenId", service_message="bad token"
    )
    with pytest.raises(UnavailableError, match="refused the credentials"):
        collect(prod.env, east.clients)


# ---- `kvtier status`: stacks the config no longer builds (CloudFormation ListStacks) ---------------------------------


def _summary(name: str, status: str = "UPDATE_COMPLETE") -> dict[str, Any]:
    return {"StackName": name, "StackStatus": status, "CreationTime": "2026-01-01T00:00:00Z"}


def _tagged(name: str, env: str) -> dict[str, Any]:
    return {
        "Stacks": [
            {
                "StackName": name,
                "StackStatus": "UPDATE_COMPLETE",
                "CreationTime": "2026-01-01T00:00:00Z",
                "Tags": [{"Key": "kvtier:environment", "Value": env}],
            }
        ]
    }


def test_status_lists_stacks_the_config_no_longer_has(east: Stubs, prod: Config) -> None:
    from kvtier.ops.status import _LIVE_STACK_STATUSES, environment_stacks, orphan_checks

    live = [
        *(_summary(f"kvtier-prod-{k}") for k in ("network", "cluster", "platform", "retail", "support", "search")),
        _summary("kvtier-prod-legal"),  # a LOB removed from prod.yaml
        _summary("kvtier-prod-b-cluster"),  # another environment, prod-b
        _summary("unrelated"),
    ]
    cfn = east["cloudformation"]
    cfn.add_response("list_stacks", {"StackSummaries": live}, {"StackStatusFilter": _LIVE_STACK_STATUSES})
    cfn.add_response(
        "describe_stacks", _tagged("kvtier-prod-b-cluster", "prod-b"), {"StackName": "kvtier-prod-b-cluster"}
    )
    cfn.add_response("describe_stacks", _tagged("kvtier-prod-legal", "prod"), {"StackName": "kvtier-prod-legal"})
    found = environment_stacks(prod.env, east.clients.cloudformation)
    checks = orphan_checks(prod.env, found)
    assert [(c.name, c.verdict) for c in checks] == [("kvtier-prod-legal", "degraded")]
    assert "aws cloudformation delete-stack --region us-east-1 --stack-name kvtier-prod-legal" in checks[0].detail


def test_status_with_every_stack_in_the_config_reports_no_orphan(east: Stubs, prod: Config) -> None:
    from kvtier.ops.status import _LIVE_STACK_STATUSES, environment_stacks, orphan_checks

    live = [_summary(f"kvtier-prod-{k}") for k in ("network", "cluster", "platform", "retail")]
    east["cloudformation"].add_response(
        "list_stacks", {"StackSummaries": live}, {"StackStatusFilter": _LIVE_STACK_STATUSES}
    )
    assert orphan_checks(prod.env, environment_stacks(prod.env, east.clients.cloudformation)) == []


# ---- admins (issue 37) ---------------------------------------------------------------------------------------------

SSO_NAME = "AWSReservedSSO_PlatformAdmin_0123456789abcdef"
SSO_ARN = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/us-east-1/{SSO_NAME}"


def _with_admins(prod: Config, *admins: str) -> Config:
    return replace(prod, env=prod.env.model_copy(update={"eks": prod.env.eks.model_copy(update={"admins": admins})}))


def _admin(report: preflight.PreflightReport) -> list[Check]:
    return [c for c in report.checks if c.area == "admin"]


def test_an_admin_role_that_exists_passes(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    [check] = _admin(collect(prod.env, east.clients))
    assert (check.name, check.value, check.verdict) == (
        f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin",
        "role exists",
        "ok",
    )


def test_an_admin_that_does_not_exist_is_a_problem(east: Stubs, prod: Config) -> None:
    _ready_prod(
        east, prod, admins=lambda s: _not_found(s, "iam", "get_role", "NoSuchEntity", {"RoleName": "PlatformAdmin"})
    )
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("admin", f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin", "problem")]
    assert _admin(report)[0].detail.startswith(f"no IAM role PlatformAdmin in account {ACCOUNT}: EKS refuses")


def test_an_identity_center_role_without_its_path_is_named_with_it(east: Stubs, prod: Config) -> None:
    config = _with_admins(prod, f"arn:aws:iam::{ACCOUNT}:role/{SSO_NAME}", SSO_ARN)

    def twice(s: Stubs) -> None:
        _admin_role(s, SSO_NAME, SSO_ARN)
        _admin_role(s, SSO_NAME, SSO_ARN)

    _ready_prod(east, prod, admins=twice)
    report = collect(config.env, east.clients)
    without, with_path = _admin(report)
    assert (without.verdict, without.value) == ("problem", SSO_ARN)
    assert without.detail == (
        "an IAM Identity Center role's ARN includes its path (aws-reserved/sso.amazonaws.com/...): "
        f"list `{SSO_ARN}` in eks.admins"
    )
    assert with_path.verdict == "ok"


def test_an_absent_identity_center_role_says_where_its_arn_comes_from(east: Stubs, prod: Config) -> None:
    config = _with_admins(prod, f"arn:aws:iam::{ACCOUNT}:role/{SSO_NAME}")
    _ready_prod(east, prod, admins=lambda s: _not_found(s, "iam", "get_role", "NoSuchEntity", {"RoleName": SSO_NAME}))
    [check] = _admin(collect(config.env, east.clients))
    assert check.verdict == "problem" and f"aws iam get-role --role-name {SSO_NAME}" in check.detail
    assert "role/aws-reserved/sso.amazonaws.com/" in check.detail


def test_an_admin_user_is_read_with_get_user(east: Stubs, prod: Config) -> None:
    arn = f"arn:aws:iam::{ACCOUNT}:user/ops/alice"
    user = {"Path": "/ops/", "UserName": "alice", "UserId": "AIDAEXAMPLEEXAMPLE1", "CreateDate": "2026-01-01T00:00:00Z"}
    _ready_prod(
        east,
        prod,
        admins=lambda s: s["iam"].add_response("get_user", {"User": {**user, "Arn": arn}}, {"UserName": "alice"}),
    )
    [check] = _admin(collect(_with_admins(prod, arn).env, east.clients))
    assert (check.verdict, check.value) == ("ok", "user exists")


def test_an_admin_api_error_is_unknown_naming_the_call(east: Stubs, prod: Config) -> None:
    def denied(s: Stubs) -> None:
        s["iam"].add_client_error(
            "get_role", service_error_code="AccessDenied", service_message="not authorized", http_status_code=403
        )

    _ready_prod(east, prod, admins=denied)
    report = collect(prod.env, east.clients)
    assert _bad(report) == [("admin", f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin", "unknown")]
    assert _admin(report)[0].detail == "iam:GetRole: AccessDenied: not authorized"


def test_an_admin_of_another_account_is_not_checked(east: Stubs, prod: Config) -> None:
    arn = "arn:aws:iam::444455556666:role/Auditor"
    _ready_prod(east, prod, admins=lambda s: None)
    [check] = _admin(collect(_with_admins(prod, arn).env, east.clients))
    assert (check.verdict, check.value) == ("unknown", "account 444455556666")


# ---- model buckets encrypted with a customer managed KMS key (issue 37) --------------------------------------------

KEY = "arn:aws:kms:us-east-1:444455556666:key/1234abcd-12ab-34cd-56ef-1234567890ab"
OTHER_KEY = "arn:aws:kms:us-east-1:444455556666:key/mrk-0123456789abcdef0123456789abcdef"
SEARCH = "config/lobs/search.yaml endpoints[0].model"


def _encryption(
    s: Stubs, bucket: str = MODEL_BUCKET, algorithm: str = "AES256", key: str | None = None, error: str = ""
) -> None:
    """s3:GetBucketEncryption of one bucket: its default (`algorithm`, `key`), or the error code `error`."""
    if error:
        s["s3"].add_client_error(
            "get_bucket_encryption", service_error_code=error, service_message=f"{error} (test)", http_status_code=403
        )
        return
    default: dict[str, str] = {"SSEAlgorithm": algorithm, **({"KMSMasterKeyID": key} if key else {})}
    rules = [{"ApplyServerSideEncryptionByDefault": default, "BucketKeyEnabled": True}]
    s["s3"].add_response(
        "get_bucket_encryption", {"ServerSideEncryptionConfiguration": {"Rules": rules}}, {"Bucket": bucket}
    )


def _sources(*keys: str | None) -> list[preflight.ModelSource]:
    return [preflight.ModelSource(MODEL_BUCKET, f"{SEARCH}-{i}" if i else SEARCH, k) for i, k in enumerate(keys)]


def _key_check(report: preflight.PreflightReport) -> Check:
    [check] = [c for c in report.checks if c.area == "model key"]
    return check


def test_a_kms_bucket_whose_key_every_source_names_passes(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms", key=KEY)
    report = collect(prod.env, east.clients, (), _sources(KEY, KEY))
    assert report.ready, _bad(report)
    assert (_key_check(report).value, _key_check(report).verdict) == (KEY, "ok")


def test_a_kms_bucket_says_which_key_is_missing_and_where(east: Stubs, prod: Config) -> None:
    """The finding: a bucket encrypted with a customer managed key whose source names no key. Before issue 37
    preflight read no bucket's encryption, and the first download failed with AccessDenied at run time."""
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms", key=KEY)
    report = collect(prod.env, east.clients, (), _sources(None))
    assert _bad(report) == [("model key", MODEL_BUCKET, "problem")]
    assert _key_check(report).detail.startswith(
        f"the bucket encrypts new objects with this KMS key; {SEARCH} names no key: add `kms_key_arn: {KEY}`"
    )
    assert report.exit_code == 1


def test_a_kms_bucket_with_another_key_named_and_a_key_id_default(east: Stubs, prod: Config) -> None:
    """The bucket's default given as a bare key id (S3 accepts it): compared by key id; a source naming another key
    is a problem too, and the fix says how to get the ARN."""
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms:dsse", key="1234abcd-12ab-34cd-56ef-1234567890ab")
    report = collect(prod.env, east.clients, (), _sources(KEY, OTHER_KEY))
    check = _key_check(report)
    assert check.verdict == "problem"
    assert f"{SEARCH}-1 names {OTHER_KEY}" in check.detail
    assert "`aws kms describe-key --key-id 1234abcd-12ab-34cd-56ef-1234567890ab`" in check.detail


@pytest.mark.parametrize(
    ("algorithm", "key", "value"),
    [
        ("AES256", None, "AES256 (SSE-S3)"),
        ("aws:kms", None, "aws:kms, AWS managed key aws/s3"),
    ],
)
def test_a_bucket_without_a_customer_managed_key_needs_none(
    east: Stubs, prod: Config, algorithm: str, key: str | None, value: str
) -> None:
    _ready_prod(east, prod)
    _encryption(east, algorithm=algorithm, key=key)
    report = collect(prod.env, east.clients, (), _sources(None))
    assert report.ready, _bad(report)
    assert _key_check(report).value == value


def test_a_bucket_without_default_encryption_needs_no_key(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    _not_found(
        east,
        "s3",
        "get_bucket_encryption",
        "ServerSideEncryptionConfigurationNotFoundError",
        {"Bucket": MODEL_BUCKET},
        status=404,
    )
    assert collect(prod.env, east.clients, (), _sources(None)).ready


def test_a_bucket_default_that_names_an_alias_is_unknown_with_the_command(east: Stubs, prod: Config) -> None:
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms", key="alias/models")
    check = _key_check(collect(prod.env, east.clients, (), _sources(KEY)))
    assert (check.verdict, check.value) == ("unknown", "alias/models")
    assert "aws kms describe-key --key-id alias/models --query KeyMetadata.Arn" in check.detail


def test_a_refused_encryption_read_is_unknown_naming_the_call(east: Stubs, prod: Config) -> None:
    """An API error is a finding with the call that failed, never an exception (the bucket's owner may be another
    account that grants no s3:GetEncryptionConfiguration)."""
    _ready_prod(east, prod)
    _encryption(east, error="AccessDenied")
    report = collect(prod.env, east.clients, (), _sources(KEY))
    assert _bad(report) == [("model key", MODEL_BUCKET, "unknown")]
    assert _key_check(report).detail == "s3:GetBucketEncryption: AccessDenied: AccessDenied (test)"


def test_cli_checks_the_key_a_lob_file_names(
    east: Stubs, prod: Config, monkeypatch: pytest.MonkeyPatch, capsys: Any, config_copy: Path
) -> None:
    """search.yaml with and without `kms_key_arn`, against a bucket encrypted with that key."""
    monkeypatch.setattr(preflight, "clients", lambda _env, _profile=None: east.clients)
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms", key=KEY)
    assert cli(["preflight", "-e", "prod", "--config-dir", str(config_copy), "--json"]) == 1
    [bad] = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["verdict"] != "ok"]
    assert (bad["area"], bad["name"]) == ("model key", MODEL_BUCKET)
    assert f"{config_copy}/lobs/search.yaml endpoints[0].model names no key: add `kms_key_arn: {KEY}`" in bad["detail"]
    lob = config_copy / "lobs" / "search.yaml"
    lob.write_text(
        lob.read_text().replace(
            'weights_version: "2026-12-01"}', f'weights_version: "2026-12-01", kms_key_arn: {KEY}}}'
        )
    )
    _ready_prod(east, prod)
    _encryption(east, algorithm="aws:kms", key=KEY)
    assert cli(["preflight", "-e", "prod", "--config-dir", str(config_copy), "--json"]) == 0, capsys.readouterr()
