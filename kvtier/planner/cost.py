"""What an environment and each LOB cost per hour, and the same serving capacity on P5 (docs/planning.md, "Costs")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.catalog import HOURS_PER_MONTH, InstanceType
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness

P5_TYPE = "ml.p5.48xlarge"
P5_RULE = (
    "same dense BF16 tensor throughput: H100-equivalent GPUs = GPUs x (their dense BF16 TFLOPS / the H100's); "
    "a LOB pays its fraction of P5 GPU-hours (nodes are shared), the environment whole ml.p5.48xlarge instances"
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

    @property
    def total(self) -> Price:
        return self.gpu_price + self.system_price

    @property
    def total_on_p5(self) -> Price:
        return self.p5_price + self.system_price


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
        p5_price=_instances(p5, h100 / p5.gpus),
    )


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
    p5_instances = math.ceil(h100 / p5.gpus - 1e-9)
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
    )
