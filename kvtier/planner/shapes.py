"""The model behind an endpoint: the LOB file's `models.<id>` description first, else the catalog."""

from __future__ import annotations

from kvtier.catalog import MODELS, Model, UnknownModelError, as_served, resolve_model
from kvtier.config.endpoint import Endpoint
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import ConfigError, Problem


def endpoint_model(lob: LineOfBusiness, endpoint: Endpoint, lob_file: str) -> Model:
    """The shape of the endpoint's model as it serves it (KV cache dtype, weight format), or a ConfigError naming the
    file, the field and the fix."""
    try:
        return as_served(resolve_model(endpoint.model.id, lob.models), endpoint.kv_cache_dtype, endpoint.weight_format)
    except UnknownModelError:
        index = lob.endpoints.index(endpoint)
        model_id = endpoint.model.id
        raise ConfigError(
            [
                Problem(
                    lob_file,
                    f"endpoints[{index}].model.id",
                    f"'{model_id}' is not in kvtier's catalog and this file does not describe it under `models`",
                    f"add `models: {{{model_id}: {{layers: .., attention_heads: .., kv_heads: .., head_dim: .., "
                    f"params_billion: ..}}}}` from the model's config.json, or use a catalog model: "
                    + ", ".join(sorted(MODELS)),
                )
            ]
        ) from None
