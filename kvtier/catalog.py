"""Facts kvtier relies on: instance types, GPUs and models, each with its source.

Every number here comes from the source named next to it; docs/references.md lists them all with their upstream
sources. A field named in an entry's `unverified` set was not confirmed in a
primary source: config may override it (`catalog_overrides`), and only it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol

GIB = 1024**3
GB = 1000**3
COLLECTED = "2026-11"  # when the sources in docs/references.md were read: the date of every fact below


@dataclass(frozen=True)
class Fact:
    """One planning constant: its value and unit, where it comes from, when, and whether a primary source confirms it."""

    value: float
    unit: str
    source: str
    as_of: str = COLLECTED
    verified: bool = False


# --- Planning constants (used by kvtier.planner and the cross-checks; printed by `kvtier plan --json`) -------------
GPU_RESERVE_GIB = Fact(
    2.5,
    "GiB per GPU",
    "vLLM's peak activations in its profiling run plus non-torch memory (CUDA graphs, NCCL): reference "
    "curvine-lmcache.md 3 gives 1-3 GiB of activations; 2.5 GiB reproduces that section's KV estimates for "
    "Qwen2.5-7B, Llama-3.1-8B and Qwen3-8B on one L40S. vLLM logs the real figure ('GPU KV cache size')",
)
PREFILL_MFU = Fact(
    0.5,
    "fraction of dense BF16 peak",
    "assumption (no measurement on L40S found): prefill is compute bound and large-GEMM inference commonly reaches "
    "40-60% of peak; override per instance type with catalog_overrides.<type>.prefill_mfu after measuring",
)
# The blog's LMCache logs print sizes and rates in GiB (0.1028 "GB" for 1,925 tokens x 57,344 B = 110.4e6 B), so
# its "1.84 GB/s" read is 1.98 GB/s and its "9.60 GB/s" write 10.3 GB/s. Every rate here is decimal GB/s.
L2_NETWORK_EFFICIENCY = Fact(
    0.794,
    "fraction of the instance's network line rate",
    "AWS/Curvine blog: a cross-node L2 read of 110.4e6 B took 55.75 ms = 1.98 GB/s (LMCache logged 1.84 GiB/s) on "
    "ml.g6e.4xlarge, whose line rate is 20 Gbps = 2.5 GB/s (reference curvine-lmcache.md 1.13, 4.1); applying the "
    "same fraction to other sizes is an assumption",
)
L2_CALIBRATION_FILE_BYTES = Fact(
    256 * 57_344 + 28,
    "bytes",
    "the files of that read: LMCache chunks of 256 tokens (its default, the blog's) of Qwen2-7B (57,344 B a token) "
    "with LMCache's 28-byte chunk header (save_chunk_meta, its default); l2_network_efficiency includes what LMCache "
    "reading files of this size costs, so the planner scales it by a connector's efficiency over LMCache's at this "
    "size (kvtier/planner/speed.py, docs/benchmarks.md 'L2 read efficiency')",
)
L2_FUSE_CAP_GBPS = Fact(
    10.3,
    "GB/s",
    "AWS/Curvine blog: same-node L2 write through Curvine FUSE of 110.4e6 B in 10.71 ms = 10.3 GB/s (LMCache logged "
    "9.60 GiB/s); used as the ceiling of the FUSE path on instances with faster networks (assumption)",
)
L2_HIT_FIXED_S = Fact(
    0.102,
    "seconds per L2 hit",
    "calibrated from the AWS/Curvine blog's prompt sweep on ml.g5.4xlarge (A10G; Qwen2-7B, Pod A writes, Pod B "
    "reads): its 287 ms from L2 at 2,500 tokens, less four decode steps (5 output tokens; each reads the 15.2 GB of "
    "weights at the A10G's 600 GB/s: 101 ms), the last token's forward pass (the weights read once, 25 ms, and its "
    "FLOPs) and the bytes at the 25 Gbps burst rate x l2_network_efficiency, leaves 0.102 s per hit (LMCache's "
    "lookup of each chunk over FUSE, retrieve synchronisation); docs/planning.md derives it. A host-side path, so "
    "assumed the same on other GPUs (UNVERIFIED); measure it as the TTFT of an L2 hit minus the bytes' transfer time "
    "and the last token's forward pass, and set catalog_overrides.<type>.l2_hit_fixed_s",
)
SINGLE_FLOW_GBPS = Fact(
    5.0,
    "Gbps",
    "AWS doc 'EC2 instance network bandwidth': one flow (5-tuple) is limited to 5 Gbps outside a cluster placement "
    "group (reference curvine-lmcache.md 4.1); the pessimistic bound when a read uses one TCP connection",
    verified=True,
)
HOURS_PER_MONTH = Fact(730.0, "hours", "AWS pricing convention: 730 hours a month (365 x 24 / 12)", verified=True)
VLLM_HOST_BASE_GIB = Fact(
    4.0,
    "GiB per vLLM pod",
    "estimate (UNVERIFIED): vLLM's API server and engine-core processes (Python, tokenizer, CUDA runtime); "
    "measure with `kubectl top pod` and compare",
)
VLLM_HOST_PER_RANK_GIB = Fact(
    4.0,
    "GiB per tensor-parallel rank",
    "estimate (UNVERIFIED): one GPU worker process (torch, CUDA context, NCCL buffers). With the base, 8 GiB for "
    "TP=1; the reference deployment requested 32 GiB per pod including its LMCache L1 (aws-hyperpod.md 5)",
)
LMCACHE_STAGING_GIB = Fact(
    2.0,
    "GiB per vLLM pod",
    "with L1 off (l1_gb: 0) LMCache still stages L2 transfers in pinned host memory (LocalCPUBackend with "
    "local_cpu=False); per vLLM pod; kvtier splits it over the tensor-parallel ranks (max_local_cpu_size = this / TP, kvtier/serving.py)",
)
SYSTEM_RESERVE_GIB = Fact(
    6.0,
    "GiB per node",
    "kubelet reserve by the EKS AMI formula 11 MiB x max pods + 255 MiB (awslabs/amazon-eks-ami; 1.43 GiB at 110 "
    "pods), the 100 MiB eviction threshold, and about 4.5 GiB estimated for the OS, HyperPod agents and "
    "DaemonSets (CNI, kube-proxy, CSI node plugins); HyperPod's own reservation is UNVERIFIED",
)
# Requests of the DaemonSets (besides Curvine's and kvtier's) every GPU node runs, for the node-fit check
# (kvtier.rules.node_fit); each figure and its source in docs/references.md "Curvine on GPU nodes (issue 11)".
DAEMONSET_CPU_MILLIS = Fact(
    965,
    "millicores per GPU node",
    "chart defaults: aws-node 25m (amazon-vpc-cni-k8s charts/aws-vpc-cni values.yaml), kube-proxy 100m (EKS add-on, "
    "UNVERIFIED), eks-pod-identity-agent 0 (chart resources {}), ebs-csi-node 30m (3 containers x 10m, "
    "aws-ebs-csi-driver chart 2.64.0), s3-csi-node 30m (mountpoint-s3-csi-driver chart 2.7.0), fsx-csi-node 30m "
    "(aws-fsx-csi-driver chart 1.17.0), HyperPod health-monitoring-agent 500m (sagemaker-hyperpod-cli helm_chart), "
    "nvidia-device-plugin 0 (chart resources {}), plus 250m for agents whose sizes no source gives (assumption)",
    as_of="2026-12",
)
DAEMONSET_MEMORY_MIB = Fact(
    1368,
    "MiB per GPU node",
    "same sources: ebs-csi-node 104Mi (40 + 32 + 32), s3-csi-node 120Mi, fsx-csi-node 120Mi, health-monitoring-agent "
    "512Mi, the others none, plus 512Mi for agents whose sizes no source gives (assumption)",
    as_of="2026-12",
)
NODE_MEMORY_VISIBLE = Fact(
    0.97,
    "fraction of the nominal RAM",
    "assumption (UNVERIFIED): the kernel and firmware keep a few percent of an instance's nominal memory, so a node's "
    "memory capacity is below the catalog's GiB; check `kubectl get node -o jsonpath='{.status.capacity.memory}'`",
    as_of="2026-12",
)
# --- Disk of a GPU node's EBS volume (issue 38): the kubelet's and containerd's directories live on it (the lifecycle
# scripts put them under /opt/sagemaker), so emptyDirs, container layers and images share the group's `ebs_gb`.
WEIGHTS_DOWNLOAD_MARGIN = Fact(
    0.1,
    "fraction of the weights",
    "kvtier's margin over the safetensors a Hugging Face download writes (config, tokenizer and index files, the "
    "partial file of a download in progress); vLLM downloads only the *.safetensors weights when a repository has "
    "them (vllm/model_executor/model_loader/weight_utils.py `download_weights_from_hf`, docs/references.md)",
    as_of="2026-12",
)
ENGINE_SCRATCH_GIB = Fact(
    10.0,
    "GiB per engine pod",
    "estimate (UNVERIFIED): the engine container's writable layer: vLLM's torch.compile cache, Triton and FlashInfer "
    "JIT kernels, the Prometheus multi-process files in /tmp, logs; check `du` of the pod's overlay after a start",
    as_of="2026-12",
)
ENGINE_IMAGE_DISK_GB = Fact(
    42.0,
    "GB per engine image on a node",
    "estimate (UNVERIFIED for the pinned tags): vllm/vllm-openai unpacks to 28.6 GB (vllm-project/vllm#22377, "
    "2025-12) and its pull is about 12.6 GB compressed (vllm-project/vllm#27154), which containerd keeps in its "
    "content store besides the unpacked layers unless discard_unpacked_layers is set",
    as_of="2026-12",
)
NODE_OTHER_IMAGES_GB = Fact(
    10.0,
    "GB per GPU node",
    "estimate (UNVERIFIED): the Curvine runtime and CSI images, the AWS CLI (S3 adapters), the DaemonSets' images "
    "(CNI, kube-proxy, CSI drivers, HyperPod agents, NVIDIA device plugin) and pod logs",
    as_of="2026-12",
)
DISK_USABLE_FRACTION = Fact(
    0.85,
    "fraction of a node's EBS volume",
    "the kubelet's default hard eviction threshold imagefs.available<15% (nodefs.available<10% on the same file "
    "system) and its image garbage collection from 85% usage (imageGCHighThresholdPercent): above this share the node "
    "evicts pods (https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/); HyperPod's own "
    "kubelet settings are UNVERIFIED",
    as_of="2026-12",
)
# Pods per node by the EKS AMI's rule: ENIs x (IPv4 addresses per ENI - 1) + 2, as published in
# aws/amazon-vpc-cni-k8s@b5218838 misc/eni-max-pods.txt (EC2 names; the ml.* types are the same hardware).
ENI_MAX_PODS: Mapping[str, int] = {
    "ml.g6e.xlarge": 58,
    "ml.g6e.2xlarge": 58,
    "ml.g6e.4xlarge": 234,
    "ml.g6e.8xlarge": 234,
    "ml.g6e.12xlarge": 292,
    "ml.g6e.16xlarge": 737,
    "ml.g6e.24xlarge": 492,
    "ml.g6e.48xlarge": 492,
    "ml.p5.48xlarge": 100,
}
DEFAULT_MAX_PODS = 110  # nodeadm's fallback when it cannot look the type up (amazon-eks-ami eni_max_pods.go)
PLANNING_FACTS: Mapping[str, Fact] = {
    "gpu_reserve_gib": GPU_RESERVE_GIB,
    "prefill_mfu": PREFILL_MFU,
    "l2_network_efficiency": L2_NETWORK_EFFICIENCY,
    "l2_fuse_cap_gbps": L2_FUSE_CAP_GBPS,
    "l2_calibration_file_bytes": L2_CALIBRATION_FILE_BYTES,
    "l2_hit_fixed_s": L2_HIT_FIXED_S,
    "single_flow_gbps": SINGLE_FLOW_GBPS,
    "hours_per_month": HOURS_PER_MONTH,
    "vllm_host_base_gib": VLLM_HOST_BASE_GIB,
    "vllm_host_per_rank_gib": VLLM_HOST_PER_RANK_GIB,
    "lmcache_staging_gib": LMCACHE_STAGING_GIB,
    "system_reserve_gib": SYSTEM_RESERVE_GIB,
}

REF_HW = (
    "reference curvine-lmcache.md 4.1 (memory: pytorch/torchx PR #969; network: Karpenter zz_generated.bandwidth.go)"
)
REF_NVME = "reference curvine-lmcache.md 4.1 (AWS product page from memory; UNVERIFIED: read /opt/dlami/nvme on a node)"
REF_PRICE = "reference curvine-lmcache.md 4.1 [3P] SageMaker prices via the AWS Pricing API, collected 2026-11"
# System-group prices: not in the reference. Public repositories in the code index (collected 2026-11) quote the same
# SageMaker Training on-demand prices for us-east-1 from the AWS Pricing API; one of them pins ml.g6e.4xlarge at 3.76
# "VERIFIED 2026-07-02", matching REF_PRICE, so the two sets are on the same basis. HyperPod prices may differ.
REF_PRICE_CPU = (
    "[3P] SageMaker Training on-demand price, us-east-1, quoted from the AWS Pricing API by several public "
    "repositories (code index, collected 2026-11); HyperPod prices may differ: check aws.amazon.com/sagemaker/pricing"
)
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
    # Memory bandwidth, decimal GB/s: a forward pass reads every weight once (issue 36's TTFT floor).
    memory_gbps: float = 0.0
    # Dense FP8 tensor-core peak (issue 36): what an FP8 checkpoint's matmuls run at; None: no FP8 tensor cores.
    fp8_dense_tflops: float | None = None
    unverified: frozenset[str] = frozenset()
    as_of: str = COLLECTED


GPUS: Mapping[str, Gpu] = {
    "L40S": Gpu(
        name="L40S",
        memory_gib=44.4,
        bf16_dense_tflops=362.05,
        host_to_gpu_gbps=25.0,
        fp8_dense_tflops=733.0,
        memory_gbps=864.0,
        sources={
            "memory_gbps": "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): 48 GB GDDR6, 864 GB/s",
            "fp8_dense_tflops": "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): FP8 Tensor Core 733 TFLOPS "
            "dense, 1,466 with sparsity (Ada Lovelace fourth-generation tensor cores)",
            "memory_gib": "reference curvine-lmcache.md 3 (one L40S: about 44.4 GiB visible)",
            "bf16_dense_tflops": "reference curvine-lmcache.md 4.2 ([3P] reprints of the NVIDIA L40S datasheet)",
            "host_to_gpu_gbps": "reference curvine-lmcache.md 4.2 (PCIe Gen4 x16, about 25 GB/s practical: UNVERIFIED)",
        },
        unverified=frozenset({"host_to_gpu_gbps"}),
    ),
    "A10G": Gpu(
        name="A10G",
        memory_gib=22.0,
        bf16_dense_tflops=70.0,
        host_to_gpu_gbps=25.0,
        memory_gbps=600.0,
        sources={
            "memory_gbps": "[3P] baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference (A10G: 600 GB/s, shared "
            "with the A10)",
            "memory_gib": "24 GB GDDR6 (baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference); nvidia-smi shows "
            "about 23,028 MiB, of which CUDA sees about 22 GiB: UNVERIFIED",
            "bf16_dense_tflops": "[3P] baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference (A10G: 70 TFLOPS "
            "FP16/BF16 tensor, dense; the A10 has 125); NVIDIA publishes no A10G datasheet: UNVERIFIED",
            "host_to_gpu_gbps": "PCIe Gen4 x16, about 25 GB/s practical: UNVERIFIED",
            "fp8_dense_tflops": "None: the A10G is Ampere (GA102), whose tensor cores have no FP8 (NVIDIA Ampere GA102 "
            "whitepaper: FP16, BF16, TF32, INT8, INT4; FP8 arrives with Ada and Hopper); vLLM runs FP8 checkpoints "
            "there as weight-only FP8 (Marlin), matmuls in 16 bits",
        },
        unverified=frozenset({"memory_gib", "bf16_dense_tflops", "host_to_gpu_gbps"}),
    ),
    "H100": Gpu(
        name="H100",
        memory_gib=79.1,
        bf16_dense_tflops=989.4,
        host_to_gpu_gbps=50.0,
        fp8_dense_tflops=1978.9,
        memory_gbps=3350.0,
        sources={
            "memory_gbps": "NVIDIA H100 SXM5 datasheet: 3.35 TB/s HBM3",
            "fp8_dense_tflops": "NVIDIA H100 datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity, half dense",
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
    price_as_of: str | None = None  # when price_per_hour was collected
    # GPU types only: planning figures an environment may override once measured (catalog_overrides).
    prefill_mfu: float | None = None  # fraction of dense BF16 peak a prefill reaches
    l2_read_gbps: float | None = None  # GB/s one node reads from the shared L2 on other nodes (its NIC's share)
    l2_hit_fixed_s: float | None = None  # seconds an L2 hit costs beyond moving its bytes

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def gpu_spec(self) -> Gpu:
        if self.gpu is None:
            raise ValueError(f"{self.name} has no GPU")
        return GPUS[self.gpu]


def l2_read_gbps_model(network_gbps: float) -> float:
    """GB/s of a cross-node L2 read: the blog's fraction of the line rate, capped by the FUSE path."""
    return min(L2_NETWORK_EFFICIENCY.value * network_gbps / 8, L2_FUSE_CAP_GBPS.value)


_GPU_PLANNING_SOURCES = {
    "prefill_mfu": PREFILL_MFU.source,
    "l2_read_gbps": "min(l2_network_efficiency x network_gbps / 8, l2_fuse_cap_gbps): " + L2_NETWORK_EFFICIENCY.source,
    "l2_hit_fixed_s": L2_HIT_FIXED_S.source,
}
# What a GPU instance type's planning figures rest on; every one is an estimate an environment may override.
_GPU_PLANNING_UNVERIFIED = {"prefill_mfu", "l2_read_gbps", "l2_hit_fixed_s"}


def _g6e(size: str, gpus: int, vcpus: int, memory: int, nvme: int, gbps: float, price: float | None) -> InstanceType:
    unverified = {"nvme_gb", "price_per_hour", *_GPU_PLANNING_UNVERIFIED}
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
            "price_per_hour": REF_PRICE if price is not None else "unknown: no ml price published in the sources",
            "regions": REF_REGIONS,
            **_GPU_PLANNING_SOURCES,
        },
        unverified=frozenset(unverified),
        price_as_of=COLLECTED if price is not None else None,
        prefill_mfu=PREFILL_MFU.value,
        l2_read_gbps=l2_read_gbps_model(gbps),
        l2_hit_fixed_s=L2_HIT_FIXED_S.value,
    )


# G5 (A10G): the blog's prompt sweep ran on two ml.g5.4xlarge nodes. Memory and vCPUs: the AWS G5 product page (as
# quoted by public repositories in the code index); network: Karpenter's baseline (g5.4xlarge "up to 25 Gbps");
# prices: SageMaker on-demand quoted from the AWS Pricing API by public repositories on the same basis as REF_PRICE_CPU.
REF_G5_NET = "aws/karpenter-provider-aws@01a436f0:pkg/providers/instancetype/zz_generated.bandwidth.go (baseline)"
REF_G5_HW = "[3P] AWS G5 product page specifications (16 vCPU / 64 GiB; 48 vCPU / 192 GiB), quoted in the code index"
REF_G5_PRICE = (
    "[3P] SageMaker on-demand price, us-east-1, quoted from the AWS Pricing API by public repositories (code index, "
    "collected 2026-11; ml.g5.4xlarge 2.03, ml.g5.12xlarge 7.09); HyperPod prices may differ"
)
_G5_REGIONS = frozenset(
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
        "us-west-2",
    }
)
# Prefill on A10G, fitted to the blog's cold TTFT with its decode steps taken out (docs/planning.md).
G5_PREFILL_MFU = Fact(
    0.75,
    "fraction of dense BF16 peak",
    "calibrated: the AWS/Curvine blog's 774 ms cold at 2,500 tokens on ml.g5.4xlarge, less four decode steps (101 "
    "ms: 5 output tokens, weights read at 600 GB/s) and the forward pass's weight read (25 ms), is the prefill's "
    "FLOPs: Qwen2-7B's 6.51 B computed parameters (7.6 B less the embedding and the LM head, issue 36) reach 0.75 "
    "of the A10G's 70 TFLOPS (UNVERIFIED); docs/planning.md derives it",
)


def _g5(size: str, gpus: int, vcpus: int, memory: int, nvme: int, gbps: float, price: float) -> InstanceType:
    return InstanceType(
        name=f"ml.g5.{size}",
        gpus=gpus,
        gpu="A10G",
        vcpus=vcpus,
        memory_gib=memory,
        nvme_gb=nvme,
        network_gbps=gbps,
        efa=False,
        price_per_hour=price,
        regions=_G5_REGIONS,
        sources={
            "gpus": REF_G5_HW,
            "vcpus": REF_G5_HW,
            "memory_gib": REF_G5_HW,
            "network_gbps": REF_G5_NET,
            "nvme_gb": "AWS G5 product page from memory (1 x 600 GB; 1 x 3,800 GB): UNVERIFIED",
            "efa": "False: kvtier does not use EFA on G5 (not needed for the TCP L2 path)",
            "price_per_hour": REF_G5_PRICE,
            "regions": REF_REGIONS,
            **_GPU_PLANNING_SOURCES,
            "prefill_mfu": G5_PREFILL_MFU.source,
        },
        unverified=frozenset({"nvme_gb", "price_per_hour", *_GPU_PLANNING_UNVERIFIED}),
        price_as_of=COLLECTED,
        prefill_mfu=G5_PREFILL_MFU.value,
        l2_read_gbps=l2_read_gbps_model(gbps),
        l2_hit_fixed_s=L2_HIT_FIXED_S.value,
    )


def _cpu(
    family: str, size: str, vcpus: int, memory: int, gbps: float, regions: frozenset[str], price: float | None
) -> InstanceType:
    return InstanceType(
        name=f"ml.{family}.{size}",
        gpus=0,
        gpu=None,
        vcpus=vcpus,
        memory_gib=memory,
        nvme_gb=0,
        network_gbps=gbps,
        efa=False,
        price_per_hour=price,
        regions=regions,
        sources={
            "vcpus": REF_EC2,
            "memory_gib": REF_EC2,
            "network_gbps": REF_EC2,
            "regions": REF_REGIONS,
            "price_per_hour": REF_PRICE_CPU
            if price is not None
            else "unknown: set catalog_overrides.<type>.price_per_hour from the AWS pricing page",
        },
        unverified=frozenset({"price_per_hour", "network_gbps"}),
        price_as_of=COLLECTED if price is not None else None,
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
        price_as_of=COLLECTED,
        prefill_mfu=PREFILL_MFU.value,
        l2_read_gbps=l2_read_gbps_model(3200.0),
        l2_hit_fixed_s=L2_HIT_FIXED_S.value,
        sources={
            "gpus": "reference curvine-lmcache.md 4.3",
            "vcpus": "reference curvine-lmcache.md 4.3",
            "memory_gib": "reference curvine-lmcache.md 4.3 [3P]",
            "network_gbps": "reference curvine-lmcache.md 4.3",
            "nvme_gb": "reference curvine-lmcache.md 4.3 (8 x 3.84 TB, UNVERIFIED)",
            "efa": REF_EFA,
            "price_per_hour": REF_PRICE + " (after the 2025 P5 price cut)",
            "regions": REF_REGIONS,
            **_GPU_PLANNING_SOURCES,
        },
        unverified=frozenset({"memory_gib", "nvme_gb", "price_per_hour", *_GPU_PLANNING_UNVERIFIED}),
    ),
    _g5("4xlarge", 1, 16, 64, 600, 10.0, 2.03),
    _g5("12xlarge", 4, 48, 192, 3800, 40.0, 7.09),
    *(
        _cpu("m5", size, vcpus, mem, gbps, _M5_2XL_REGIONS if size == "2xlarge" else _CPU_REGIONS, price)
        for size, vcpus, mem, gbps, price in [
            ("large", 2, 8, 0.75, 0.115),
            ("xlarge", 4, 16, 1.25, 0.23),
            ("2xlarge", 8, 32, 2.5, 0.461),
            ("4xlarge", 16, 64, 5.0, 0.922),
            ("8xlarge", 32, 128, 10.0, None),
            ("12xlarge", 48, 192, 12.0, 2.765),
            ("16xlarge", 64, 256, 20.0, None),
            ("24xlarge", 96, 384, 25.0, 5.53),
        ]
    ),
    *(
        _cpu("c5", size, vcpus, mem, gbps, _CPU_REGIONS, price)
        for size, vcpus, mem, gbps, price in [
            ("large", 2, 4, 0.75, 0.102),
            ("xlarge", 4, 8, 1.25, 0.204),
            ("2xlarge", 8, 16, 2.5, 0.408),
            ("4xlarge", 16, 32, 5.0, 0.816),
            ("9xlarge", 36, 72, 12.0, 1.836),
            ("12xlarge", 48, 96, 12.0, None),
            ("18xlarge", 72, 144, 25.0, 3.672),
            ("24xlarge", 96, 192, 25.0, None),
        ]
    ),
]

INSTANCE_TYPES: Mapping[str, InstanceType] = {i.name: i for i in _INSTANCES}


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
    changed: dict[str, object] = dict(overrides)
    if "price_per_hour" in overrides:
        changed["price_as_of"] = "catalog_overrides"
    return replace(instance, sources=sources, **changed)  # type: ignore[arg-type]


# --- Model shape (issue 36) -----------------------------------------------------------------------------------------
# The weight formats kvtier plans: bytes per quantized parameter and vLLM's `--quantization` name (None: no flag, the
# 16-bit weights as stored). int4 AWQ/GPTQ: 4 bits plus one 16-bit scale (and a 4-bit zero point) per 128 weights;
# MXFP4: 4 bits plus one 8-bit scale per 32 weights (OCP MX spec). The embedding and the LM head stay 16-bit in every
# quantized checkpoint kvtier lists (their config.json `quantization_config`: `ignore`/`modules_to_not_convert`), so
# weights = quantized params x bytes + embedding and head x 2. MXFP4 (gpt-oss) quantizes the MoE experts only: its
# `modules_to_not_convert` also keeps attention and the router in BF16. vLLM names: vllm@v0.32.0
# vllm/model_executor/layers/quantization/__init__.py `QuantizationMethods` (docs/references.md "Model shapes (issue 36)").
WeightFormat = Literal["bf16", "fp16", "fp8", "awq", "gptq", "mxfp4"]


@dataclass(frozen=True)
class WeightFormatSpec:
    bytes_per_param: float
    quantization: str | None  # vLLM `--quantization`
    fp8_matmul: bool = False  # the GEMMs run in FP8 where the GPU has FP8 tensor cores
    experts_only: bool = False  # only the routed experts are quantized; everything else stays 16-bit


WEIGHT_FORMATS: Mapping[str, WeightFormatSpec] = {
    "bf16": WeightFormatSpec(2.0, None),
    "fp16": WeightFormatSpec(2.0, None),
    "fp8": WeightFormatSpec(1.0, "fp8", fp8_matmul=True),
    "awq": WeightFormatSpec(0.5 + 2.5 / 128, "awq"),
    "gptq": WeightFormatSpec(0.5 + 2.5 / 128, "gptq"),
    "mxfp4": WeightFormatSpec(0.5 + 1 / 32, "mxfp4", experts_only=True),
}
# vLLM `--kv-cache-dtype` values kvtier accepts: accepted by vLLM 0.32.0 (vllm/config/cache.py `CacheDType`) and by
# the operator image's vLLM 0.11.1 (same file at v0.11.1). `fp8` is `fp8_e4m3` on CUDA.
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
AttentionKind = Literal["gqa", "mha", "mla"]


def kv_dtype_bytes(kv_cache_dtype: str, dtype_bytes: int = 2) -> int:
    """Bytes of one KV element: `auto` is the model's dtype, every fp8 variant one byte."""
    return dtype_bytes if kv_cache_dtype == "auto" else 1


@dataclass(frozen=True)
class Model:
    """Shape of a decoder model: what KV-cache and weight sizes and prefill FLOPs follow from."""

    id: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    params_billion: float  # total parameters (every expert of a mixture-of-experts model)
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    source: str = ""
    as_of: str = COLLECTED
    # The longest max_model_len vLLM starts with (its derived max_model_len: config.json `max_position_embeddings`,
    # times a rope_scaling factor if any); None when unknown, and then max_model_len is not checked against it.
    context_length: int | None = None
    context_source: str = ""
    # Embedding and LM head (config.json vocab_size x hidden_size, twice unless tie_word_embeddings): a prefill looks
    # the embedding up and runs the head only where it samples, so neither counts as prefill FLOPs. None: unknown.
    vocab_size: int | None = None
    hidden_size: int | None = None
    tied_embeddings: bool = False
    # Mixture of experts: active parameters directly, or from the experts (each SwiGLU expert 3 x hidden x
    # moe_intermediate_size, in `moe_layers` layers, default all); shared experts are always active.
    active_params_billion: float | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    shared_experts: int = 0
    moe_intermediate_size: int | None = None
    moe_layers: int | None = None
    weight_format: WeightFormat | None = None  # None: the 16-bit `dtype` as stored
    # Attention: gqa (mha is gqa with kv_heads == attention_heads); mla stores one latent of kv_lora_rank +
    # qk_rope_head_dim per layer per token (DeepSeek-V2), whatever the head count.
    attention: AttentionKind = "gqa"
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # Sliding-window (hybrid) attention: `local_layers` of the layers attend to the last `sliding_window` tokens only.
    sliding_window: int | None = None
    local_layers: int = 0
    # The endpoint's `kv_cache_dtype` (planner/shapes.py sets it): what every tier's bytes per token follow.
    kv_cache_dtype: KvCacheDtype = "auto"

    @property
    def dtype_bytes(self) -> int:
        return 2

    @property
    def format(self) -> WeightFormat:
        return self.weight_format or ("fp16" if self.dtype == "float16" else "bf16")

    @property
    def format_spec(self) -> WeightFormatSpec:
        return WEIGHT_FORMATS[self.format]

    @property
    def kv_element_bytes(self) -> int:
        return kv_dtype_bytes(self.kv_cache_dtype, self.dtype_bytes)

    @property
    def kv_elements_per_layer(self) -> int:
        """Elements of one token's KV in one layer: K and V of every KV head, or MLA's one latent."""
        if self.attention == "mla":
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return 2 * self.kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """GQA/MHA: 2 (K and V) x layers x KV heads x head dim x KV dtype bytes (reference curvine-lmcache.md 3);
        MLA: layers x (kv_lora_rank + qk_rope_head_dim) x KV dtype bytes. Sliding-window layers count every token:
        with a connector vLLM turns its hybrid KV cache manager off (LMCache) and the connector stores every layer
        of every token (docs/planning.md "KV arithmetic per model kind")."""
        return self.layers * self.kv_elements_per_layer * self.kv_element_bytes

    @property
    def params(self) -> float:
        return self.params_billion * 1e9

    @property
    def embedding_params(self) -> float:
        """Embedding plus LM head parameters (0 when the shape does not say)."""
        if self.vocab_size is None or self.hidden_size is None:
            return 0.0
        return float(self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2))

    @property
    def active_params(self) -> float:
        """Parameters one token runs through: all of a dense model; the active experts' share of a MoE."""
        if self.active_params_billion is not None:
            return self.active_params_billion * 1e9
        if self.experts and self.experts_per_token and self.expert_params:
            return self.params - self.expert_params * (self.experts - self.experts_per_token) / self.experts
        return self.params

    @property
    def computed_params(self) -> float:
        """Parameters whose matmuls a prefill runs per token: active ones less the embedding and the LM head."""
        return self.active_params - self.embedding_params

    @property
    def expert_params(self) -> float:
        """Parameters of the routed experts (each SwiGLU expert 3 x hidden x moe_intermediate_size, in `moe_layers`
        layers); 0 when the shape does not say."""
        if self.experts and self.moe_intermediate_size and self.hidden_size:
            per_expert = 3 * self.hidden_size * self.moe_intermediate_size
            return float((self.moe_layers or self.layers) * self.experts * per_expert)
        return 0.0

    @property
    def weight_bytes(self) -> float:
        """Quantized parameters x the format's bytes, the 16-bit rest (embedding and head; for an experts-only format
        everything but the experts) x 2."""
        spec = self.format_spec
        if not spec.quantization:
            return self.params * spec.bytes_per_param
        quantized = self.expert_params if spec.experts_only else self.params - self.embedding_params
        return quantized * spec.bytes_per_param + (self.params - quantized) * self.dtype_bytes

    @property
    def linear_flops_per_token(self) -> float:
        """2 x computed parameters: one multiply and one add per weight per token (forward pass)."""
        return 2 * self.computed_params

    @property
    def attention_flops_coefficient(self) -> float:
        """Causal self-attention of an N-token prompt costs this x N^2 FLOPs.

        QK^T and AV cost 4 x S x T x (heads x head dim) per layer for S queries over T keys; with a causal mask a
        prompt of N tokens has N^2 / 2 query-key pairs, so 2 x layers x heads x head dim x N^2.
        """
        return 2 * self.layers * self.attention_heads * self.head_dim

    def prefill_flops(self, tokens: int) -> float:
        """FLOPs to prefill a prompt of `tokens` tokens from scratch."""
        return self.linear_flops_per_token * tokens + self.attention_flops_coefficient * tokens * tokens


class ShapeLike(Protocol):
    """What a LOB file's `models.<id>` entry provides (kvtier.config.endpoint.ModelShape)."""

    @property
    def layers(self) -> int: ...
    @property
    def attention_heads(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def params_billion(self) -> float: ...
    @property
    def dtype(self) -> Literal["bfloat16", "float16"]: ...
    @property
    def context_length(self) -> int | None: ...
    @property
    def shape_extras(self) -> Mapping[str, Any]: ...


# The optional facts (issue 36) a LOB file's `models.<id>` may give, copied onto the Model as they are.
SHAPE_EXTRAS = (
    "vocab_size",
    "hidden_size",
    "tied_embeddings",
    "active_params_billion",
    "experts",
    "experts_per_token",
    "shared_experts",
    "moe_intermediate_size",
    "moe_layers",
    "weight_format",
    "attention",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "sliding_window",
    "local_layers",
)


class UnknownModelError(LookupError):
    """Neither the catalog nor the LOB file describes a model."""


# Prefill FLOPs: 2 x parameters per token plus 4 x S x T x (heads x head dim) per layer for attention (PaLM, Chowdhery
# et al. 2022, appendix B: 6N + 12 L H Q T per training token = 3 x the forward pass; also fergusfinn.com/talks/
# inference-arithmetic), halved for the causal mask of a prefill.
REF_FLOPS = "PaLM (arXiv 2204.02311) appendix B forward FLOPs 2N + 4LHQT per token, attention halved by the causal mask"
_MODEL_SRC = "reference curvine-lmcache.md 3 (config.json via citsjtu2020/LLM-Prof:sglang/Model_Config.md)"
_MODEL_3P = "reference curvine-lmcache.md 3 [3P]"

# Context lengths: config.json `max_position_embeddings` of each checkpoint (docs/references.md "Configuration and
# validate (issue 29)"): read in a verbatim copy of config.json where one is in the code index, else as published by
# Xinference's model registry [3P], which agrees with it wherever both exist.
_CTX_CONFIG = "config.json max_position_embeddings, verbatim copy in citsjtu2020/LLM-Prof:sglang/Model_Config.md"
_CTX_3P = "[3P] config.json max_position_embeddings as xorbitsai/inference llm_family.json context_length lists it"

# params_billion: weights in GB from the same table divided by 2 bytes per bf16 parameter. vocab_size and hidden_size
# (embedding and LM head, none tied): config.json, verbatim copies in citsjtu2020/LLM-Prof@8434c8d1:sglang/
# Model_Config.md for Qwen2.5-7B (Qwen2-7B and the R1 Qwen-7B distill share its vocabulary and width), Qwen2.5-14B/32B
# (the R1 Qwen distills), Qwen3-8B, Qwen3-32B and Llama-3.1-8B (Llama-3.3-70B: 8,192 wide [3P]); Mistral-7B-v0.3's
# 32,768 x 4,096 [3P] (docs/references.md "Model shapes (issue 36)").
_SHAPES = [
    Model("Qwen/Qwen2-7B-Instruct", 28, 28, 4, 128, 7.6, source=_MODEL_SRC, vocab_size=152064, hidden_size=3584),
    Model("Qwen/Qwen2.5-7B-Instruct", 28, 28, 4, 128, 7.6, source=_MODEL_SRC, vocab_size=152064, hidden_size=3584),
    Model("Qwen/Qwen3-8B", 36, 32, 8, 128, 8.2, source=_MODEL_SRC, vocab_size=151936, hidden_size=4096),
    Model("Qwen/Qwen3-32B", 64, 64, 8, 128, 32.75, source=_MODEL_SRC, vocab_size=151936, hidden_size=5120),
    Model(
        "meta-llama/Llama-3.1-8B-Instruct", 32, 32, 8, 128, 8.05, source=_MODEL_SRC, vocab_size=128256, hidden_size=4096
    ),
    Model(
        "meta-llama/Llama-3.3-70B-Instruct", 80, 64, 8, 128, 70.5, source=_MODEL_3P, vocab_size=128256, hidden_size=8192
    ),
    Model(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        28,
        28,
        4,
        128,
        7.6,
        source=_MODEL_3P,
        vocab_size=152064,
        hidden_size=3584,
    ),
    Model(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        48,
        40,
        8,
        128,
        14.75,
        source=_MODEL_3P,
        vocab_size=152064,
        hidden_size=5120,
    ),
    Model(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        64,
        40,
        8,
        128,
        32.75,
        source=_MODEL_3P,
        vocab_size=152064,
        hidden_size=5120,
    ),
    Model(
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        32,
        32,
        8,
        128,
        8.05,
        source=_MODEL_3P,
        vocab_size=128256,
        hidden_size=4096,
    ),
    Model(
        "mistralai/Mistral-7B-Instruct-v0.3", 32, 32, 8, 128, 7.25, source=_MODEL_3P, vocab_size=32768, hidden_size=4096
    ),
]
# Context lengths: each checkpoint's config.json `max_position_embeddings` (docs/references.md "Configuration and
# validate (issue 29)"), read in a verbatim copy of config.json where the code index has one, else as Xinference's
# model registry lists it [3P] (which agrees with the copies wherever both exist). None of these checkpoints has a
# rope_scaling factor vLLM applies (Llama 3.1's rope_type llama3 is left unscaled), so this is vLLM's limit.
_CTX_COPY = "config.json max_position_embeddings, verbatim copy in citsjtu2020/LLM-Prof:sglang/Model_Config.md"
_CTX_3P = "[3P] config.json max_position_embeddings as xorbitsai/inference llm_family.json context_length lists it"
_CONTEXT: Mapping[str, tuple[int, str]] = {
    "Qwen/Qwen2-7B-Instruct": (32768, _CTX_3P),
    "Qwen/Qwen2.5-7B-Instruct": (32768, _CTX_3P),
    "Qwen/Qwen3-8B": (40960, _CTX_COPY),
    "Qwen/Qwen3-32B": (40960, _CTX_COPY),
    "meta-llama/Llama-3.1-8B-Instruct": (131072, _CTX_COPY + " (of Llama-3.1-8B, the same architecture); " + _CTX_3P),
    "meta-llama/Llama-3.3-70B-Instruct": (131072, _CTX_3P),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": (131072, _CTX_3P),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": (131072, _CTX_3P),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": (131072, _CTX_3P),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": (131072, _CTX_3P),
    "mistralai/Mistral-7B-Instruct-v0.3": (32768, _CTX_3P),
}

# The 2026 catalog (issue 36): mixture-of-experts, FP8 and MXFP4 checkpoints, MLA and sliding-window attention. Each
# fact and where it was read: docs/references.md "Model shapes (issue 36)".
_QWEN3_MOE = (
    "config.json of Qwen3-30B-A3B, verbatim copy in citsjtu2020/LLM-Prof@8434c8d1:sglang/Model_Config.md; 30.5 B total "
    "and 262,144 tokens: the 2507 model card [3P]"
)


def _qwen3_moe(model_id: str, weight_format: WeightFormat | None, source: str) -> Model:
    return Model(
        model_id,
        48,
        32,
        4,
        128,
        30.5,
        vocab_size=151936,
        hidden_size=2048,
        experts=128,
        experts_per_token=8,
        moe_intermediate_size=768,
        weight_format=weight_format,
        source=source,
        context_length=262144,  # the 2507 release's max_position_embeddings (model card: 262,144 native)
        context_source="max_position_embeddings 262144: [3P] the 2507 model card's 262,144 tokens natively",
    )


_MOE_SHAPES = [
    _qwen3_moe("Qwen/Qwen3-30B-A3B-Instruct-2507", None, _QWEN3_MOE),
    _qwen3_moe(
        "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8",
        "fp8",
        _QWEN3_MOE + "; FP8 block-wise (quant_method fp8), embedding and head 16-bit: UNVERIFIED (model card not read)",
    ),
    Model(
        "openai/gpt-oss-20b",
        24,
        64,
        8,
        64,
        20.9,
        vocab_size=201088,
        hidden_size=2880,
        active_params_billion=3.6,
        experts=32,
        experts_per_token=4,
        moe_intermediate_size=2880,
        weight_format="mxfp4",
        sliding_window=128,
        local_layers=12,
        context_length=131072,
        source="[3P] config.json copy of openai/gpt-oss-20b (layer_types alternate sliding_attention/full_attention) and "
        "a quote of its quantization_config (mxfp4, experts only); 21 B parameters, 3.6 B active",
        context_source="[3P] config.json copy of openai/gpt-oss-20b: max_position_embeddings 131072",
    ),
    Model(
        # MLA: head_dim is the mean of the query-key (qk_nope 128 + rope 64) and value (128) head dims, for attention
        # FLOPs; the KV is one latent of kv_lora_rank + qk_rope_head_dim per layer.
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        27,
        16,
        16,
        160,
        15.7,
        vocab_size=102400,
        hidden_size=2048,
        active_params_billion=2.4,
        experts=64,
        experts_per_token=6,
        shared_experts=2,
        moe_intermediate_size=1408,
        moe_layers=26,
        attention="mla",
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        context_length=163840,
        source="[3P] the DeepSeek-V2-Lite-Chat model card as copied (16 B / 15.7 B total, 2.4 B active, 27 layers, "
        "kv_lora_rank 512, 2 shared + 64 routed experts, 6 active); qk_rope_head_dim 64 and vocab 102,400 UNVERIFIED",
        context_source="[3P] max_position_embeddings 163840 (YaRN 40 x 4,096), UNVERIFIED; the release says 32k",
    ),
    Model(
        "mistralai/Mistral-Small-24B-Instruct-2501",
        40,
        32,
        8,
        128,
        23.6,
        vocab_size=131072,
        hidden_size=5120,
        context_length=32768,
        source="params.json and model.safetensors.index.json copies of mistralai/Mistral-Small-24B-Instruct-2501 "
        "(Mistral Small 3: 40 layers, 32/8 heads of 128, vocab 131,072; 47.14e9 bytes of BF16 = 23.6 B)",
        context_source="max_position_embeddings 32768: the params.json copy's max_seq_len",
    ),
    Model(
        "google/gemma-3-27b-it",
        62,
        32,
        16,
        128,
        27.4,
        vocab_size=262208,
        hidden_size=5376,
        tied_embeddings=True,
        sliding_window=1024,
        local_layers=52,
        context_length=131072,
        source="google/gemma-3-27b-it text_config (sliding_window 1024, every sixth layer global: 10 of 62): "
        "UNVERIFIED, no readable copy of its config.json found",
        context_source="max_position_embeddings 131072: [3P] the Google AI Studio listing's 131.1K tokens",
    ),
]
MODELS: Mapping[str, Model] = {
    **{m.id: replace(m, context_length=_CONTEXT[m.id][0], context_source=_CONTEXT[m.id][1]) for m in _SHAPES},
    **{m.id: m for m in _MOE_SHAPES},
}


def resolve_model(model_id: str, described: Mapping[str, ShapeLike]) -> Model:
    """The shape of `model_id`: the LOB file's description (`models.<id>`) first, else the catalog's.

    A LOB describes models the catalog lacks, and may correct a catalog entry for its own checkpoint.
    """
    shape = described.get(model_id)
    if shape is not None:
        known = MODELS.get(model_id)
        context = shape.context_length or (known.context_length if known is not None else None)
        return Model(
            id=model_id,
            layers=shape.layers,
            attention_heads=shape.attention_heads,
            kv_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            params_billion=shape.params_billion,
            dtype=shape.dtype,
            source=f"the LOB file (models.{model_id})",
            as_of="config",
            context_length=context,
            context_source=(
                f"the LOB file (models.{model_id}.context_length)"
                if shape.context_length
                else (known.context_source if known is not None else "")
            ),
            **shape.shape_extras,
        )
    if model_id in MODELS:
        return MODELS[model_id]
    raise UnknownModelError(model_id)


def as_served(model: Model, kv_cache_dtype: KvCacheDtype, weight_format: WeightFormat | None) -> Model:
    """The model as an endpoint serves it: its KV cache dtype, and the weight format vLLM is told (issue 36)."""
    return replace(model, kv_cache_dtype=kv_cache_dtype, weight_format=weight_format or model.weight_format)


# --- Availability Zones -------------------------------------------------------------------------------------------

REF_ZONES = "cfn-lint 1.58.0 cfnlint/helpers.py AVAILABILITY_ZONES (lint data; zone names as AWS lists them)"
REF_ZONE_IDS = "https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html (AZ IDs such as use1-az1)"
# Zone letters of every region an instance type of the catalog is offered in: a zone name is region + letter.
ZONE_LETTERS: dict[str, str] = {
    "ap-northeast-1": "abcd",
    "ap-northeast-2": "abcd",
    "ap-south-1": "abc",
    "ap-south-2": "abc",
    "ap-southeast-1": "abc",
    "ap-southeast-2": "abc",
    "ap-southeast-3": "abc",
    "ap-southeast-4": "abc",
    "ca-central-1": "abcd",
    "eu-central-1": "abc",
    "eu-north-1": "abc",
    "eu-south-2": "abc",
    "eu-west-1": "abc",
    "eu-west-2": "abc",
    "sa-east-1": "abc",
    "us-east-1": "abcdef",
    "us-east-2": "abc",
    "us-west-1": "ac",
    "us-west-2": "abcd",
}
_DIRECTIONS = {
    "north": "n",
    "south": "s",
    "east": "e",
    "west": "w",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}


def zone_names(region: str) -> list[str]:
    """The zone names of `region` (empty for a region the catalog does not know)."""
    return [region + letter for letter in ZONE_LETTERS.get(region, "")]


def zone_id_prefix(region: str) -> str | None:
    """The prefix of `region`'s AZ IDs (us-west-2 -> usw2, ap-northeast-1 -> apne1), or None when the name does not
    follow AWS's <area>-<direction>-<number> form. AZ IDs name the same physical zone in every account, where zone
    names are mapped per account (REF_ZONE_IDS)."""
    parts = region.split("-")
    if len(parts) != 3 or parts[1] not in _DIRECTIONS or not parts[2].isdigit():
        return None
    return parts[0] + _DIRECTIONS[parts[1]] + parts[2]
