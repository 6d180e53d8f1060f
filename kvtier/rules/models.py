"""Model shapes: every endpoint's model from the catalog or its LOB file, LOB descriptions that disagree with the
catalog, a max_model_len the model cannot serve, and weights an L2 identity can pin."""

from __future__ import annotations

from kvtier.catalog import MODELS, WEIGHT_FORMATS, Model, resolve_model
from kvtier.config.endpoint import HuggingFaceModel
from kvtier.connectors import connector_for
from kvtier.errors import ConfigError, Problem
from kvtier.planner.shapes import endpoint_model
from kvtier.rules.context import Context, Findings, Site


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


def check_context_length(site: Site, model: Model, found: Findings) -> bool:
    """vLLM refuses a max_model_len above the model's own (its config.json), unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is
    set, which kvtier never sets (docs/references.md): the pods would crash-loop at start. True when it fits."""
    limit = model.context_length
    asked = site.endpoint.max_model_len
    if limit is None or asked <= limit:
        return True
    found.errors.append(
        Problem(
            site.file,
            site.at("max_model_len"),
            f"{asked:,} is above the {limit:,}-token context of {model.id} (its config.json max_position_embeddings; "
            "vLLM refuses to start with a longer max_model_len)",
            f"use max_model_len {limit:,} or less",
        )
    )
    return False


def check_pinned_weights(site: Site, found: Findings) -> None:
    """With an L2, replicas must agree on the weights: LMCache's key carries neither weights nor config, so replicas
    started before and after an upstream push to `main` (or a re-upload under one S3 prefix) would read each other's
    KV as hits and answer wrongly (docs/l2.md). Hugging Face: a commit (`revision`) or an explicit `weights_version`;
    S3: a `weights_version` (kvtier cannot tell whether a prefix names a version, and objects can be overwritten)."""
    endpoint = site.endpoint
    model = endpoint.model
    if endpoint.cache.l2 == "none" or model.weights_version is not None:
        return
    if isinstance(model, HuggingFaceModel):
        if model.revision is not None:
            return
        problem = f"{model.id} is not pinned: with an L2 the tip of `main` can move under running replicas"
        fix = (
            "set model.revision to the commit SHA of the weights you tested (the model's Hugging Face page, Files and "
            "versions, History), or model.weights_version (e.g. 2026-12-01) and bump it whenever `main` moves"
        )
        field = "model.revision"
    else:
        problem = (
            f"s3://{model.bucket}/{model.prefix} is not pinned: with an L2 weights re-uploaded under this prefix "
            "would be read with the old weights' KV"
        )
        fix = "set model.weights_version (e.g. the upload date, 2026-12-01) and bump it with every upload"
        field = "model.weights_version"
    found.errors.append(Problem(site.file, site.at(field), problem, fix))


# vLLM 0.32.0's MLA attention backends and the KV cache dtypes each takes (`supported_kv_cache_dtypes` of
# vllm/v1/attention/backends/mla/{flashattn_mla,flashmla,flashinfer_mla,triton_mla,cutlass_mla}.py): none takes
# `fp8_e5m2`, so an MLA model with it has no attention backend and vLLM refuses to start, on every GPU
# (docs/references.md "Model shapes (issue 36)").
MLA_KV_CACHE_DTYPES = frozenset({"auto", "fp8", "fp8_e4m3"})


def check_model_kind(site: Site, model: Model, found: Findings) -> bool:
    """Issue 36: a `weight_format` the checkpoint is not in (vLLM refuses to load it), a KV cache dtype vLLM has no
    attention backend for with this attention kind, and what the endpoint's connector cannot store for this
    attention kind and KV cache dtype (its `model_refusals`). True when none."""
    endpoint = site.endpoint
    ok = True
    if model.attention == "mla" and endpoint.kv_cache_dtype not in MLA_KV_CACHE_DTYPES:
        found.errors.append(
            Problem(
                site.file,
                site.at("kv_cache_dtype"),
                f"{endpoint.kv_cache_dtype} with {model.id}'s MLA: no vLLM MLA attention backend takes it (they take "
                "fp8 / fp8_e4m3), so vLLM refuses to start",
                "use kv_cache_dtype: auto, or fp8 where the connector stores it",
            )
        )
        return False
    stored = resolve_model(endpoint.model.id, site.lob.models).format
    asked = endpoint.weight_format
    if asked is not None and asked != stored:
        quantization = WEIGHT_FORMATS[asked].quantization
        flag = f"--quantization {quantization}" if quantization else "no --quantization"
        found.errors.append(
            Problem(
                site.file,
                site.at("weight_format"),
                f"{asked} ({flag}) does not match {endpoint.model.id}, whose checkpoint is {stored} "
                "(kvtier's catalog, or this file's models entry): vLLM refuses to load it",
                f"remove weight_format, or set it to {stored}; for {asked} weights use a {asked} checkpoint's id "
                "(e.g. the model's -FP8 repository)",
            )
        )
        ok = False
    for refusal in connector_for(endpoint).model_refusals(endpoint, model):
        found.errors.append(Problem(site.file, site.at(refusal.field), refusal.problem, refusal.fix))
        ok = False
    return ok
