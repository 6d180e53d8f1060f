"""Issue 37, item 1: EKS access entries keyed by principal, the upgrade from list-position ids, and the day-2 guard.

`KVTIER_ADMIN_IDS_BREAK=index` restores the old ids (list positions): the day-2 tests below then fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.constructs.eks import admin_entry_ids
from kvtier.rules.day2 import access_entry_changes, compare
from tests.support import Synth, synthesize

ADMIN = "arn:aws:iam::111122223333:role/PlatformAdmin"
ON_CALL = "arn:aws:iam::111122223333:role/OnCall"


def _entries(synth: Synth) -> dict[str, str]:
    """Principal -> logical id of the admins' access entries in the cluster stack."""
    return {
        v["Properties"]["PrincipalArn"]: k
        for k, v in synth.resources("cluster", "AWS::EKS::AccessEntry").items()
        if isinstance(v["Properties"]["PrincipalArn"], str)
    }


def _admins(config_dir: Path, admins: list[str], index_keyed: list[str] | None = None) -> Path:
    path = config_dir / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    data["eks"]["admins"] = admins
    if index_keyed is not None:
        data["eks"]["index_keyed_admins"] = index_keyed
    path.write_text(yaml.safe_dump(data))
    return config_dir


def _entry(arn: str) -> dict[str, Any]:
    return {"Type": "AWS::EKS::AccessEntry", "Properties": {"PrincipalArn": arn, "ClusterName": {"Ref": "C"}}}


def test_ids_come_from_the_principal_not_its_position() -> None:
    one = admin_entry_ids([ADMIN, ON_CALL])
    assert admin_entry_ids([ON_CALL, ADMIN]) == one == {**admin_entry_ids([ON_CALL]), **admin_entry_ids([ADMIN])}
    assert len(set(one.values())) == 2 and all(v.startswith("Principal") for v in one.values())
    assert admin_entry_ids([ON_CALL], [ADMIN, ON_CALL]) == {ON_CALL: "Admin1"}


def test_a_principal_changing_under_one_logical_id_is_refused_with_the_fix() -> None:
    before = {"Resources": {"EksAdmin06F978028": _entry(ADMIN), "EksAdmin1F75E3536": _entry(ON_CALL)}}
    after = {"Resources": {"EksAdmin06F978028": _entry(ON_CALL)}}
    [change] = compare({"c": before}, {"c": after})
    assert change.what == "EKS access entry EksAdmin06F978028" and "409" in change.why
    assert f"index_keyed_admins: [{ADMIN}, {ON_CALL}]" in change.why


def test_a_principal_moving_to_another_logical_id_is_refused() -> None:
    before = {"Resources": {"EksAdmin06F978028": _entry(ADMIN)}}
    after = {"Resources": {"EksPrincipalabcdef0123ABCDEF12": _entry(ADMIN)}}
    [change] = access_entry_changes("c", before, after)
    assert (change.before, change.after) == ("EksAdmin06F978028", "EksPrincipalabcdef0123ABCDEF12")
    assert f"index_keyed_admins: [{ADMIN}]" in str(change)


def test_adding_and_removing_principals_is_not_refused() -> None:
    before = {"Resources": {"EksPrincipalaaaaaaaaaa11111111": _entry(ADMIN)}}
    after = {"Resources": {"EksPrincipalbbbbbbbbbb22222222": _entry(ON_CALL)}}
    assert compare({"c": before}, {"c": after}) == []


@pytest.fixture(scope="module")
def two_admins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Synth]:
    """This kvtier's synth of dev with [PlatformAdmin, OnCall] (the cdk.out of the deployed environment)."""
    config = tmp_path_factory.mktemp("two-admins") / "config"
    import shutil

    from tests.support import CONFIG_DIR

    shutil.copytree(CONFIG_DIR, config)
    _admins(config, [ADMIN, ON_CALL])
    return config, synthesize("dev", tmp_path_factory.mktemp("cdk-two-admins"), config)


def test_day2_removing_the_first_admin_touches_only_that_entry(
    two_admins: tuple[Path, Synth], config_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, before = two_admins
    config = _admins(config_copy, [ON_CALL])
    assert cli(["validate", "--config-dir", str(config), "--previous", str(before.outdir)]) == 0, capsys.readouterr()
    after = synthesize("dev", tmp_path / "cdk", config)
    assert _entries(after) == {ON_CALL: _entries(before)[ON_CALL]}  # OnCall's entry is untouched


def test_upgrade_from_position_ids_keeps_every_deployed_entry(
    monkeypatch: pytest.MonkeyPatch, config_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old cdk.out (list-position ids, synthesized with the break switch) against this kvtier: without
    `index_keyed_admins` the guard refuses and prints the list to write; with it every deployed entry keeps its id."""
    config = _admins(config_copy, [ADMIN, ON_CALL])
    monkeypatch.setenv("KVTIER_ADMIN_IDS_BREAK", "index")
    old = synthesize("dev", tmp_path / "old", config)
    monkeypatch.delenv("KVTIER_ADMIN_IDS_BREAK")
    assert sorted(_entries(old).values())[0].startswith("EksAdmin0")

    _admins(config, [ON_CALL])  # day 2 of the upgrade: remove the first admin
    assert cli(["validate", "--config-dir", str(config), "--previous", str(old.outdir)]) == 1
    err = capsys.readouterr().err
    assert "refused: kvtier-dev-cluster: EKS access entry of arn:aws:iam::111122223333:role/OnCall" in err
    assert f"add `index_keyed_admins: [{ADMIN}, {ON_CALL}]` to its eks section" in err

    _admins(config, [ON_CALL], [ADMIN, ON_CALL])
    assert cli(["validate", "--config-dir", str(config), "--previous", str(old.outdir)]) == 0, capsys.readouterr()
    new = synthesize("dev", tmp_path / "new", config)
    # The template diff: OnCall keeps the logical id it was deployed with; PlatformAdmin's entry is deleted.
    assert _entries(new) == {ON_CALL: _entries(old)[ON_CALL]}
    gone = set(old.template("cluster")["Resources"]) - set(new.template("cluster")["Resources"])
    assert gone == {_entries(old)[ADMIN]}


def test_validate_previous_refuses_the_reviews_in_place_replacement(
    monkeypatch: pytest.MonkeyPatch, config_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The review's reproduction, both sides synthesized with the list-position ids (the break switch): dev with
    [PlatformAdmin, OnCall], then [OnCall]. OnCall would be created under PlatformAdmin's logical id while its own
    entry still exists (409, rollback); `validate --previous` called that valid before issue 37, now it refuses it in
    one line per entry, naming the id, both principals and the list that keeps the deployed ids."""
    monkeypatch.setenv("KVTIER_ADMIN_IDS_BREAK", "index")
    config = _admins(config_copy, [ADMIN, ON_CALL])
    old = synthesize("dev", tmp_path / "old", config)
    [first] = [lid for arn, lid in _entries(old).items() if arn == ADMIN]
    _admins(config, [ON_CALL])
    assert cli(["validate", "--config-dir", str(config), "--previous", str(old.outdir)]) == 1
    [refused] = [line for line in capsys.readouterr().err.splitlines() if "refused:" in line]
    assert (
        f'kvtier-dev-cluster: EKS access entry {first}: "{ADMIN}" -> "{ON_CALL}"; PrincipalArn is create-only'
        in refused
    )
    assert f"add `index_keyed_admins: [{ADMIN}, {ON_CALL}]`" in refused


def test_an_admin_of_another_partition_is_one_error_line(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "prod.yaml"
    env.write_text(env.read_text().replace(ADMIN, "arn:aws-cn:iam::111122223333:role/PlatformAdmin"))
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"kvtier validate: {env}: eks.admins[0]: 'arn:aws-cn:iam::111122223333:role/PlatformAdmin' is in partition aws-cn, but region "
        "us-east-1 is in aws; use arn:aws:iam::<account>:role/<name>"
    )


def test_an_admin_of_another_account_is_one_warning_line(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "prod.yaml"
    env.write_text(env.read_text().replace(ADMIN, "arn:aws:iam::444455556666:role/PlatformAdmin"))
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy)]) == 0
    [line] = [w for w in capsys.readouterr().err.splitlines() if "eks.admins" in w]
    assert line.startswith(f"warning: {env}: eks.admins[0]: 'arn:aws:iam::444455556666:role/PlatformAdmin' is in ")
    assert line.endswith("use arn:aws:iam::111122223333:role/<name>, or check the principal in account 444455556666")
