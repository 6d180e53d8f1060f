"""One model endpoint of a line of business: model source, placement, cache tiers, routing, serving mode."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.catalog import INSTANCE_TYPES, SHAPE_EXTRAS, AttentionKind, KvCacheDtype, WeightFormat
from kvtier.config.adapters import Adapter, LoraLimits, S3Adapter, check_adapters
from kvtier.config.base import FieldError, Items, KmsKeyArn, PinnedImage, PositiveFloat, StrictModel, rfc1123_label
from kvtier.config.bench import BenchConfig
from kvtier.config.hyperpod import InstanceTypeName

ENDPOINT_NAME_MAX = 28
MIN_MODEL_LEN = 256  # the shortest max_model_len kvtier accepts
# The longest a request may run on a standalone endpoint (`max_request_seconds`) unless its file says otherwise: the
# router cuts a request there, and a stopping replica waits that long for its streams (issue 38, docs/endpoints.md).
DEFAULT_MAX_REQUEST_SECONDS = 600
Routing = Literal["prefixaware", "kvaware", "session", "roundrobin", "poolaware"]
Mode = Literal["operator", "standalone"]
# vLLM `--dtype` (weights and KV): `auto` takes the model config's dtype. Part of the L2 identity.
Dtype = Literal["auto", "bfloat16", "float16"]
# Which OpenAI API the endpoint's clients call: sets the operator's invocationEndpoint, and kvaware routing (operator
# mode only) needs `completions`: it tokenizes only the `prompt` field (docs/references.md, kvtier/rules/routing.py).
Api = Literal["chat", "completions"]
L2Backend = Literal["curvine", "tieredstorage", "none"]
# Who moves KV between the tiers: LMCache's vLLM connector (L1 LMCache CPU, L2 its `fs://` files), or vLLM's own
# OffloadingConnector + TieringOffloadingSpec (L1 vLLM's CPU tier, L2 its `fs` secondary tier): docs/l2.md. Each is a
# module of kvtier/connectors/, which says what it supports (kvtier/rules/l2.py reports its refusals).
Connector = Literal["lmcache", "vllm"]
# A Hugging Face repo id as the Hub accepts it (huggingface_hub `validate_repo_id`, docs/references.md): ASCII letters,
# digits, '-', '_' and '.', each part at most 96 characters, starting and ending with a letter, digit or '_', no '--'
# or '..', not ending in '.git'. kvtier also requires the organisation (`<organisation>/<model>`).
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HF_ID = re.compile(rf"{_HF_PART}/{_HF_PART}", re.ASCII)
_HF_CHARS = re.compile(r"[A-Za-z0-9_./-]", re.ASCII)
_SECRET = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_COMMIT = re.compile(r"[0-9a-f]{40}", re.ASCII)  # a Hugging Face (git) commit SHA: the only immutable revision
_WEIGHTS_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Amazon Managed Prometheus workspace URL, the only Prometheus server the CRD accepts (autoScalingSpec).
_AMP_URL = r"^https://aps-workspaces\.[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.amazonaws\.com/workspaces/ws-[a-zA-Z0-9-]+$"


def _model_id(value: str) -> str:
    fix = "write it as <organisation>/<model> in ASCII letters, digits, '-', '_' and '.', like Qwen/Qwen3-8B"
    odd = next((c for c in value if not _HF_CHARS.fullmatch(c)), None)
    if odd is not None:
        raise ValueError(f"'{value}' is not a model id: it contains {odd!r}; {fix}")
    if not _HF_ID.fullmatch(value) or "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(f"'{value}' is not a model id; {fix} (no '--', '..' or trailing '.git')")
    return value


def _secret_name(value: str | None) -> str | None:
    if value is not None and (len(value) > 253 or not _SECRET.match(value)):
        raise ValueError(f"'{value}' is not a Kubernetes Secret name; use lowercase letters, digits, '-' and '.'")
    return value


def _weights_version(value: str | None) -> str | None:
    if value is not None and not _WEIGHTS_VERSION.match(value):
        raise ValueError(
            f"'{value}' is not a weights version; use 1-64 letters, digits, '.', '_' or '-', like 2026-12-01 or v2"
        )
    return value


def _revision(value: str | None) -> str | None:
    if value is not None and not _COMMIT.fullmatch(value):
        raise ValueError(
            f"'{value}' is not a commit (a branch or tag can move, and the L2 would mix KV of two builds); use the "
            "40-hex commit SHA from the model's Hugging Face page (Files and versions, History)"
        )
    return value


def _bucket(value: str) -> str:
    if not _BUCKET.match(value) or ".." in value:
        raise ValueError(f"'{value}' is not an S3 bucket name; use 3-63 lowercase letters, digits, '.' and '-'")
    return value


ModelId = Annotated[str, AfterValidator(_model_id)]
# Bumped by the user when weights change under the same id, revision or S3 prefix: it is part of the endpoint's L2
# identity (kvtier/connectors/), so the new weights start on an empty L2 directory instead of the old weights' KV.
WeightsVersion = Annotated[str | None, AfterValidator(_weights_version)]


class HuggingFaceModel(StrictModel):
    source: Literal["huggingface"]
    id: ModelId
    # Name of an existing Secret (key `token`) in the LOB namespace, for gated models.
    token_secret: Annotated[str | None, AfterValidator(_secret_name)] = None
    revision: Annotated[str | None, AfterValidator(_revision)] = None  # a commit SHA pins the weights
    weights_version: WeightsVersion = None


class S3Model(StrictModel):
    source: Literal["s3"]
    id: ModelId  # the architecture, for the catalog (weights and KV sizes)
    bucket: Annotated[str, AfterValidator(_bucket)]
    prefix: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]
    region: str | None = None  # default: the environment's region
    weights_version: WeightsVersion = None  # bump when re-uploading weights under the same prefix
    # The bucket's SSE-KMS key (a customer managed key): the readers get kms:Decrypt on it through S3 only (issue 37).
    kms_key_arn: KmsKeyArn = None


ModelSource = Annotated[HuggingFaceModel | S3Model, Field(discriminator="source")]


class ModelShape(StrictModel):
    """What KV-cache and weight sizes follow from, for a model the catalog does not list. The upper bounds are far
    above any released decoder (kvtier's own sanity limits, docs/configuration.md): a value beyond them is a typo, and
    would otherwise surface as a misleading fit error (infinite weights, zero KV tokens)."""

    layers: Annotated[int, Field(ge=1, le=1000)]
    attention_heads: Annotated[int, Field(ge=1, le=1024)]
    kv_heads: Annotated[int, Field(ge=1, le=1024)]
    head_dim: Annotated[int, Field(ge=1, le=1024)]
    params_billion: Annotated[float, Field(gt=0, le=10_000)]
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    # vLLM's longest max_model_len for this checkpoint: config.json `max_position_embeddings` (times its rope_scaling
    # factor, if any). Optional: without it, max_model_len is not checked against the model.
    context_length: Annotated[int | None, Field(ge=MIN_MODEL_LEN, le=100_000_000)] = None
    # Issue 36 (kvtier/catalog.py `Model` says what each means; docs/configuration.md "models"): embedding and head,
    # mixture of experts, weight format, attention kind.
    vocab_size: Annotated[int | None, Field(ge=1, le=10_000_000)] = None
    hidden_size: Annotated[int | None, Field(ge=1, le=1_000_000)] = None
    tied_embeddings: bool = False
    active_params_billion: Annotated[float | None, Field(gt=0, le=10_000)] = None
    experts: Annotated[int | None, Field(ge=1, le=100_000)] = None
    experts_per_token: Annotated[int | None, Field(ge=1, le=100_000)] = None
    shared_experts: Annotated[int, Field(ge=0, le=100_000)] = 0
    moe_intermediate_size: Annotated[int | None, Field(ge=1, le=1_000_000)] = None
    moe_layers: Annotated[int | None, Field(ge=1, le=1000)] = None
    weight_format: WeightFormat | None = None
    attention: AttentionKind = "gqa"
    kv_lora_rank: Annotated[int | None, Field(ge=1, le=100_000)] = None
    qk_rope_head_dim: Annotated[int | None, Field(ge=1, le=100_000)] = None
    sliding_window: Annotated[int | None, Field(ge=1, le=100_000_000)] = None
    local_layers: Annotated[int, Field(ge=0, le=1000)] = 0

    @property
    def shape_extras(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SHAPE_EXTRAS}

    @model_validator(mode="after")
    def _kinds(self) -> ModelShape:
        """One line per contradiction (issue 36): MLA fields on a GQA model, MLA without them, more active
        parameters than total, more experts per token than experts, more local layers than layers."""
        if self.attention != "mla" and (self.kv_lora_rank is not None or self.qk_rope_head_dim is not None):
            field = "kv_lora_rank" if self.kv_lora_rank is not None else "qk_rope_head_dim"
            raise FieldError(
                field,
                f"{getattr(self, field)} is an MLA field, and this model's attention is {self.attention}",
                "set attention: mla if config.json has kv_lora_rank (DeepSeek-V2/V3), else remove the field",
            )
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise FieldError(
                "kv_lora_rank" if self.kv_lora_rank is None else "qk_rope_head_dim",
                "is missing: attention mla needs it (its KV per token is kv_lora_rank + qk_rope_head_dim per layer)",
                "copy kv_lora_rank and qk_rope_head_dim from the model's config.json",
            )
        if self.attention == "mha" and self.kv_heads != self.attention_heads:
            raise FieldError(
                "kv_heads",
                f"{self.kv_heads} differs from attention_heads {self.attention_heads}, and attention is mha",
                "use attention: gqa (grouped-query), or kv_heads equal to attention_heads",
            )
        if self.active_params_billion is not None and self.active_params_billion > self.params_billion:
            raise FieldError(
                "active_params_billion",
                f"{self.active_params_billion} is above params_billion {self.params_billion} (the total, every "
                "expert included)",
                "give the total in params_billion and the per-token share (the model card's 'activated') here",
            )
        if self.experts is not None and (self.experts_per_token or 0) > self.experts:
            raise FieldError(
                "experts_per_token",
                f"{self.experts_per_token} is above experts {self.experts}",
                "copy num_experts_per_tok and num_experts from the model's config.json",
            )
        if self.local_layers > self.layers or (self.local_layers and self.sliding_window is None):
            raise FieldError(
                "local_layers",
                f"{self.local_layers} local layers "
                + ("of " + str(self.layers) if self.local_layers > self.layers else "without a sliding_window"),
                "give sliding_window and the number of sliding-attention layers (config.json layer_types or "
                "sliding_window_pattern)",
            )
        return self

    @model_validator(mode="after")
    def _grouped_heads(self) -> ModelShape:
        # Grouped-query attention: every KV head serves the same number of query heads; vLLM's Attention layer
        # asserts num_heads % num_kv_heads == 0 (docs/references.md).
        if self.attention_heads % self.kv_heads:
            raise FieldError(
                "kv_heads",
                f"{self.kv_heads} does not divide attention_heads {self.attention_heads} (each KV head serves a whole "
                "group of query heads; vLLM refuses the model)",
                "copy num_key_value_heads and num_attention_heads from the model's config.json",
            )
        return self


class CacheConfig(StrictModel):
    l1_gb: Annotated[float, Field(ge=0, le=2048)] = 20.0  # LMCache pinned host DRAM per replica; 0 turns L1 off
    l2: L2Backend = "curvine"
    chunk_size: Annotated[int, Field(ge=16, le=4096)] = 256  # tokens per LMCache chunk (one file on L2)
    connector: Connector = "lmcache"  # `vllm`: standalone mode only (kvtier/connectors/vllm.py says why)


class PrometheusTrigger(StrictModel):
    """Scale on a PromQL query against Amazon Managed Prometheus (the CRD accepts no other server)."""

    type: Literal["prometheus"]
    server_address: Annotated[str, Field(pattern=_AMP_URL)]
    query: Annotated[str, Field(min_length=1)]  # e.g. sum(vllm:num_requests_waiting{namespace="kvtier-retail"})
    target_value: PositiveFloat
    activation_target_value: Annotated[float, Field(ge=0)] = 0.0


class CloudWatchTrigger(StrictModel):
    """Scale on a CloudWatch metric."""

    type: Literal["cloudwatch"]
    namespace: Annotated[str, Field(min_length=1)]
    metric_name: Annotated[str, Field(min_length=1)]
    dimensions: dict[str, str] = Field(default_factory=dict)
    statistic: Annotated[str, Field(min_length=1)] = "Average"
    target_value: PositiveFloat
    activation_target_value: Annotated[float, Field(ge=0)] = 0.0


# kvtier's own per-endpoint scaling signals, recorded by its rules (kvtier/k8s/observability/rules.py SIGNAL_RECORDS):
# requests waiting per replica, TTFT p90 over the environment's SLO, prompt tokens computed (served by no tier) per
# replica per second, and tokens loaded from L2 per replica per second. Not GPU KV utilisation: with tiering on, it
# sits near 100% whatever the load (docs/endpoints.md "Autoscaling").
Signal = Literal["queue_per_replica", "ttft_p90_over_slo", "computed_tokens_per_replica", "l2_hit_tokens_per_replica"]


class SignalTrigger(StrictModel):
    """Scale on one of kvtier's signals: `{signal: queue_per_replica, target: 4}`; kvtier renders the query."""

    type: Literal["signal"] = "signal"  # implied by `signal:`
    signal: Signal
    target: PositiveFloat  # per replica, except ttft_p90_over_slo (a ratio: 1 is at the SLO)
    activation_target: Annotated[float, Field(ge=0)] = 0.0


Trigger = Annotated[SignalTrigger | PrometheusTrigger | CloudWatchTrigger, Field(discriminator="type")]


class Autoscaling(StrictModel):
    """Both modes, one meaning (KEDA): operator mode renders the CRD's autoScalingSpec, standalone mode a ScaledObject
    on the Deployment (kvtier/k8s/autoscaling.py); quota and node-fit checks count `max_replicas`. `trigger` (one) or
    `triggers` (several; KEDA scales to the largest replica count any of them asks for)."""

    min_replicas: Annotated[int, Field(ge=1)] = 1
    max_replicas: Annotated[int, Field(ge=1)] = 5
    polling_interval_s: Annotated[int, Field(ge=1)] = 30
    cooldown_period_s: Annotated[int, Field(ge=0)] = 300
    trigger: Trigger | None = None
    triggers: Annotated[Items[Trigger], Field(max_length=10)] = ()

    @model_validator(mode="before")
    @classmethod
    def _signal_type(cls, data: Any) -> Any:
        """`{signal: ..., target: ...}` needs no `type: signal`."""
        if not isinstance(data, dict):
            return data

        def typed(trigger: Any) -> Any:
            if isinstance(trigger, dict) and "signal" in trigger and "type" not in trigger:
                return {"type": "signal", **trigger}
            return trigger

        out = dict(data)
        if "trigger" in out:
            out["trigger"] = typed(out["trigger"])
        if isinstance(out.get("triggers"), list):
            out["triggers"] = [typed(t) for t in out["triggers"]]
        return out

    @model_validator(mode="after")
    def _order(self) -> Autoscaling:
        if self.max_replicas < self.min_replicas:
            raise FieldError(
                "max_replicas", f"{self.max_replicas} is below min_replicas {self.min_replicas}", "use max >= min"
            )
        if (self.trigger is None) == (not self.triggers):
            raise FieldError(
                "trigger",
                "both trigger and triggers are set" if self.trigger else "no trigger is set",
                "give one `trigger:` (e.g. {signal: queue_per_replica, target: 4}) or a `triggers:` list",
            )
        return self

    @property
    def all_triggers(self) -> tuple[SignalTrigger | PrometheusTrigger | CloudWatchTrigger, ...]:
        return (self.trigger,) if self.trigger is not None else self.triggers

    def trigger_path(self, index: int) -> str:
        """Where the `index`-th of all_triggers is written, relative to `autoscaling`."""
        return "trigger" if self.trigger is not None else f"triggers[{index}]"


class Endpoint(StrictModel):
    name: Annotated[str, rfc1123_label(ENDPOINT_NAME_MAX, "endpoint name (RFC 1123 label)")]
    model: ModelSource
    instance_type: InstanceTypeName
    replicas: Annotated[int, Field(ge=1)] = 1
    tensor_parallel: Annotated[int, Field(ge=1)] = 1  # GPUs per replica (one per TP rank)
    max_model_len: Annotated[int, Field(ge=MIN_MODEL_LEN)] = 16384
    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] = 0.9
    block_size: Literal[8, 16, 32, 64, 128] = 16  # vLLM's KV block (L0 prefix-cache granularity)
    dtype: Dtype = "auto"
    # vLLM `--kv-cache-dtype` (issue 36): fp8 halves the KV bytes of every tier. Part of the L2 identity.
    kv_cache_dtype: KvCacheDtype = "auto"
    # The checkpoint's weight format as vLLM is told (`--quantization`); None: the model's (catalog or `models`).
    # Part of the L2 identity.
    weight_format: WeightFormat | None = None
    image: PinnedImage | None = None  # default: the connector's for the mode (kvtier.connectors.engine_image)
    # Standalone mode's router (vllm-router, run by `vllm-router`); default ROUTER_IMAGE (versions.py). Tags are
    # mutable: pin @sha256:<digest> here.
    router_image: PinnedImage | None = None
    cache: CacheConfig = CacheConfig()
    # Operator mode: intelligentRoutingSpec cannot change once set, so changing `routing` (or `mode`) replaces the
    # endpoint (its InferenceEndpointConfig is deleted and created again). Standalone mode: the router restarts, and
    # kvaware is refused (no standalone router policy, kvtier/versions.py ROUTER_POLICY); poolaware is standalone with a
    # Curvine L2 only (cache_aware with knobs from the plan, kvtier/planner/pool_routing.py).
    routing: Routing = "prefixaware"
    api: Api = "chat"
    mode: Mode = "operator"
    autoscaling: Autoscaling | None = None
    bench: BenchConfig = BenchConfig()
    # LoRA adapters on the base model (issue 35, kvtier/config/adapters.py): standalone mode only.
    adapters: Annotated[Items[Adapter], Field(max_length=256)] = ()
    lora: LoraLimits = LoraLimits()
    # Issue 38, standalone mode: the longest a request may run. The router cuts a request there
    # (`--request-timeout-secs`), and a replica that stops (scale-in, rollout, drain) waits that long for its streams
    # before vLLM gets SIGTERM (its termination grace period follows). Default DEFAULT_MAX_REQUEST_SECONDS.
    max_request_seconds: Annotated[int | None, Field(ge=10, le=86_400)] = None

    @property
    def max_replicas(self) -> int:
        return self.autoscaling.max_replicas if self.autoscaling else self.replicas

    def s3_sources(self) -> list[tuple[str, S3Model | S3Adapter]]:
        """The S3 prefixes it reads weights from (its model, its LoRA adapters), each with its path in the endpoint."""
        found: list[tuple[str, S3Model | S3Adapter]] = (
            [("model", self.model)] if isinstance(self.model, S3Model) else []
        )
        found += [
            (f"adapters[{i}].source", a.source) for i, a in enumerate(self.adapters) if isinstance(a.source, S3Adapter)
        ]
        return found

    @property
    def min_replicas(self) -> int:
        """The fewest replicas the endpoint runs with (autoscaling can take it down to its minimum)."""
        return self.autoscaling.min_replicas if self.autoscaling else self.replicas

    @property
    def request_seconds(self) -> int:
        """The longest a request may run (standalone mode): `max_request_seconds` or its default."""
        return self.max_request_seconds or DEFAULT_MAX_REQUEST_SECONDS

    @model_validator(mode="after")
    def _checks(self) -> Endpoint:
        gpus = INSTANCE_TYPES[self.instance_type].gpus
        if gpus == 0:
            raise FieldError(
                "instance_type", f"{self.instance_type} has no GPU", "use an ml.g6e.* or ml.p5.48xlarge type"
            )
        if self.tensor_parallel > gpus or gpus % self.tensor_parallel:
            raise FieldError(
                "tensor_parallel",
                f"{self.tensor_parallel} does not divide the {gpus} GPU(s) of {self.instance_type}",
                f"use a divisor of {gpus} (one GPU per tensor-parallel rank, all on one node)",
            )
        if self.mode == "standalone" and self.cache.l2 == "tieredstorage":
            raise FieldError(
                "cache.l2",
                "the HyperPod tiered storage L2 is wired by the Inference Operator only",
                "use l2: curvine or none in standalone mode, or mode: operator",
            )
        if self.max_request_seconds is not None and self.mode == "operator":
            raise FieldError(
                "max_request_seconds",
                "the InferenceEndpointConfig has no field for a request timeout or a drain (the operator renders its "
                "router and pods), so operator mode cannot honour it",
                "remove it, or use mode: standalone",
            )
        if self.adapters:
            if self.mode == "operator":
                raise FieldError(
                    "adapters",
                    "the Inference Operator's InferenceEndpointConfig has no LoRA adapter field (pinned CRD), so "
                    "operator mode cannot serve adapters",
                    "use mode: standalone for an endpoint with adapters",
                )
            check_adapters(self.adapters, self.lora, self.model.id)
        if self.autoscaling is not None:  # where KEDA comes from is a cross-file rule (kvtier/rules/autoscaling.py)
            low, high = self.autoscaling.min_replicas, self.autoscaling.max_replicas
            if not low <= self.replicas <= high:
                raise FieldError(
                    "replicas", f"{self.replicas} is outside autoscaling {low}..{high}", "use min <= replicas <= max"
                )
        return self
