"""Model facts that would otherwise fail only at deploy: a max_model_len above the model's context, a model id the
Hub refuses, KV heads that do not group the attention heads, and shape values so far out that the fit check would
blame the wrong field. Plus a public EKS endpoint open to the whole internet."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvtier.catalog import MODELS
from kvtier.cli import main as cli
from kvtier.errors import ConfigError, Problem
from kvtier.rules import load_checked

SHAPE: dict[str, object] = {"layers": 36, "attention_heads": 32, "kv_heads": 8, "head_dim": 128, "params_billion": 8.2}


def _retail(
    config_dir: Path, model_id: str | None = None, shape: dict[str, object] | None = None, **endpoint: object
) -> Path:
    path = config_dir / "lobs" / "retail.yaml"
    doc = yaml.safe_load(path.read_text())
    if model_id is not None:
        doc["endpoints"][0]["model"]["id"] = model_id
    if shape is not None:
        doc["models"] = {model_id: shape}
    doc["endpoints"][0].update(endpoint)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return path


def _errors(config_dir: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_checked(config_dir, "dev")
    return [str(p) for p in caught.value.problems]


def test_every_catalog_model_has_a_context_length_and_its_source() -> None:
    for model in MODELS.values():
        assert model.context_length is not None and model.context_length >= 32768, model.id
        assert "max_position_embeddings" in model.context_source, model.id
    assert MODELS["Qwen/Qwen3-8B"].context_length == 40960


def test_max_model_len_above_the_models_context_is_an_error(config_copy: Path) -> None:
    lob = _retail(config_copy, max_model_len=40960)
    load_checked(config_copy, "dev")  # exactly the context: vLLM accepts it
    _retail(config_copy, max_model_len=40961)
    assert _errors(config_copy) == [
        f"{lob}: endpoints[0].max_model_len: 40,961 is above the 40,960-token context of Qwen/Qwen3-8B (its config.json "
        "max_position_embeddings; vLLM refuses to start with a longer max_model_len); use max_model_len 40,960 or less"
    ]


def test_a_described_model_may_give_its_context_length(config_copy: Path) -> None:
    lob = _retail(config_copy, "acme/m1", {**SHAPE, "context_length": 8192}, max_model_len=16384)
    assert _errors(config_copy) == [
        f"{lob}: endpoints[0].max_model_len: 16,384 is above the 8,192-token context of acme/m1 (its config.json "
        "max_position_embeddings; vLLM refuses to start with a longer max_model_len); use max_model_len 8,192 or less"
    ]
    _retail(config_copy, "acme/m1", SHAPE, max_model_len=16384)  # no context_length given: nothing to check against
    load_checked(config_copy, "dev")


def test_a_described_catalog_model_keeps_the_catalogs_context(config_copy: Path) -> None:
    _retail(config_copy, "Qwen/Qwen3-8B", SHAPE, max_model_len=65536)
    assert any("65,536 is above the 40,960-token context of Qwen/Qwen3-8B" in e for e in _errors(config_copy))


@pytest.mark.parametrize(
    ("model_id", "words"),
    [
        ("Qwen/Qwén3-8B", "'Qwen/Qwén3-8B' is not a model id: it contains 'é'"),
        ("Qwen/Qwen3-8B\u200b", "it contains '\\u200b'"),
        ("acme/m1.git", "'acme/m1.git' is not a model id"),
        ("acme/m--1", "(no '--', '..' or trailing '.git')"),
        ("acme/-m1", "'acme/-m1' is not a model id"),
    ],
)
def test_a_model_id_the_hub_refuses_is_an_error(config_copy: Path, model_id: str, words: str) -> None:
    lob = _retail(config_copy, model_id, SHAPE)  # described, so only the id itself can be wrong
    errors = _errors(config_copy)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{lob}: endpoints[0].model.id: "), errors
    assert words in errors[0], errors
    assert errors[0].endswith(
        "write it as <organisation>/<model> in ASCII letters, digits, '-', '_' and '.', like "
        "Qwen/Qwen3-8B" + ("" if "contains" in words else " (no '--', '..' or trailing '.git')")
    )


def test_kv_heads_must_group_the_attention_heads(config_copy: Path) -> None:
    lob = _retail(config_copy, "acme/m1", {**SHAPE, "kv_heads": 64})
    assert _errors(config_copy) == [
        f"{lob}: models.acme/m1.kv_heads: 64 does not divide attention_heads 32 (each KV head serves a whole group of "
        "query heads; vLLM refuses the model); copy num_key_value_heads and num_attention_heads from the model's "
        "config.json"
    ]


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [("params_billion", 1e300, "<= 10000"), ("head_dim", 10**9, "<= 1024"), ("layers", 10**6, "<= 1000")],
)
def test_shape_values_far_out_name_their_own_field(config_copy: Path, field: str, value: float, bound: str) -> None:
    lob = _retail(config_copy, "acme/m1", {**SHAPE, field: value})
    errors = _errors(config_copy)
    assert errors == [f"{lob}: models.acme/m1.{field}: {value!r} is out of range; use a value {bound}"], errors


def test_kv_room_below_the_shortest_max_model_len_does_not_ask_to_go_below_it(config_copy: Path) -> None:
    # 1,000 layers x 32 KV heads x 1,024 head dim: 131 MB of KV per token, about 170 tokens fit next to the weights.
    lob = _retail(
        config_copy, "acme/m1", {**SHAPE, "layers": 1000, "kv_heads": 32, "head_dim": 1024}, max_model_len=256
    )
    errors = _errors(config_copy)
    assert len(errors) == 1 and errors[0].startswith(f"{lob}: endpoints[0].max_model_len: after the weights"), errors
    assert "at most" not in errors[0]
    assert errors[0].endswith(
        "acme/m1 stores 131,072,000 bytes of KV per token); raise gpu_memory_utilization, or raise tensor_parallel "
        "(max_model_len cannot go below 256)"
    ), errors


def test_an_eks_endpoint_open_to_the_internet_warns(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.write_text(env.read_text().replace("public_access_cidrs: [203.0.113.0/24]", "public_access_cidrs: [0.0.0.0/0]"))
    config = load_checked(config_copy, "dev")
    assert (
        Problem(
            str(env),
            "eks.public_access_cidrs[0]",
            "0.0.0.0/0 opens the EKS API endpoint to the whole internet (requests still need IAM credentials, but anyone "
            "can reach and probe the endpoint)",
            "list only the networks you run kubectl from, e.g. [203.0.113.0/24], or use endpoint_access: private",
        )
        in config.warnings
    )
    assert cli(["validate", "--config-dir", str(config_copy)]) == 0
    assert f"warning: {env}: eks.public_access_cidrs[0]: 0.0.0.0/0 opens" in capsys.readouterr().err


def _model(config_dir: Path, lob: str, **model: object) -> Path:
    """Replace the first endpoint's model of `lob` (None drops a key)."""
    path = config_dir / "lobs" / f"{lob}.yaml"
    doc = yaml.safe_load(path.read_text())
    merged = {**doc["endpoints"][0]["model"], **model}
    doc["endpoints"][0]["model"] = {k: v for k, v in merged.items() if v is not None}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_shipped_configs_pin_their_weights(config_copy: Path) -> None:
    """Issue 24: every shipped endpoint with an L2 names a commit or a weights version, and dropping it fails."""
    for env in ("dev", "prod", "byoc"):
        for lob in load_checked(config_copy, env).lobs:
            for endpoint in lob.endpoints:
                model = endpoint.model
                assert getattr(model, "revision", None) or model.weights_version, (env, lob.name, endpoint.name)
    hf = _model(config_copy, "retail", revision=None)
    assert _errors(config_copy) == [
        f"{hf}: endpoints[0].model.revision: Qwen/Qwen3-8B is not pinned: with an L2 the tip of `main` can move under "
        "running replicas; set model.revision to the commit SHA of the weights you tested (the model's Hugging Face "
        "page, Files and versions, History), or model.weights_version (e.g. 2026-12-01) and bump it whenever `main` "
        "moves"
    ]
    _model(config_copy, "retail", weights_version="2026-12-01")  # an explicit version pins it as well
    load_checked(config_copy, "dev")


def test_an_s3_model_needs_a_weights_version(config_copy: Path) -> None:
    s3 = _model(config_copy, "search", weights_version=None)
    with pytest.raises(ConfigError) as caught:
        load_checked(config_copy, "prod")
    assert [str(p) for p in caught.value.problems] == [
        f"{s3}: endpoints[0].model.weights_version: s3://acme-ml-models/qwen2.5-7b-instruct is not pinned: with an L2 "
        "weights re-uploaded under this prefix would be read with the old weights' KV; set model.weights_version "
        "(e.g. the upload date, 2026-12-01) and bump it with every upload"
    ]


def test_without_an_l2_the_weights_need_no_pin(config_copy: Path) -> None:
    _model(config_copy, "retail", revision=None)
    _retail(config_copy, cache={"l1_gb": 20, "l2": "none", "chunk_size": 256})
    load_checked(config_copy, "dev")


@pytest.mark.parametrize("revision", ["main", "v1.0", "B968826D9C46DD6066D109EABC6255188DE91218", "b968826"])
def test_a_revision_that_is_not_a_commit_is_one_line(
    revision: str, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = _model(config_copy, "retail", revision=revision)
    assert cli(["validate", "--config-dir", str(config_copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"kvtier validate: {lob}: endpoints[0].model.revision: '{revision}' is not a commit (a branch or tag can move, "
        "and the L2 would mix KV of two builds); use the 40-hex commit SHA from the model's Hugging Face page (Files "
        "and versions, History)"
    )
