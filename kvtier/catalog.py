"""Facts kvtier relies on: instance types, GPUs and models, each with its source.

Every number here comes from ../shared/reference/ (which names the upstream source) or from the source named next
to it; docs/references.md lists them all. A field named in an entry's `unverified` set was not confirmed in a
primary source: config may override it (`catalog_overrides`), and only it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal

GIB = 1024**3
GB = 1000**3

REF_HW = (
    "reference curvine-lmcache.md 4.1 (memory: pytorch/torchx PR #969; network: Karpenter zz_generated.bandwidth.go)"
)
REF_NVME = "reference curvine-lmcache.md 4.1 (AWS product page from memory; UNVERIFIED: read /opt/dlami/nvme on a node)"
REF_PRICE = "reference curvine-lmcache.md 4.1 [3P] SageMaker prices via the AWS Pricing API, collected 2026-11"
REF_EFA = "reference aws-hyperpod.md 7 (aws-efa-k8s-device-plugin supportedInstanceLabels: g6e 8xlarge and larger)"
REF_EC2 = "AWS EC2 instance types, general purpose / compute optimized (m5, c5 specifications)"
REF_REGIONS = "cfn-lint 1.58.0 data/schemas/extensions/aws_sagemaker_cluster/instancetype_enum.json (lint data)"
REF_HYPERPOD_TYPES = "botocore 1.44.8 sagemaker 2017-07-24 ClusterInstanceType enum"

# Regions in which cfn-lint 1.58.0 accepts each instance type for AWS::SageMaker::Cluster.
_G6E_REGIONS = frozenset(
    {
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-south-2",
        "eu-central-1",
        "eu-north-1",
        "eu-south-2",
        "us-east-1",
        "us-east-2",
        "us-west-2",
    }
)
_P5_REGIONS = frozenset(
    {
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-south-1",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ca-central-1",
        "eu-central-1",
        "eu-north-1",
        "eu-west-1",
        "eu-west-2",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    }
)
_CPU_REGIONS = frozenset(
    {
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ca-central-1",
        "eu-central-1",
        "eu-north-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    }
)
_M5_2XL_REGIONS = _CPU_REGIONS - {"ap-southeast-3"}


@dataclass(frozen=True)
class Gpu:
    """One accelerator model."""

    name: str
    memory_gib: float  # visible to CUDA (what vLLM's gpu_memory_utilization is a fraction of)
    bf16_dense_tflops: float
    host_to_gpu_gbps: float  # practical host-to-device copy bandwidth, GB/s
    sources: Mapping[str, str]
    unverified: frozenset[str] = frozenset()


GPUS: Mapping[str, Gpu] = {
    "L40S": Gpu(
        name="L40S",
        memory_gib=44.4,
        bf16_dense_tflops=362.05,
        host_to_gpu_gbps=25.0,
        sources={
            "memory_gib": "reference curvine-lmcache.md 3 (one L40S: about 44.4 GiB visible)",
            "bf16_dense_tflops": "reference curvine-lmcache.md 4.2 ([3P] reprints of the NVIDIA L40S datasheet)",
            "host_to_gpu_gbps": "reference curvine-lmcache.md 4.2 (PCIe Gen4 x16, about 25 GB/s practical: UNVERIFIED)",
        },
        unverified=frozenset({"host_to_gpu_gbps"}),
    ),
    "H100": Gpu(
        name="H100",
        memory_gib=79.1,
        bf16_dense_tflops=989.4,
        host_to_gpu_gbps=50.0,
        sources={
            "memory_gib": "NVIDIA H100 SXM5 80 GB HBM3 (81,559 MiB reported by nvidia-smi); UNVERIFIED here",
            "bf16_dense_tflops": "NVIDIA H100 datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity, half dense",
            "host_to_gpu_gbps": "PCIe Gen5 x16 (64 GB/s per direction), about 50 GB/s practical: UNVERIFIED",
        },
        unverified=frozenset({"memory_gib", "host_to_gpu_gbps"}),
    ),
}


@dataclass(frozen=True)
class InstanceType:
    """A HyperPod instance type (`ml.*`)."""

    name: str
    gpus: int
    gpu: str | None  # key of GPUS
    vcpus: int
    memory_gib: float
    nvme_gb: int  # local instance store in total, decimal GB (0: none)
    network_gbps: float  # sustained per instance
    efa: bool
    price_per_hour: float | None  # SageMaker on-demand USD per hour, None when unknown
    regions: frozenset[str]
    sources: Mapping[str, str] = field(default_factory=dict)
    unverified: frozenset[str] = frozenset()

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def gpu_spec(self) -> Gpu:
        if self.gpu is None:
            raise ValueError(f"{self.name} has no GPU")
        return GPUS[self.gpu]


def _g6e(size: str, gpus: int, vcpus: int, memory: int, nvme: int, gbps: float, price: float | None) -> InstanceType:
    unverified = {"nvme_gb", "price_per_hour"}
    return InstanceType(
        name=f"ml.g6e.{size}",
        gpus=gpus,
        gpu="L40S",
        vcpus=vcpus,
        memory_gib=memory,
        nvme_gb=nvme,
        network_gbps=gbps,
        efa=size in {"8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"},
        price_per_hour=price,
        regions=_G6E_REGIONS,
        sources={
            "gpus": REF_HW,
            "vcpus": REF_HW,
            "memory_gib": REF_HW,
            "network_gbps": REF_HW,
            "nvme_gb": REF_NVME,
            "efa": REF_EFA,
            "price_per_hour": REF_PRICE,
            "regions": REF_REGIONS,
        },
        unverified=frozenset(unverified),
    )


def _cpu(family: str, size: str, vcpus: int, memory: int, gbps: float, regions: frozenset[str]) -> InstanceType:
    return InstanceType(
        name=f"ml.{family}.{size}",
        gpus=0,
        gpu=None,
        vcpus=vcpus,
        memory_gib=memory,
        nvme_gb=0,
        network_gbps=gbps,
        efa=False,
        price_per_hour=None,
        regions=regions,
        sources={
            "vcpus": REF_EC2,
            "memory_gib": REF_EC2,
            "network_gbps": REF_EC2,
            "regions": REF_REGIONS,
            "price_per_hour": "unknown: set catalog_overrides.<type>.price_per_hour from the AWS pricing page",
        },
        unverified=frozenset({"price_per_hour", "network_gbps"}),
    )


_INSTANCES = [
    # G6e: network is the baseline figure (xlarge/2xlarge burst "up to 20"); no ml price published for 16xlarge.
    _g6e("xlarge", 1, 4, 32, 250, 2.5, 2.61),
    _g6e("2xlarge", 1, 8, 64, 450, 5.0, 2.80),
    _g6e("4xlarge", 1, 16, 128, 600, 20.0, 3.76),
    _g6e("8xlarge", 1, 32, 256, 900, 25.0, 5.66),
    _g6e("16xlarge", 1, 64, 512, 1900, 35.0, None),
    _g6e("12xlarge", 4, 48, 384, 3800, 100.0, 13.12),
    _g6e("24xlarge", 4, 96, 768, 3800, 200.0, 18.83),
    _g6e("48xlarge", 8, 192, 1536, 7600, 400.0, 37.66),
    InstanceType(
        name="ml.p5.48xlarge",
        gpus=8,
        gpu="H100",
        vcpus=192,
        memory_gib=2048,
        nvme_gb=30720,
        network_gbps=3200.0,
        efa=True,
        price_per_hour=63.296,
        regions=_P5_REGIONS,
        sources={
            "gpus": "reference curvine-lmcache.md 4.3",
            "vcpus": "reference curvine-lmcache.md 4.3",
            "memory_gib": "reference curvine-lmcache.md 4.3 [3P]",
            "network_gbps": "reference curvine-lmcache.md 4.3",
            "nvme_gb": "reference curvine-lmcache.md 4.3 (8 x 3.84 TB, UNVERIFIED)",
            "efa": REF_EFA,
            "price_per_hour": REF_PRICE + " (after the 2025 P5 price cut)",
            "regions": REF_REGIONS,
        },
        unverified=frozenset({"memory_gib", "nvme_gb", "price_per_hour"}),
    ),
    *(
        _cpu("m5", size, vcpus, mem, gbps, _M5_2XL_REGIONS if size == "2xlarge" else _CPU_REGIONS)
        for size, vcpus, mem, gbps in [
            ("large", 2, 8, 0.75),
            ("xlarge", 4, 16, 1.25),
            ("2xlarge", 8, 32, 2.5),
            ("4xlarge", 16, 64, 5.0),
            ("8xlarge", 32, 128, 10.0),
            ("12xlarge", 48, 192, 12.0),
            ("16xlarge", 64, 256, 20.0),
            ("24xlarge", 96, 384, 25.0),
        ]
    ),
    *(
        _cpu("c5", size, vcpus, mem, gbps, _CPU_REGIONS)
        for size, vcpus, mem, gbps in [
            ("large", 2, 4, 0.75),
            ("xlarge", 4, 8, 1.25),
            ("2xlarge", 8, 16, 2.5),
            ("4xlarge", 16, 32, 5.0),
            ("9xlarge", 36, 72, 12.0),
            ("12xlarge", 48, 96, 12.0),
            ("18xlarge", 72, 144, 25.0),
            ("24xlarge", 96, 192, 25.0),
        ]
    ),
]

INSTANCE_TYPES: Mapping[str, InstanceType] = {i.name: i for i in _INSTANCES}

InstanceOverridable = Literal["nvme_gb", "price_per_hour", "network_gbps", "memory_gib"]


def overridable_fields(instance: InstanceType) -> list[str]:
    return sorted(instance.unverified)


def with_overrides(instance: InstanceType, overrides: Mapping[str, float | int]) -> InstanceType:
    """Return `instance` with its unverified facts replaced; callers validate names and types first."""
    known = {f.name for f in fields(InstanceType)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown catalog fields {sorted(unknown)}")
    if not overrides:
        return instance
    sources = dict(instance.sources)
    for name in overrides:
        sources[name] = "catalog_overrides in the environment file"
    return replace(instance, sources=sources, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Model:
    """Shape of a decoder model: what KV-cache and weight sizes follow from."""

    id: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    params_billion: float
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    mla: bool = False  # LMCache's fs connector cannot store MLA KV (reference curvine-lmcache.md 2.6)
    source: str = ""

    @property
    def dtype_bytes(self) -> int:
        return 2

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) x layers x KV heads x head dim x dtype bytes (reference curvine-lmcache.md 3)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params_billion * 1e9 * self.dtype_bytes


_MODEL_SRC = "reference curvine-lmcache.md 3 (config.json via citsjtu2020/LLM-Prof:sglang/Model_Config.md)"
_MODEL_3P = "reference curvine-lmcache.md 3 [3P]"

# params_billion: weights in GB from the same table divided by 2 bytes per bf16 parameter.
MODELS: Mapping[str, Model] = {
    m.id: m
    for m in [
        Model("Qwen/Qwen2-7B-Instruct", 28, 28, 4, 128, 7.6, source=_MODEL_SRC),
        Model("Qwen/Qwen2.5-7B-Instruct", 28, 28, 4, 128, 7.6, source=_MODEL_SRC),
        Model("Qwen/Qwen3-8B", 36, 32, 8, 128, 8.2, source=_MODEL_SRC),
        Model("Qwen/Qwen3-32B", 64, 64, 8, 128, 32.75, source=_MODEL_SRC),
        Model("meta-llama/Llama-3.1-8B-Instruct", 32, 32, 8, 128, 8.05, source=_MODEL_SRC),
        Model("meta-llama/Llama-3.3-70B-Instruct", 80, 64, 8, 128, 70.5, source=_MODEL_3P),
        Model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 28, 28, 4, 128, 7.6, source=_MODEL_3P),
        Model("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", 48, 40, 8, 128, 14.75, source=_MODEL_3P),
        Model("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 64, 40, 8, 128, 32.75, source=_MODEL_3P),
        Model("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", 32, 32, 8, 128, 8.05, source=_MODEL_3P),
        Model("mistralai/Mistral-7B-Instruct-v0.3", 32, 32, 8, 128, 7.25, source=_MODEL_3P),
    ]
}
