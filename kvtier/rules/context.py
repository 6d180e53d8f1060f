"""What every cross-file rule reads: the environment, its LOBs, where each endpoint is written, and GPU supply
and demand; and where rules put what they find."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.config.hyperpod import InstanceGroup
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import Problem


@dataclass(frozen=True)
class Site:
    """One endpoint and where it is written."""

    lob: LineOfBusiness
    file: str
    index: int
    endpoint: Endpoint

    def at(self, path: str) -> str:
        return f"endpoints[{self.index}].{path}"

    @property
    def label(self) -> str:
        return f"{self.lob.name}/{self.endpoint.name}"


@dataclass
class Findings:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    env: Environment
    env_file: str
    lobs: tuple[LineOfBusiness, ...]
    files: Mapping[str, str]

    def sites(self) -> Iterator[Site]:
        for lob in self.lobs:
            for index, endpoint in enumerate(lob.endpoints):
                yield Site(lob, self.files.get(lob.name, f"lobs/{lob.name}.yaml"), index, endpoint)

    def group_path(self, group: InstanceGroup) -> str:
        """Where a GPU group is written: kvtier's own groups or an existing cluster's."""
        hyperpod = self.env.hyperpod
        if hyperpod.existing is None:
            return f"hyperpod.instance_groups[{hyperpod.instance_groups.index(group)}]"
        names = [g.name for g in hyperpod.existing.nodes.gpu.groups]
        return f"hyperpod.existing.nodes.gpu.groups[{names.index(group.name)}]"

    def gpu_supply(self) -> dict[str, int]:
        """GPUs per instance type in the GPU groups."""
        supply: dict[str, int] = {}
        for group in self.env.groups("gpu"):
            gpus = group.count * self.gpus(group.instance_type)
            supply[group.instance_type] = supply.get(group.instance_type, 0) + gpus
        return supply

    def gpus(self, instance_type: str) -> int:
        return self.env.instance(instance_type).gpus

    def gpu_demand(self) -> dict[str, int]:
        """GPUs per instance type that every endpoint holds at its maximum replicas."""
        demand: dict[str, int] = {}
        for site in self.sites():
            e = site.endpoint
            demand[e.instance_type] = demand.get(e.instance_type, 0) + e.max_replicas * e.tensor_parallel
        return demand
