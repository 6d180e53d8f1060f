"""`curvine` section: the environment's L2 pool (masters on system nodes, one worker per GPU node).

Sizes: every `*_gb` here is a Curvine GB, which is binary (2^30 bytes; Curvine's `ByteUnit` parses "GB" as GiB,
CurvineIO/curvine@v0.4.1 `runtime/src/common/byte_unit.rs`; docs/references.md "The L2 pool"). `worker_data_gb: 400` is written as `[SSD:400GB]` and means 400 GiB. The catalog's
`nvme_gb` is decimal (AWS); `kvtier.rules.l2.check_worker_fits` converts.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from kvtier.config.base import FieldError, PinnedImage, StrictModel

CURVINE_GIB = 1024**3  # one Curvine "GB"
DECIMAL_GB = 1000**3  # one catalog (AWS) GB
# Part of the instance store kvtier lets Curvine claim: ext4 keeps 5% of blocks for root by default and the file
# system needs room for its own metadata (assumption; a wrong value only makes the check stricter or looser by 5%).
NVME_USABLE_FRACTION = 0.95

CURVINE_VERSION = "v0.4.1"
# Every default image with where its tag comes from (docs/references.md "The L2 pool").
IMAGE_SOURCES: dict[str, str] = {
    "curvine": "CurvineIO/curvine tag v0.4.1 (709f2478), .github/workflows/build-runtime-image.yml pushes "
    "ghcr.io/curvineio/curvine:<tag>; Helm index lists chart curvine 0.4.1 appVersion 0.4.1",
    "csi": "CurvineIO/curvine tag v0.4.1, .github/workflows/build-csi-image.yml pushes ghcr.io/curvineio/curvine-csi:<tag>",
    "csi_provisioner": "kubernetes-csi/external-provisioner v6.3.0 (34c6fc21, 2026-06-04; needs Kubernetes >= 1.34)",
    "node_driver_registrar": "kubernetes-csi/node-driver-registrar v2.17.0 (c5794c45, 2026-05-21)",
    "livenessprobe": "kubernetes-csi/livenessprobe v2.19.0 (d2d15a5e, 2026-05-21)",
}

_CPU = re.compile(r"^(\d+)(\.\d{1,3})?$|^(\d+)m$", re.ASCII)  # ASCII digits only: Kubernetes quantities
_MEMORY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$", re.ASCII)
_MEMORY_UNITS = {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def cpu_millis(value: str) -> int:
    """Kubernetes CPU quantity -> millicores ("2" -> 2000, "1.5" -> 1500, "250m" -> 250)."""
    match = _CPU.match(value)
    if match is None:
        raise ValueError(f"'{value}' is not a CPU quantity")
    if match.group(3) is not None:
        return int(match.group(3))
    fraction = match.group(2) or ".0"
    return int(match.group(1)) * 1000 + int(fraction[1:].ljust(3, "0"))


def memory_bytes(value: str) -> int:
    """Kubernetes memory quantity (binary suffixes only) -> bytes ("4Gi" -> 4 * 2^30)."""
    match = _MEMORY.match(value)
    if match is None:
        raise ValueError(f"'{value}' is not a memory quantity")
    return int(match.group(1)) * _MEMORY_UNITS[match.group(2)]


def _cpu(value: str) -> str:
    if not _CPU.match(value) or cpu_millis(value) == 0:
        raise ValueError(
            f'\'{value}\' is not a CPU quantity; write cores as a string ("2", "0.5") or millicores ("500m")'
        )
    return value


def _memory(value: str) -> str:
    if not _MEMORY.match(value) or memory_bytes(value) == 0:
        raise ValueError(f'\'{value}\' is not a memory quantity; write it with a binary suffix, like "512Mi" or "4Gi"')
    return value


def _odd(value: int) -> int:
    if value % 2 == 0:
        raise ValueError(f"{value} masters cannot form a Raft majority safely; use an odd count (1 in dev, 3 in prod)")
    return value


Cpu = Annotated[str, AfterValidator(_cpu)]
Memory = Annotated[str, AfterValidator(_memory)]
Image = PinnedImage


class Resources(StrictModel):
    """Requests and limits of one container. No CPU limit by default on data paths: CFS throttling adds latency."""

    cpu_request: Cpu
    memory_request: Memory
    cpu_limit: Cpu | None = None
    memory_limit: Memory

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> Resources:
        if self.cpu_limit is not None and cpu_millis(self.cpu_limit) < cpu_millis(self.cpu_request):
            raise FieldError(
                "cpu_limit", f"{self.cpu_limit} is below the request {self.cpu_request}", "use a limit >= the request"
            )
        if memory_bytes(self.memory_limit) < memory_bytes(self.memory_request):
            raise FieldError(
                "memory_limit",
                f"{self.memory_limit} is below the request {self.memory_request}",
                "use a limit >= the request",
            )
        return self

    def k8s(self) -> dict[str, dict[str, str]]:
        """The container's `resources` field."""
        limits = {"memory": self.memory_limit}
        if self.cpu_limit is not None:
            limits["cpu"] = self.cpu_limit
        return {"requests": {"cpu": self.cpu_request, "memory": self.memory_request}, "limits": limits}


class CurvineResources(StrictModel):
    # Upstream chart values (curvine-helm index copy): master 1 CPU/2Gi -> 2/4Gi, worker 2/4Gi -> 4/8Gi.
    master: Resources = Resources(cpu_request="500m", memory_request="2Gi", cpu_limit="2", memory_limit="4Gi")
    # Worker and FUSE carry every L2 read and write of their node, so both are Guaranteed (requests = limits): the
    # kubelet evicts them after Burstable pods and their OOM score is the one of the Guaranteed vLLM pods (issue 11).
    # Worker reads and writes go through the page cache, which counts toward the memory cgroup (reclaimable).
    worker: Resources = Resources(cpu_request="2", memory_request="8Gi", cpu_limit="2", memory_limit="8Gi")
    # One FUSE process per GPU node: an OOM kill breaks every L2 mount on the node (the healer then restarts the
    # pods that use them). The CSI driver creates it with nodeName set: `kvtier validate` checks that it fits.
    fuse: Resources = Resources(cpu_request="2", memory_request="8Gi", cpu_limit="2", memory_limit="8Gi")

    @model_validator(mode="after")
    def _data_path_guaranteed(self) -> CurvineResources:
        for name in ("worker", "fuse"):
            res: Resources = getattr(self, name)
            if res.cpu_limit != res.cpu_request or res.memory_limit != res.memory_request:
                raise FieldError(
                    name,
                    f"requests ({res.cpu_request} CPU, {res.memory_request}) differ from limits "
                    f"({res.cpu_limit or 'none'} CPU, {res.memory_limit}), so the {name} pod is Burstable: evicted and "
                    "OOM-killed before the Guaranteed vLLM pods, which silently loses L2 on its node",
                    "set cpu_limit equal to cpu_request and memory_limit equal to memory_request (Guaranteed QoS)",
                )
        return self


class CurvineImages(StrictModel):
    curvine: Image = f"ghcr.io/curvineio/curvine:{CURVINE_VERSION}"  # masters, workers, init step, janitor
    csi: Image = f"ghcr.io/curvineio/curvine-csi:{CURVINE_VERSION}"  # CSI plugin and standalone FUSE pods
    csi_provisioner: Image = "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0"
    node_driver_registrar: Image = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0"
    livenessprobe: Image = "registry.k8s.io/sig-storage/livenessprobe:v2.19.0"


class CurvineConfig(StrictModel):
    # Raft group size. Fixed after the first deploy: journal peers are derived from it.
    masters: Annotated[int, Field(ge=1, le=7), AfterValidator(_odd)] = 1
    worker_data_gb: Annotated[int, Field(ge=10)] = 400  # per GPU node on the instance-store NVMe, Curvine GB (GiB)
    worker_reserved_gb: Annotated[int, Field(ge=0)] = 10  # `dir_reserved`: kept free inside worker_data_gb
    master_meta_gb: Annotated[int, Field(ge=1, le=16384)] = 10  # EBS volume per master (RocksDB metadata)
    master_journal_gb: Annotated[int, Field(ge=1, le=16384)] = 20  # EBS volume per master (Raft journal)
    images: CurvineImages = CurvineImages()
    resources: CurvineResources = CurvineResources()

    @model_validator(mode="after")
    def _reserve_inside_data(self) -> CurvineConfig:
        if self.worker_reserved_gb >= self.worker_data_gb:
            raise FieldError(
                "worker_reserved_gb",
                f"{self.worker_reserved_gb} GB reserved leaves nothing of worker_data_gb {self.worker_data_gb}",
                "reserve less than worker_data_gb (Curvine subtracts it from the configured capacity)",
            )
        return self


def curvine_gb_bytes(gb: float) -> int:
    """Bytes in `gb` Curvine GB (binary)."""
    return int(gb * CURVINE_GIB)


def max_worker_data_gb(nvme_gb: int) -> int:
    """The largest worker_data_gb (Curvine GB) that fits an instance store of `nvme_gb` decimal GB."""
    return int(nvme_gb * DECIMAL_GB * NVME_USABLE_FRACTION) // CURVINE_GIB
