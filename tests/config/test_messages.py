"""What a newcomer's mistakes print: the key they misspelt (not its parent), the file that is empty or not a folder,
the tab they typed, in `<file>: <field>: <problem>; <what to do>` form with exit 2. And standard YAML merge keys
work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtier.cli import main as cli
from kvtier.config.yamlio import MAX_EXPANDED_VALUES, read_yaml
from kvtier.errors import ConfigError
from kvtier.rules import load_checked

RETAIL_COMMIT = "b968826d9c46dd6066d109eabc6255188de91218"  # config/lobs/retail.yaml's pinned revision


def _one_line(capsys: pytest.CaptureFixture[str], config_dir: Path) -> str:
    code = cli(["validate", "--config-dir", str(config_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("kvtier validate: ")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def test_a_misspelt_key_inside_model_names_that_key(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    _edit(lob, "token_secret: null", "tokn_secret: null")
    assert _one_line(capsys, config_copy) == (
        f"{lob}: endpoints[0].model.tokn_secret: unknown key 'tokn_secret'; did you mean 'token_secret'? known keys "
        "here: source, id, token_secret, revision, weights_version"
    )


def test_a_misspelt_key_inside_an_s3_model_names_the_s3_keys(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    _edit(
        lob,
        "model: {id: Qwen/Qwen3-8B, source: huggingface, token_secret: null, revision: " + RETAIL_COMMIT + "}",
        "model: {id: Qwen/Qwen3-8B, source: s3, bucket: my-models, prefix: qwen3/, regoin: us-west-2}",
    )
    assert _one_line(capsys, config_copy) == (
        f"{lob}: endpoints[0].model.regoin: unknown key 'regoin'; did you mean 'region'? known keys here: source, id, "
        "bucket, prefix, region, weights_version, kms_key_arn"
    )


def test_a_misspelt_key_inside_the_trigger_names_that_key(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    _edit(
        lob,
        "autoscaling: null",
        "autoscaling: {min_replicas: 1, max_replicas: 2, trigger: {type: cloudwatch, namespace: AWS/SageMaker, "
        "metric_name: Invocations, target_value: 10, statistc: Sum}}",
    )
    assert _one_line(capsys, config_copy) == (
        f"{lob}: endpoints[0].autoscaling.trigger.statistc: unknown key 'statistc'; did you mean 'statistic'? known "
        "keys here: type, namespace, metric_name, dimensions, statistic, target_value, activation_target_value"
    )


def test_yaml_merge_keys_work_and_own_keys_win(config_copy: Path) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(
        "name: retail\ngpu_quota: 4\nl2: {budget_gb: 200, max_age_hours: 24}\nendpoints:\n"
        "  - &first\n    name: qwen3-8b\n    model: {id: Qwen/Qwen3-8B, source: huggingface, weights_version: v1}\n"
        "    instance_type: ml.g6e.4xlarge\n    replicas: 1\n    max_model_len: 16384\n"
        "  - <<: *first\n    name: qwen3-8b-short\n    max_model_len: 8192\n"
    )
    endpoints = load_checked(config_copy, "dev").lob("retail").endpoints
    assert [(e.name, e.instance_type, e.replicas, e.max_model_len) for e in endpoints] == [
        ("qwen3-8b", "ml.g6e.4xlarge", 1, 16384),
        ("qwen3-8b-short", "ml.g6e.4xlarge", 1, 8192),
    ]


def test_a_key_written_twice_is_still_an_error_next_to_a_merge(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(
        "name: retail\ngpu_quota: 3\nendpoints:\n"
        "  - &first\n    name: qwen3-8b\n    model: {id: Qwen/Qwen3-8B, source: huggingface}\n"
        "    instance_type: ml.g6e.4xlarge\n"
        "  - <<: *first\n    name: b\n    name: c\n"
    )
    assert _one_line(capsys, config_copy) == (
        f"{lob}: line 10, column 5: is not valid YAML (key 'name' appears twice (first on line 9)); fix the YAML syntax"
    )


def test_merge_keys_count_towards_the_alias_cap(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    levels = "".join(
        f"  m{i}: &m{i} {{<<: [{', '.join(f'*m{i - 1}' for _ in range(10))}], k{i}: [{', '.join(['*m0'] * 10)}]}}\n"
        for i in range(1, 8)
    )
    lob.write_text("name: retail\ngpu_quota: 3\ntags:\n  m0: &m0 {a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n" + levels)
    assert _one_line(capsys, config_copy) == (
        f"{lob}: expands to more than {MAX_EXPANDED_VALUES:,} values through YAML aliases; write the values out, or use "
        "fewer nested aliases (&anchor / *alias)"
    )


def test_an_empty_file_says_empty(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text("# nothing here yet\n")
    assert _one_line(capsys, config_copy) == (
        f"{lob}: is empty (or holds only comments); write the line of business file as key: value pairs"
    )


def test_a_list_file_says_list(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.write_text("- name: dev\n")
    assert _one_line(capsys, config_copy) == (
        f"{env}: holds a list, not a mapping of key: value pairs; write the environment file as key: value pairs"
    )


def test_a_tab_after_a_colon_says_tab(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    _edit(lob, "gpu_quota: 3", "gpu_quota:\t3")
    line = next(i for i, text in enumerate(lob.read_text().splitlines(), 1) if text.startswith("gpu_quota"))
    assert _one_line(capsys, config_copy) == (
        f"{lob}: line {line}, column 11: holds a tab character where YAML expects spaces (YAML indents and separates "
        "with spaces only); replace the tab with spaces"
    )


def test_environments_as_a_file_says_so(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = config_copy / "environments"
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    folder.write_text("dev.yaml\n")
    assert _one_line(capsys, config_copy) == (
        f"{folder}: is a file, not a folder; move it away and create the folder environments/ with one <env>.yaml per "
        "environment"
    )


def test_a_misspelt_key_inside_a_described_model_lists_the_shape_keys(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(
        lob.read_text()
        + "models:\n  acme/m1: {layers: 36, attention_heads: 32, kv_heads: 8, head_dim: 128, params_billion: 8.2, "
        "hed_dim: 1}\n"
    )
    assert _one_line(capsys, config_copy) == (
        f"{lob}: models.acme/m1.hed_dim: unknown key 'hed_dim'; did you mean 'head_dim'? known keys here: layers, "
        "attention_heads, kv_heads, head_dim, params_billion, dtype, context_length, vocab_size, hidden_size, "
        "tied_embeddings, active_params_billion, experts, experts_per_token, shared_experts, moe_intermediate_size, "
        "moe_layers, weight_format, attention, kv_lora_rank, qk_rope_head_dim, sliding_window, local_layers"
    )


@pytest.mark.parametrize(
    ("text", "kind"), [("[a, b]: 1\n", "list"), ("{a: 1}: 2\n", "mapping"), ("2026-01-01: x\n", "date")]
)
def test_a_key_that_is_not_a_plain_value_is_refused(tmp_path: Path, text: str, kind: str) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_yaml(path, "k.yaml")
    assert str(caught.value) == (
        f"k.yaml: line 1, column 1: is not valid YAML (a key must be a plain value, not a {kind}); fix the YAML syntax"
    )


@pytest.mark.parametrize(
    ("written", "field", "fix"),
    [("1e9", "head_dim", "write it as 1000000000"), ("1e300", "params_billion", "write it as 1.0e+300")],
)
def test_a_number_yaml_reads_as_text_says_so(
    config_copy: Path, capsys: pytest.CaptureFixture[str], written: str, field: str, fix: str
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    shape = {"layers": "36", "attention_heads": "32", "kv_heads": "8", "head_dim": "128", "params_billion": "8.2"}
    shape[field] = written
    lob.write_text(
        lob.read_text().replace("Qwen/Qwen3-8B", "acme/m1")
        + "models:\n  acme/m1: {"
        + ", ".join(f"{k}: {v}" for k, v in shape.items())
        + "}\n"
    )
    assert _one_line(capsys, config_copy) == (
        f"{lob}: models.acme/m1.{field}: '{written}' is read as text, not a number (in YAML 1.1 an exponent needs a "
        f"dot and a sign); {fix}"
    )


def test_a_config_dir_that_is_a_fifo_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "config"
    os.mkfifo(fifo)
    assert _one_line(capsys, fifo) == (
        f"{fifo}: is a named pipe (FIFO), not a config folder; pass the folder that holds environments/ and lobs/"
    )


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::111122223333:role/Plätform",  # a letter IAM refuses
        "arn:aws:iam::١١١١٢٢٢٢٣٣٣٣:role/PlatformAdmin",  # Arabic-Indic digits: Python's \\d matches them
        "arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/",  # a path without the role's name
        "arn:aws:iam::111122223333:role//PlatformAdmin",  # an empty path segment
    ],
)
def test_an_iam_arn_outside_ascii_is_refused(config_copy: Path, capsys: pytest.CaptureFixture[str], arn: str) -> None:
    env = config_copy / "environments" / "dev.yaml"
    _edit(env, "arn:aws:iam::111122223333:role/PlatformAdmin", arn)
    assert _one_line(capsys, config_copy) == (
        f"{env}: eks.admins[0]: '{arn}' is not an IAM principal ARN; use arn:aws:iam::<12-digit account>:role/<name> "
        "or :user/<name>"
    )


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("account: null", 'account: "١١١١٢٢٢٢٣٣٣٣"', "account", "is not an AWS account id"),
        ("region: us-west-2", "region: us-west-٢", "region", "is not an AWS region name"),
    ],
)
def test_non_ascii_digits_are_refused_where_aws_takes_ascii(
    config_copy: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, field: str, words: str
) -> None:
    env = config_copy / "environments" / "dev.yaml"
    _edit(env, old, new)
    err = _one_line(capsys, config_copy)
    assert err.startswith(f"{env}: {field}: "), err
    assert words in err, err
