"""Model shapes: every endpoint's model from the catalog or its LOB file, and LOB descriptions that disagree with
the catalog."""

from __future__ import annotations

from kvtier.catalog import MODELS, Model
from kvtier.errors import ConfigError, Problem
from kvtier.planner.shapes import endpoint_model
from kvtier.rules.context import Context, Findings


def endpoint_models(ctx: Context, found: Findings) -> dict[tuple[str, int], Model]:
    """Every endpoint's model shape (catalog or LOB file); unknown ones are errors and skip the checks that need them."""
    models: dict[tuple[str, int], Model] = {}
    for site in ctx.sites():
        try:
            models[(site.lob.name, site.index)] = endpoint_model(site.lob, site.endpoint, site.file)
        except ConfigError as err:
            found.errors.extend(err.problems)
    for lob in ctx.lobs:
        file = ctx.files.get(lob.name, lob.name)
        for model_id, shape in lob.models.items():
            known = MODELS.get(model_id)
            if known is None:
                continue
            ours = (shape.layers, shape.attention_heads, shape.kv_heads, shape.head_dim, shape.params_billion)
            theirs = (known.layers, known.attention_heads, known.kv_heads, known.head_dim, known.params_billion)
            if ours != theirs or shape.dtype != known.dtype:
                catalog = (
                    f"{known.layers} layers, {known.attention_heads} attention heads, {known.kv_heads} KV heads, "
                    f"head dim {known.head_dim}, {known.params_billion} B parameters, {known.dtype}"
                )
                found.warnings.append(
                    Problem(
                        file,
                        f"models.{model_id}",
                        f"differs from kvtier's catalog entry ({catalog}); this file's description is used",
                        "remove it to use the catalog's, or keep it if it matches your checkpoint's config.json",
                    )
                )
    return models
