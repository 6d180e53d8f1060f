"""What an environment and each LOB cost per hour, the fixed infrastructure around them, and the same serving capacity
on P5 as a buyer would rent it: whole ml.p5.48xlarge instances (docs/planning.md, "Costs")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.catalog import HOURS_PER_MONTH, InstanceType
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness

P5_TYPE = "ml.p5.48xlarge"
P5_RULE = (
    "same dense BF16 tensor throughput: H100-equivalent GPUs = GPUs x (their dense BF16 TFLOPS / the H100's), "
    "rented as whole ml.p5.48xlarge instances (8 GPUs; no fraction of one can be rented): the environment "
    "ceil(H100-eq / 8), a LOB alone ceil(its H100-eq / 8)"
)
# Fixed infrastructure of an environment kvtier creates, USD per hour, us-east-1 and us-west-2 on-demand list prices
# read 2026-12 (docs/references.md "Issue 26"); an existing cluster's owner pays these, not kvtier.
EKS_CLUSTER_PER_HOUR = 0.10  # https://aws.amazon.com/eks/pricing/ (standard support)
INTERFACE_ENDPOINT_PER_ZONE_HOUR = 0.01  # https://aws.amazon.com/privatelink/pricing/ (per endpoint per AZ)
NAT_GATEWAY_PER_HOUR = 0.045  # https://aws.amazon.com/vpc/pricing/
FIXED_SOURCES = (
    "https://aws.amazon.com/eks/pricing/",
    "https://aws.amazon.com/privatelink/pricing/",
    "https://aws.amazon.com/vpc/pricing/",
)
NOT_PRICED = (
    "EBS volumes, NAT and interface-endpoint data processing, CloudWatch Logs ingestion and storage (all five EKS "
    "control-plane log types and VPC flow logs of all traffic), load balancers, S3 and data transfer"
)
SHARE_RULE = (
    "a LOB pays for the GPUs its endpoints hold (replicas x tensor_parallel) at its instance type's price per GPU"
)


@dataclass(frozen=True)
class Price:
    """USD per hour of the part whose price is known, and the instance types whose price is not."""

    per_hour: float
    unknown: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return not self.unknown

    @property
    def per_month(self) -> float:
        return self.per_hour * HOURS_PER_MONTH.value

    def __add__(self, other: Price) -> Price:
        return Price(self.per_hour + other.per_hour, tuple(sorted({*self.unknown, *other.unknown})))


def _instances(instance: InstanceType, count: float) -> Price:
    if instance.price_per_hour is None:
        return Price(0.0, (instance.name,))
    return Price(instance.price_per_hour * count)


def h100_equivalent(instance: InstanceType, gpus: float, p5: InstanceType) -> float:
    return gpus * instance.gpu_spec.bf16_dense_tflops / p5.gpu_spec.bf16_dense_tflops


@dataclass(frozen=True)
class FixedCost:
    """One fixed item: `count` units at `unit_price` USD an hour each."""

    name: str
    count: int
    unit: str
    unit_price: float

    @property
    def price(self) -> Price:
        return Price(self.count * self.unit_price)


def fixed_costs(env: Environment) -> tuple[FixedCost, ...]:
    """What a kvtier-created environment pays whatever its load; nothing for an existing cluster (the owner's)."""
    if env.hyperpod.existing is not None:
        return ()
    zones = len(env.availability_zones)
    return (
        FixedCost("EKS control plane", 1, "cluster", EKS_CLUSTER_PER_HOUR),
        FixedCost(
            "interface endpoints",
            len(env.network.interface_endpoints) * zones,
            f"endpoint x zone ({len(env.network.interface_endpoints)} x {zones})",
            INTERFACE_ENDPOINT_PER_ZONE_HOUR,
        ),
        FixedCost("NAT gateways", env.network.nat_gateways, "gateway", NAT_GATEWAY_PER_HOUR),
    )


@dataclass(frozen=True)
class GroupCost:
    name: str
    role: str
    instance_type: str
    count: int
    gpus: int
    price: Price


@dataclass(frozen=True)
class LobCost:
    name: str
    gpus: int  # at the configured replicas
    max_gpus: int  # at autoscaling maximums
    gpu_quota: int
    nodes: float  # GPU nodes its GPUs amount to (nodes are shared)
    price: Price
    h100_gpus: float
    p5_instances: int  # whole ml.p5.48xlarge instances for its throughput alone
    p5_price: Price


@dataclass(frozen=True)
class EnvCost:
    groups: tuple[GroupCost, ...]
    lobs: tuple[LobCost, ...]
    gpus: int
    gpu_nodes: int
    allocated_gpus: int
    gpu_price: Price
    system_price: Price
    unallocated_price: Price  # GPUs no LOB holds at its configured replicas
    h100_gpus: float
    p5_instances: int
    p5_price: Price  # whole P5 instances for the GPU capacity (system nodes stay as they are)
    fixed: tuple[FixedCost, ...] = ()

    @property
    def fixed_price(self) -> Price:
        return sum((f.price for f in self.fixed), Price(0.0))

    @property
    def total(self) -> Price:
        return self.gpu_price + self.system_price + self.fixed_price

    @property
    def total_on_p5(self) -> Price:
        return self.p5_price + self.system_price + self.fixed_price


def lob_cost(env: Environment, lob: LineOfBusiness) -> LobCost:
    p5 = env.instance(P5_TYPE)
    price, gpus, max_gpus, nodes, h100 = Price(0.0), 0, 0, 0.0, 0.0
    for endpoint in lob.endpoints:
        instance = env.instance(endpoint.instance_type)
        held = endpoint.replicas * endpoint.tensor_parallel
        gpus += held
        max_gpus += endpoint.max_replicas * endpoint.tensor_parallel
        nodes += held / instance.gpus
        price = price + _instances(instance, held / instance.gpus)
        h100 += h100_equivalent(instance, held, p5)
    return LobCost(
        name=lob.name,
        gpus=gpus,
        max_gpus=max_gpus,
        gpu_quota=lob.gpu_quota,
        nodes=nodes,
        price=price,
        h100_gpus=h100,
        p5_instances=_whole(h100, p5),
        p5_price=_instances(p5, _whole(h100, p5)),
    )


def _whole(h100_gpus: float, p5: InstanceType) -> int:
    """Whole P5 instances for `h100_gpus` (none for none): a buyer cannot rent part of one."""
    return math.ceil(h100_gpus / p5.gpus - 1e-9)


def env_cost(env: Environment, lobs: Sequence[LineOfBusiness]) -> EnvCost:
    p5 = env.instance(P5_TYPE)
    groups: list[GroupCost] = []
    gpu_price, system_price, unallocated = Price(0.0), Price(0.0), Price(0.0)
    gpus = gpu_nodes = 0
    h100 = 0.0
    lob_costs = tuple(lob_cost(env, lob) for lob in lobs)
    held_by_type: dict[str, int] = {}
    for lob in lobs:
        for endpoint in lob.endpoints:
            held = endpoint.replicas * endpoint.tensor_parallel
            held_by_type[endpoint.instance_type] = held_by_type.get(endpoint.instance_type, 0) + held
    for group in (*env.groups("system"), *env.groups("gpu")):  # kvtier's groups or an existing cluster's
        instance = env.instance(group.instance_type)
        price = _instances(instance, group.count)
        groups.append(GroupCost(group.name, group.role, group.instance_type, group.count, instance.gpus, price))
        if group.role == "system":
            system_price = system_price + price
            continue
        gpu_price = gpu_price + price
        gpus += group.count * instance.gpus
        gpu_nodes += group.count
        h100 += h100_equivalent(instance, group.count * instance.gpus, p5)
    for type_name in {g.instance_type for g in env.groups("gpu")}:
        instance = env.instance(type_name)
        total = sum(g.count for g in env.groups("gpu") if g.instance_type == type_name) * instance.gpus
        spare = max(total - held_by_type.get(type_name, 0), 0)
        unallocated = unallocated + _instances(instance, spare / instance.gpus)
    p5_instances = _whole(h100, p5)
    return EnvCost(
        groups=tuple(groups),
        lobs=lob_costs,
        gpus=gpus,
        gpu_nodes=gpu_nodes,
        allocated_gpus=sum(c.gpus for c in lob_costs),
        gpu_price=gpu_price,
        system_price=system_price,
        unallocated_price=unallocated,
        h100_gpus=h100,
        p5_instances=p5_instances,
        p5_price=_instances(p5, p5_instances),
        fixed=fixed_costs(env),
    )
