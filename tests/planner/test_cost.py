"""Costs per LOB and per environment, and the same capacity on P5, against hand calculations from the catalog."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from kvtier.catalog import INSTANCE_TYPES
from kvtier.planner.cost import env_cost
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

G6E = INSTANCE_TYPES["ml.g6e.4xlarge"]
M5 = INSTANCE_TYPES["ml.m5.2xlarge"]
P5 = INSTANCE_TYPES["ml.p5.48xlarge"]
H100_PER_L40S = G6E.gpu_spec.bf16_dense_tflops / P5.gpu_spec.bf16_dense_tflops


def test_dev_costs_by_hand() -> None:
    """dev: 2 x ml.m5.2xlarge system nodes, 3 x ml.g6e.4xlarge GPU nodes, retail holding two GPUs (the third is
    kept free for rolling updates)."""
    config = load_checked(CONFIG_DIR, "dev")
    assert [(g.instance_type, g.count) for g in config.env.hyperpod.instance_groups] == [
        ("ml.m5.2xlarge", 2),
        ("ml.g6e.4xlarge", 3),
    ]
    cost = env_cost(config.env, config.lobs)
    g6e, m5 = G6E.price_per_hour or 0, M5.price_per_hour or 0
    assert (cost.gpus, cost.gpu_nodes, cost.allocated_gpus) == (3, 3, 2)
    assert cost.gpu_price.per_hour == pytest.approx(3 * g6e)
    assert cost.unallocated_price.per_hour == pytest.approx(g6e)
    assert cost.system_price.per_hour == pytest.approx(2 * m5)
    fixed = 0.10 + 10 * 2 * 0.01 + 0.045  # EKS, 10 interface endpoints x 2 zones, 1 NAT gateway (issue 26)
    assert cost.fixed_price.per_hour == pytest.approx(fixed)
    assert cost.total.per_hour == pytest.approx(3 * g6e + 2 * m5 + fixed)
    assert cost.total.per_month == pytest.approx((3 * g6e + 2 * m5 + fixed) * 730)
    (retail,) = cost.lobs
    assert (retail.name, retail.gpus, retail.gpu_quota, retail.nodes) == ("retail", 2, 3, 2)
    assert retail.price.per_hour == pytest.approx(2 * g6e)
    # P5: the same dense BF16 throughput, in whole instances (a buyer cannot rent a fraction of one; issue 29).
    assert retail.h100_gpus == pytest.approx(2 * H100_PER_L40S)
    assert retail.p5_instances == 1
    assert retail.p5_price.per_hour == pytest.approx(P5.price_per_hour or 0)
    assert cost.h100_gpus == pytest.approx(3 * H100_PER_L40S)  # every GPU of the environment, the free one too
    assert cost.p5_instances == math.ceil(3 * H100_PER_L40S / 8) == 1
    assert cost.total_on_p5.per_hour == pytest.approx((P5.price_per_hour or 0) + 2 * m5 + fixed)


def test_gpus_no_lob_holds_are_priced_apart(config_copy: Path) -> None:
    env_path = config_copy / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["hyperpod"]["instance_groups"][1]["count"] = 5
    env_path.write_text(yaml.safe_dump(env))
    config = load_checked(config_copy, "dev")
    cost = env_cost(config.env, config.lobs)
    assert cost.unallocated_price.per_hour == pytest.approx(3 * (G6E.price_per_hour or 0))
    assert cost.gpu_price.per_hour == pytest.approx(5 * (G6E.price_per_hour or 0))


def test_lob_on_a_multi_gpu_instance_pays_its_gpus_share(config_copy: Path) -> None:
    env_path = config_copy / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["hyperpod"]["instance_groups"][1].update(instance_type="ml.g6e.12xlarge", count=1)
    env_path.write_text(yaml.safe_dump(env))
    lob_path = config_copy / "lobs" / "retail.yaml"
    lob = yaml.safe_load(lob_path.read_text())
    lob["endpoints"][0].update(instance_type="ml.g6e.12xlarge", tensor_parallel=2, replicas=1)
    lob["gpu_quota"] = 4  # one replica of TP 2 and its rolling-update surge pod
    lob_path.write_text(yaml.safe_dump(lob))
    config = load_checked(config_copy, "dev")
    cost = env_cost(config.env, config.lobs)
    price = INSTANCE_TYPES["ml.g6e.12xlarge"].price_per_hour or 0
    (retail,) = cost.lobs
    assert retail.gpus == 2 and retail.nodes == pytest.approx(0.5)
    assert retail.price.per_hour == pytest.approx(price / 2)
    assert cost.unallocated_price.per_hour == pytest.approx(price / 2)


def test_unknown_prices_are_said_not_guessed(config_copy: Path) -> None:
    env_path = config_copy / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["hyperpod"]["instance_groups"][0]["instance_type"] = "ml.m5.8xlarge"  # no price in the sources
    env_path.write_text(yaml.safe_dump(env))
    config = load_checked(config_copy, "dev")
    cost = env_cost(config.env, config.lobs)
    assert INSTANCE_TYPES["ml.m5.8xlarge"].price_per_hour is None
    assert cost.system_price.unknown == ("ml.m5.8xlarge",)
    assert not cost.total.known
    assert cost.gpu_price.known


def test_price_override_from_the_environment(config_copy: Path) -> None:
    env_path = config_copy / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["catalog_overrides"] = {"ml.g6e.4xlarge": {"price_per_hour": 5.0}}
    env_path.write_text(yaml.safe_dump(env))
    config = load_checked(config_copy, "dev")
    assert config.env.instance("ml.g6e.4xlarge").price_as_of == "catalog_overrides"
    assert env_cost(config.env, config.lobs).gpu_price.per_hour == pytest.approx(15.0)  # 3 nodes x 5.0


def test_existing_cluster_costs_its_declared_groups() -> None:
    """byoc: kvtier creates no instance groups; the owner's groups (hyperpod.existing.nodes) are what it pays for."""
    config = load_checked(CONFIG_DIR, "byoc")
    assert config.env.hyperpod.existing is not None and not config.env.hyperpod.instance_groups
    cost = env_cost(config.env, config.lobs)
    expected = sum(
        g.count * (INSTANCE_TYPES[g.instance_type].price_per_hour or 0)
        for role in ("system", "gpu")
        for g in config.env.hyperpod.existing.nodes.role(role).groups
    )
    assert expected > 0
    assert cost.total.per_hour == pytest.approx(expected)
    assert cost.gpus == sum(g.count * INSTANCE_TYPES[g.instance_type].gpus for g in config.env.groups("gpu"))
