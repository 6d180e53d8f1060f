"""Issue 37, item 3 (reviews-2026-12-c AWS S2-3): model and adapter buckets encrypted with a customer managed KMS key.
A source names its key (`kms_key_arn`); the readers (the LOB's Pod Identity role, standalone; the S3 CSI driver's
role, operator mode) get kms:Decrypt on exactly that key, only through S3 in the bucket's region; `validate` refuses a
key that is not a key ARN of the environment's partition, one line each. On the code before issue 37 the field does not
exist and no role has any kms: action (the review's grep of the prod templates)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from tests.support import CONFIG_DIR, Synth, synthesize

MODEL_KEY = "arn:aws:kms:us-east-1:444455556666:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ADAPTER_KEY = "arn:aws:kms:us-west-2:444455556666:key/mrk-0123456789abcdef0123456789abcdef"
ADAPTER = {
    "name": "support-tone",
    "rank": 8,
    "source": {
        "source": "s3",
        "bucket": "acme-ml-adapters",
        "prefix": "support-tone",
        "region": "us-west-2",
        "weights_version": "v1",
        "kms_key_arn": ADAPTER_KEY,
    },
}


def _with_keys(config: Path, model_key: str = MODEL_KEY, tagged: bool = False) -> Path:
    """prod's search model with `model_key`; support's endpoint with an S3 adapter in another region with its key."""
    search = config / "lobs" / "search.yaml"
    data = yaml.safe_load(search.read_text())
    data["endpoints"][0]["model"]["kms_key_arn"] = model_key
    search.write_text(yaml.safe_dump(data))
    support = config / "lobs" / "support.yaml"
    data = yaml.safe_load(support.read_text())
    data["endpoints"][0]["adapters"] = [ADAPTER]
    support.write_text(yaml.safe_dump(data))
    if tagged:
        env = config / "environments" / "prod.yaml"
        env.write_text(env.read_text().replace("model_bucket_access: named", "model_bucket_access: tagged"))
    return config


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    config = tmp_path_factory.mktemp("keys") / "config"
    shutil.copytree(CONFIG_DIR, config)
    return synthesize("prod", tmp_path_factory.mktemp("cdk-keys"), _with_keys(config))


def _statements(synth: Synth, kind: str) -> list[dict[str, Any]]:
    policies = synth.resources(kind, "AWS::IAM::Policy").values()
    roles = synth.resources(kind, "AWS::IAM::Role").values()
    inline = [p for r in roles for p in r["Properties"].get("Policies", [])]
    documents = [p["Properties"]["PolicyDocument"] for p in policies] + [p["PolicyDocument"] for p in inline]
    return [s for d in documents for s in d["Statement"]]


def _kms(synth: Synth, kind: str) -> list[dict[str, Any]]:
    return [s for s in _statements(synth, kind) if "kms:" in json.dumps(s.get("Action"))]


def _via(region: str) -> dict[str, Any]:
    return {"StringEquals": {"kms:ViaService": {"Fn::Join": ["", [f"s3.{region}.", {"Ref": "AWS::URLSuffix"}]]}}}


def test_the_lob_reader_decrypts_its_keys_through_s3_only(keyed: Synth) -> None:
    """search (its model's key, S3 in us-east-1) and support (its adapter's key, S3 in us-west-2, the adapter's
    bucket region): kms:Decrypt, exactly that key, only with kms:ViaService; nothing else of KMS."""
    [search] = _kms(keyed, "search")
    assert (search["Action"], search["Resource"], search["Condition"]) == ("kms:Decrypt", MODEL_KEY, _via("us-east-1"))
    [support] = _kms(keyed, "support")
    assert (support["Action"], support["Resource"], support["Condition"]) == (
        "kms:Decrypt",
        ADAPTER_KEY,
        _via("us-west-2"),
    )
    assert _kms(keyed, "retail") == []  # no S3 source, no key


def _csi_statements(synth: Synth) -> list[dict[str, Any]]:
    roles = synth.resources("cluster", "AWS::IAM::Role")
    [csi] = [k for k, r in roles.items() if "aws-mountpoint-s3-csi-driver" in json.dumps(r["Properties"])]
    policies = synth.resources("cluster", "AWS::IAM::Policy").values()
    return [
        s
        for p in policies
        if {"Ref": csi} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_s3_csi_role_decrypts_every_key_the_lob_files_name(keyed: Synth) -> None:
    """Operator mode mounts weights with the driver's role: it gets each key, per bucket region, never `*`."""
    kms = [s for s in _csi_statements(keyed) if "kms:" in json.dumps(s["Action"])]
    by_region = {json.dumps(s["Condition"]): s for s in kms}
    assert set(by_region) == {json.dumps(_via("us-east-1")), json.dumps(_via("us-west-2"))}
    assert by_region[json.dumps(_via("us-east-1"))]["Resource"] == MODEL_KEY
    assert by_region[json.dumps(_via("us-west-2"))]["Resource"] == ADAPTER_KEY
    assert all(s["Action"] == "kms:Decrypt" and "*" not in json.dumps(s["Resource"]) for s in kms)


def test_tagged_bucket_access_names_the_keys_too(tmp_path: Path) -> None:
    """S3 ABAC opens tagged buckets to the driver; a KMS key is still granted by its ARN (kvtier does not rely on
    key tags), so a new key changes the cluster stack in either mode (docs/lines-of-business.md)."""
    config = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config)
    synth = synthesize("prod", tmp_path / "cdk", _with_keys(config, tagged=True))
    resources = sorted(json.dumps(s["Resource"]) for s in _csi_statements(synth) if "kms:" in json.dumps(s["Action"]))
    assert resources == sorted([json.dumps(MODEL_KEY), json.dumps(ADAPTER_KEY)])


def test_the_shipped_environments_grant_no_kms(prod: Synth, dev: Synth) -> None:
    """No key named, no kms: action on any reader (the key grant exists only where a source names a key)."""
    for synth in (prod, dev):
        for kind in [n.rsplit("-", 1)[1] for n in synth.templates if not n.endswith(("-network", "-platform"))]:
            assert not [s for s in _kms(synth, kind) if s.get("Sid", "").startswith("DecryptModels")]


@pytest.mark.parametrize(
    ("key", "problem", "fix"),
    [
        (
            "arn:aws-cn:kms:cn-north-1:444455556666:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "is in partition aws-cn, but region us-east-1 is in aws",
            "use arn:aws:kms:us-east-1:<account>:key/<key id>, the key of bucket acme-ml-models",
        ),
        (
            "arn:aws:kms:us-east-1:444455556666:alias/models",
            "is an alias; IAM grants a key, not its alias",
            "use the key's ARN (`aws kms describe-key --key-id arn:aws:kms:us-east-1:444455556666:alias/models "
            "--query KeyMetadata.Arn`)",
        ),
        (
            "1234abcd-12ab-34cd-56ef-1234567890ab",
            "is not a KMS key ARN",
            "use arn:aws:kms:<region>:<12-digit account>:key/<key id>",
        ),
    ],
)
def test_a_bad_key_is_one_error_line(
    config_copy: Path, capsys: pytest.CaptureFixture[str], key: str, problem: str, fix: str
) -> None:
    _with_keys(config_copy, model_key=key)
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    where = f"kvtier validate: {config_copy / 'lobs' / 'search.yaml'}: endpoints[0].model.kms_key_arn: '{key}' "
    assert line.startswith(where + problem), line
    assert fix in line


def test_a_key_of_another_region_than_its_bucket_is_one_warning_line(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = MODEL_KEY.replace("us-east-1", "eu-west-1")
    _with_keys(config_copy, model_key=other)
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy)]) == 0
    [line] = [w for w in capsys.readouterr().err.splitlines() if "kms_key_arn" in w]
    assert line.startswith(f"warning: {config_copy / 'lobs' / 'search.yaml'}: endpoints[0].model.kms_key_arn: ")
    assert "is in region eu-west-1, but bucket acme-ml-models is read in us-east-1" in line
