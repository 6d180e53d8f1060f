"""One model endpoint of a line of business: model source, placement, cache tiers, routing, serving mode."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.config.base import FieldError, PositiveInt, StrictModel, rfc1123_label
from kvtier.config.bench import BenchConfig
from kvtier.config.hyperpod import InstanceTypeName

ENDPOINT_NAME_MAX = 28
Routing = Literal["prefixaware", "kvaware", "session", "roundrobin"]
Mode = Literal["operator", "standalone"]
L2Backend = Literal["curvine", "tieredstorage", "none"]
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SECRET = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _model_id(value: str) -> str:
    if not _HF_ID.match(value):
        raise ValueError(f"'{value}' is not a model id; write it as <organisation>/<model>, like Qwen/Qwen3-8B")
    return value


def _secret_name(value: str | None) -> str | None:
    if value is not None and (len(value) > 253 or not _SECRET.match(value)):
        raise ValueError(f"'{value}' is not a Kubernetes Secret name; use lowercase letters, digits, '-' and '.'")
    return value


def _bucket(value: str) -> str:
    if not _BUCKET.match(value) or ".." in value:
        raise ValueError(f"'{value}' is not an S3 bucket name; use 3-63 lowercase letters, digits, '.' and '-'")
    return value


ModelId = Annotated[str, AfterValidator(_model_id)]


class HuggingFaceModel(StrictModel):
    source: Literal["huggingface"]
    id: ModelId
    # Name of an existing Secret (key `token`) in the LOB namespace, for gated models.
    token_secret: Annotated[str | None, AfterValidator(_secret_name)] = None
    revision: Annotated[str | None, Field(pattern=r"^[0-9a-f]{40}$")] = None  # a commit SHA pins the weights


class S3Model(StrictModel):
    source: Literal["s3"]
    id: ModelId  # the architecture, for the catalog (weights and KV sizes)
    bucket: Annotated[str, AfterValidator(_bucket)]
    prefix: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]
    region: str | None = None  # default: the environment's region


ModelSource = Annotated[HuggingFaceModel | S3Model, Field(discriminator="source")]


class ModelShape(StrictModel):
    """What KV-cache and weight sizes follow from, for a model the catalog does not list."""

    layers: PositiveInt
    attention_heads: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    params_billion: Annotated[float, Field(gt=0)]
    dtype: Literal["bfloat16", "float16"] = "bfloat16"


class CacheConfig(StrictModel):
    l1_gb: Annotated[float, Field(ge=0)] = 20.0  # LMCache pinned host DRAM per replica; 0 turns L1 off
    l2: L2Backend = "curvine"
    chunk_size: Annotated[int, Field(ge=16, le=4096)] = 256  # tokens per LMCache chunk (one file on L2)


class Autoscaling(StrictModel):
    """Operator mode passes this to the CRD's autoScalingSpec (KEDA); quota checks use `max_replicas`."""

    min_replicas: Annotated[int, Field(ge=1)] = 1
    max_replicas: Annotated[int, Field(ge=1)] = 5
    polling_interval_s: Annotated[int, Field(ge=1)] = 30
    cooldown_period_s: Annotated[int, Field(ge=0)] = 300

    @model_validator(mode="after")
    def _order(self) -> Autoscaling:
        if self.max_replicas < self.min_replicas:
            raise FieldError(
                "max_replicas", f"{self.max_replicas} is below min_replicas {self.min_replicas}", "use max >= min"
            )
        return self


class Endpoint(StrictModel):
    name: Annotated[str, rfc1123_label(ENDPOINT_NAME_MAX, "endpoint name (RFC 1123 label)")]
    model: ModelSource
    instance_type: InstanceTypeName
    replicas: Annotated[int, Field(ge=1)] = 1
    tensor_parallel: Annotated[int, Field(ge=1)] = 1
    max_model_len: Annotated[int, Field(ge=256)] = 16384
    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] = 0.9
    block_size: Literal[8, 16, 32, 64, 128] = 16  # vLLM's KV block (L0 prefix-cache granularity)
    image: str | None = None  # default per mode, see kvtier/versions.py
    cache: CacheConfig = CacheConfig()
    # intelligentRoutingSpec cannot change once set: in operator mode a new strategy replaces the endpoint.
    routing: Routing = "prefixaware"
    mode: Mode = "operator"
    autoscaling: Autoscaling | None = None
    bench: BenchConfig = BenchConfig()

    @property
    def max_replicas(self) -> int:
        return self.autoscaling.max_replicas if self.autoscaling else self.replicas
