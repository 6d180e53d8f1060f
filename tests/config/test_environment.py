"""The environment file: valid examples load; every kind of bad input gives the promised message and exit code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

Edit = Callable[[dict[str, Any]], None]


def _groups(d: dict[str, Any]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = d["hyperpod"]["instance_groups"]
    return groups


# (case, edit of dev.yaml, field path expected in the message, words expected in the message)
BAD_INPUTS: list[tuple[str, Edit, str, str]] = [
    (
        "memory percent below 20",
        lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=10),
        "hyperpod.tiered_storage.memory_percent",
        ">= 20",
    ),
    (
        "memory percent above 100",
        lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=120),
        "hyperpod.tiered_storage.memory_percent",
        "<= 100",
    ),
    (
        "instance type HyperPod does not offer",
        lambda d: _groups(d)[1].update(instance_type="ml.g9.xlarge"),
        "hyperpod.instance_groups[1].instance_type",
        "ml.g6e.4xlarge",
    ),
    (
        "zone outside the region",
        lambda d: d.update(availability_zones=["us-west-2a", "us-east-1b"]),
        "availability_zones[1]",
        "is not a zone of us-west-2",
    ),
    ("cidr that does not parse", lambda d: d["network"].update(cidr="10.0.0.300/16"), "network.cidr", "10.0.0.0/16"),
    (
        "kubernetes version not pinned",
        lambda d: d.update(kubernetes_version="1.33"),
        "kubernetes_version",
        "cdk8s-plus-NN",
    ),
    (
        "no gpu group",
        lambda d: d["hyperpod"].update(instance_groups=[_groups(d)[0], dict(_groups(d)[0], name="s2")]),
        "hyperpod.instance_groups",
        "'gpu'",
    ),
    (
        "no system group",
        lambda d: d["hyperpod"].update(instance_groups=[_groups(d)[1], dict(_groups(d)[1], name="g2")]),
        "hyperpod.instance_groups",
        "'system'",
    ),
    ("env name too long", lambda d: d.update(name="abcdefghijklm"), "name", "at most 12"),
    ("env name not a label", lambda d: d.update(name="Dev_1"), "name", "RFC 1123"),
    ("unknown key", lambda d: d["hyperpod"].update(bogus=1), "hyperpod.bogus", "known keys here"),
    ("account as a number", lambda d: d.update(account=123456789012), "account", "string"),
    ("missing region", lambda d: d.pop("region"), "region", "required"),
    (
        "gpu type in a system group",
        lambda d: _groups(d)[0].update(instance_type="ml.g6e.xlarge"),
        "hyperpod.instance_groups[0].instance_type",
        "ml.m5",
    ),
    (
        "cpu type in a gpu group",
        lambda d: _groups(d)[1].update(instance_type="ml.m5.xlarge"),
        "hyperpod.instance_groups[1].instance_type",
        "GPU",
    ),
    (
        "type not offered in region",
        lambda d: d.update(region="eu-west-1", availability_zones=["eu-west-1a", "eu-west-1b"]),
        "hyperpod.instance_groups[1].instance_type",
        "not offered",
    ),
    (
        "verified fact overridden",
        lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"gpus": 2}}),
        "catalog_overrides.ml.g6e.4xlarge.gpus",
        "nvme_gb",
    ),
    ("cidr too small for the subnets", lambda d: d["network"].update(cidr="10.0.0.0/20"), "network.cidr", "larger"),
    (
        "private endpoint with public cidrs",
        lambda d: d["eks"].update(endpoint_access="private", public_access_cidrs=["1.2.3.0/24"]),
        "eks.public_access_cidrs",
        "remove",
    ),
    ("admin not an ARN", lambda d: d["eks"].update(admins=["alice"]), "eks.admins[0]", "arn:aws:iam"),
    ("reserved tag prefix", lambda d: d.update(tags={"aws:owner": "x"}), "tags", "reserved"),
    ("even Curvine masters", lambda d: d["curvine"].update(masters=2), "curvine.masters", "odd"),
    (
        "non-finite override",
        lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"nvme_gb": float("inf")}}),
        "catalog_overrides.ml.g6e.4xlarge.nvme_gb",
        "finite",
    ),
    (
        "prefill efficiency above peak",
        lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"prefill_mfu": 5}}),
        "catalog_overrides.ml.g6e.4xlarge.prefill_mfu",
        "between 0 and 1",
    ),
    (
        "admin is an STS session",
        lambda d: d["eks"].update(admins=["arn:aws:sts::111122223333:assumed-role/A/me"]),
        "eks.admins[0]",
        ":role/",
    ),
    (
        "admin listed twice",
        lambda d: d["eks"].update(admins=["arn:aws:iam::111122223333:role/A"] * 2),
        "eks.admins[1]",
        "once",
    ),
    ("tag characters AWS refuses", lambda d: d.update(tags={"team#1": "a;b"}), "tags", "letters, digits"),
    (
        "one zone for a new cluster",
        lambda d: d.update(availability_zones=["us-west-2a"]),
        "availability_zones",
        "two zones",
    ),
    (
        "worker data larger than the NVMe",
        lambda d: d["curvine"].update(worker_data_gb=700),
        "curvine.worker_data_gb",
        "ml.g6e.4xlarge",
    ),
    ("more masters than system nodes", lambda d: d["curvine"].update(masters=3), "curvine.masters", "system"),
    ("lob listed twice", lambda d: d.update(lobs=["retail", "retail"]), "lobs[1]", "once"),
    ("lob without a file", lambda d: d.update(lobs=["retail", "nosuch"]), "lobs[1]", "no file"),
    ("duplicate group names", lambda d: _groups(d)[1].update(name="system"), "hyperpod.instance_groups", "twice"),
]


def _write_env(config_dir: Path, edit: Edit) -> None:
    path = config_dir / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def test_examples_are_valid() -> None:
    for env in ("dev", "prod"):
        config = load_checked(CONFIG_DIR, env)
        assert config.env.name == env
        assert {lob.name for lob in config.lobs} == set(config.env.lobs)


def test_prod_is_the_production_shape() -> None:
    env = load_checked(CONFIG_DIR, "prod").env
    assert env.account is not None
    assert env.eks.endpoint_access == "private"
    assert sum(g.count for g in env.groups("system")) >= 3  # three Curvine masters on distinct nodes
    assert env.curvine.masters == 3
    dev = load_checked(CONFIG_DIR, "dev").env
    assert sum(g.count for g in env.groups("gpu")) > sum(g.count for g in dev.groups("gpu"))


@pytest.mark.parametrize(("case", "edit", "field", "words"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_with_file_field_and_fix(
    case: str, edit: Edit, field: str, words: str, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_env(config_copy, edit)
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    messages = [str(p) for p in raised.value.problems]
    expected_prefix = f"{config_copy / 'environments' / 'dev.yaml'}: {field}: "
    assert any(m.startswith(expected_prefix) and words in m and "; " in m for m in messages), messages

    code = cli(["validate", "--config-dir", str(config_copy)])
    err = capsys.readouterr().err
    assert code == 2
    assert expected_prefix in err
    assert "Traceback" not in err


def test_yaml_duplicate_key_and_syntax_errors_name_the_line(config_copy: Path) -> None:
    path = config_copy / "environments" / "dev.yaml"
    path.write_text(path.read_text() + "region: us-east-1\n")
    with pytest.raises(
        ConfigError, match=r"dev\.yaml: line \d+, column \d+: is not valid YAML \(key 'region' appears twice"
    ):
        load_checked(config_copy, "dev")
    path.write_text("name: dev\nregion: [unclosed\n")
    with pytest.raises(ConfigError, match=r"dev\.yaml: line \d+, column \d+: is not valid YAML"):
        load_checked(config_copy, "dev")


def test_files_that_are_not_yaml_mappings_name_the_problem(config_copy: Path) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_bytes(b"name: r\xe9tail\n")
    with pytest.raises(ConfigError, match=r"retail\.yaml: byte 7: is not UTF-8 text; save the file as UTF-8"):
        load_checked(config_copy, "dev")
    lob.write_text("? [a, b]\n: 1\n")
    with pytest.raises(ConfigError, match=r"a key must be a plain value, not a list"):
        load_checked(config_copy, "dev")
    lob.unlink()
    lob.mkdir()
    with pytest.raises(ConfigError, match=r"retail\.yaml: is a directory, not a file"):
        load_checked(config_copy, "dev")


def test_union_members_are_named_as_written(config_copy: Path) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(lob.read_text().replace("revision: b968826d9c46dd6066d109eabc6255188de91218", "revision: main"))
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    [problem] = raised.value.problems
    assert problem.field == "endpoints[0].model.revision"  # not model.huggingface.revision
    assert "'main' is not a commit" in problem.problem and "40-hex commit SHA" in problem.allowed


def test_file_name_and_env_name_must_agree(config_copy: Path) -> None:
    data = yaml.safe_load((config_copy / "environments" / "dev.yaml").read_text())
    (config_copy / "environments" / "qa.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"qa\.yaml: name: 'dev' differs from the file name; use name: qa"):
        load_checked(config_copy, "qa")


def test_unknown_environment_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["validate", "--config-dir", str(CONFIG_DIR), "-e", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "environments here: " in err and "dev, prod" in err


def test_every_problem_is_reported_at_once(config_copy: Path) -> None:
    def two_errors(d: dict[str, Any]) -> None:
        d["hyperpod"]["tiered_storage"]["memory_percent"] = 5
        d["network"]["nat_gateways"] = 0

    _write_env(config_copy, two_errors)
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    fields = {p.field for p in raised.value.problems}
    assert {"hyperpod.tiered_storage.memory_percent", "network.nat_gateways"} <= fields


def test_synth_refuses_bad_config_without_traceback_or_output(
    config_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvtier.app.main import main as synth_main

    _write_env(config_copy, lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=10))
    outdir = tmp_path / "cdk.out"
    monkeypatch.setenv("KVTIER_CONFIG_DIR", str(config_copy))
    monkeypatch.setenv("CDK_OUTDIR", str(outdir))
    monkeypatch.chdir(tmp_path)
    assert synth_main() == 2
    err = capsys.readouterr().err
    assert "dev.yaml: hyperpod.tiered_storage.memory_percent: 10 is out of range; use a value >= 20" in err
    assert "Traceback" not in err
    assert not (outdir / "manifest.json").exists()
    assert not (tmp_path / "dist").exists()


def test_validate_json_output(capsys: pytest.CaptureFixture[str], config_copy: Path) -> None:
    import json

    assert cli(["validate", "--config-dir", str(CONFIG_DIR), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    _write_env(config_copy, lambda d: d.update(kubernetes_version="1.35"))
    assert cli(["validate", "--config-dir", str(config_copy), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["errors"][0]["field"] == "kubernetes_version"


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (
            lambda d: d.update(region="us-east-1", availability_zones=["us-east-1a", "us-east-1b"]),
            "hyperpod.existing.hyperpod_cluster_arn",
            "set region",
        ),
        (lambda d: d.update(network={"cidr": "10.0.0.0/16"}), "network", "remove the network section"),
        (
            lambda d: d["hyperpod"]["existing"]["install"].update(addons=["nodes", "bogus"]),
            "hyperpod.existing.install.addons[1]",
            "cert-manager",
        ),
        (
            lambda d: d["hyperpod"]["existing"]["nodes"]["gpu"].update(
                selector=d["hyperpod"]["existing"]["nodes"]["system"]["selector"]
            ),
            "hyperpod.existing.nodes.gpu.selector",
            "own nodes",
        ),
        (
            lambda d: d["hyperpod"].update(
                instance_groups=[{"name": "g", "role": "gpu", "instance_type": "ml.g6e.4xlarge", "count": 1}]
            ),
            "hyperpod.existing",
            "exactly one",
        ),
    ],
)
def test_existing_cluster_inputs(edit: Edit, field: str, words: str, config_copy: Path) -> None:
    path = config_copy / "environments" / "byoc.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "byoc")
    assert any(p.field == field and words in str(p) for p in raised.value.problems), raised.value.problems
