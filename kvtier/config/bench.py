"""`bench` of an endpoint: the in-cluster benchmark Job (off unless enabled)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from kvtier.config.base import FieldError, StrictModel


def _target_url(value: str | None) -> str | None:
    if value is None:
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(
            f"'{value}' is not a base URL; write scheme://host[:port] without a path, like "
            "http://qwen3-8b-router.kvtier-retail.svc.cluster.local:80"
        )
    return value.rstrip("/")


class BenchConfig(StrictModel):
    """`vllm bench serve` with its `prefix_repetition` dataset against the endpoint's router, run once as a Job.

    Each prompt is one of `num_prefixes` shared prefixes of `prefix_len` tokens plus a random suffix of `suffix_len`;
    `num_prompts // num_prefixes` prompts share each prefix. A `prefix_len` that is a multiple of the endpoint's
    `cache.chunk_size` is stored by LMCache in whole chunks (a partial last chunk is not saved by default).
    """

    enabled: bool = False
    num_prompts: Annotated[int, Field(ge=1, le=100_000)] = 200
    request_rate: Annotated[float, Field(gt=0, allow_inf_nan=True)] = (
        4.0  # requests per second (Poisson); .inf sends all at once
    )
    prefix_len: Annotated[int, Field(ge=1)] = 2048
    suffix_len: Annotated[int, Field(ge=1)] = 256
    num_prefixes: Annotated[int, Field(ge=1)] = 10
    output_len: Annotated[int, Field(ge=1)] = 64
    # Base URL to benchmark; default: the endpoint's router (kvtier.k8s.bench_job.default_target_url).
    target_url: Annotated[str | None, AfterValidator(_target_url)] = None

    @model_validator(mode="after")
    def _prompts_per_prefix(self) -> BenchConfig:
        if self.num_prompts < self.num_prefixes:
            raise FieldError(
                "num_prompts",
                f"{self.num_prompts} prompts cannot cover {self.num_prefixes} prefixes",
                "use num_prompts >= num_prefixes (vllm bench serve sends num_prompts // num_prefixes per prefix)",
            )
        return self
