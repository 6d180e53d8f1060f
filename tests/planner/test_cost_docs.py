"""Issue 26 (S2 "cost 45% stale") and issue 29 ("the pitch and the plan"): the dollar and KV figures README.md and
docs/deploying.md quote come from `kvtier plan -e dev`, compared here with the plan the CLI builds; and the P5
comparison is the one a buyer faces (whole ml.p5.48xlarge instances) plus the KV-capacity reason."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from kvtier.config.loader import Config
from kvtier.planner.cost import (
    EKS_CLUSTER_PER_HOUR,
    INTERFACE_ENDPOINT_PER_ZONE_HOUR,
    NAT_GATEWAY_PER_HOUR,
    env_cost,
    fixed_costs,
)
from kvtier.planner.report import build_plan
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEPLOYING = (ROOT / "docs" / "deploying.md").read_text()


@pytest.fixture(scope="module")
def dev() -> Config:
    return load_checked(CONFIG_DIR, "dev")


@pytest.fixture(scope="module")
def plan(dev: Config) -> dict[str, Any]:
    return build_plan(dev)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _one(pattern: str, text: str) -> re.Match[str]:
    found = list(re.finditer(pattern, " ".join(text.split())))
    assert len(found) == 1, f"expected one {pattern!r}, found {len(found)}"
    return found[0]


def _dev_counts(dev: Config) -> tuple[int, int]:
    return sum(g.count for g in dev.env.groups("system")), sum(g.count for g in dev.env.groups("gpu"))


def test_readme_cost_is_the_plans(dev: Config, plan: dict[str, Any]) -> None:
    total = plan["environment"]["total_price"]
    found = _one(
        r"\((\d+) system nodes, (\d+) `ml\.g6e\.4xlarge` GPU nodes, [^)]*\) costs about \*\*\$([\d.,]+) an hour, "
        r"\$([\d,]+) a month\*\*",
        README,
    )
    assert (int(found[1]), int(found[2])) == _dev_counts(dev)
    assert _number(found[3]) == round(total["per_hour"], 2)
    assert _number(found[4]) == round(total["per_month"])
    p5 = _one(r"one whole `ml\.p5\.48xlarge`, \$([\d,]+) a month", README)
    assert plan["environment"]["p5"]["instances"] == 1
    assert _number(p5[1]) == round(plan["environment"]["p5"]["price"]["per_month"])


def test_readme_p5_claim_is_the_plans_kv_comparison(plan: dict[str, Any]) -> None:
    [row] = plan["environment"]["p5"]["kv"]  # dev: one endpoint
    found = _one(
        r"replica reaches \*\*([\d,]+) tokens\*\* of cached KV through its tiers, where one P5 GPU holds "
        r"([\d,]+)",
        README,
    )
    assert (_number(found[1]), _number(found[2])) == (row["tokens"], row["tokens_on_p5"])
    assert row["tokens"] > row["tokens_on_p5"]  # the pitch holds only while this does


def test_deploying_cost_is_the_plans(dev: Config, plan: dict[str, Any]) -> None:
    env = plan["environment"]
    found = _one(
        r"\((\d+) x `ml\.m5\.2xlarge` system nodes, (\d+) x `ml\.g6e\.4xlarge` GPU nodes, (\d+) interface endpoints in "
        r"(\d+) zones, (\d+) NAT gateway\) comes to about \*\*\$([\d.,]+) an hour, \$([\d,]+) a month\*\*, of which "
        r"\*\*\$([\d.,]+) a month\*\* is fixed infrastructure",
        DEPLOYING,
    )
    counts = (int(found[1]), int(found[2]))
    assert counts == _dev_counts(dev)
    assert (int(found[3]), int(found[4]), int(found[5])) == (
        len(dev.env.network.interface_endpoints),
        len(dev.env.availability_zones),
        dev.env.network.nat_gateways,
    )
    assert _number(found[6]) == round(env["total_price"]["per_hour"], 2)
    assert _number(found[7]) == round(env["total_price"]["per_month"])
    assert _number(found[8]) == env["fixed_price"]["per_month"]
    for item in ("EBS volumes", "CloudWatch Logs", "VPC flow logs"):  # what the plan does not price, said
        assert item in " ".join(DEPLOYING.split()) and item in env["not_priced"]


def test_fixed_costs_are_priced_for_a_created_environment_only(dev: Config) -> None:
    zones = len(dev.env.availability_zones)
    endpoints = len(dev.env.network.interface_endpoints)
    expected = EKS_CLUSTER_PER_HOUR + endpoints * zones * INTERFACE_ENDPOINT_PER_ZONE_HOUR + NAT_GATEWAY_PER_HOUR
    cost = env_cost(dev.env, dev.lobs)
    assert cost.fixed_price.per_hour == pytest.approx(expected)
    assert cost.total.per_hour == pytest.approx(cost.gpu_price.per_hour + cost.system_price.per_hour + expected)
    byoc = load_checked(CONFIG_DIR, "byoc")
    assert fixed_costs(byoc.env) == ()  # the owner's EKS, endpoints and NAT


def test_p5_is_rented_in_whole_instances(plan: dict[str, Any], dev: Config) -> None:
    """A buyer cannot rent part of an ml.p5.48xlarge: no "by the GPU-hour" price, and a LOB alone pays whole ones."""
    p5 = plan["environment"]["p5"]
    assert "price_by_gpu_hour" not in p5
    per_node = p5["price_per_node_hour"]
    assert p5["price"]["per_hour"] == pytest.approx(p5["instances"] * per_node)
    for lob in plan["lobs"]:
        instances = math.ceil(lob["p5"]["h100_gpus"] / 8 - 1e-9)
        assert lob["p5"]["instances"] == instances
        assert lob["p5"]["price"]["per_hour"] == pytest.approx(instances * per_node)
