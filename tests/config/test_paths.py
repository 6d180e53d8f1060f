"""Every path safe: bad files, folders, names and zones give one clean line naming the file, the field and the fix,
and hostile YAML (alias bombs, huge files, huge values) is refused before it costs time or memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.config.errors import MAX_SHOWN
from kvtier.config.yamlio import MAX_EXPANDED_VALUES, MAX_FILE_BYTES, expanded_size, read_yaml
from kvtier.errors import ConfigError
from kvtier.rules import load_checked

# Nine levels of ten aliases each: 10^9 values once expanded, from a few hundred bytes.
BILLION_LAUGHS = "tags:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = cli(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_an_alias_bomb_is_refused_before_it_expands(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    kept = [line for line in env.read_text().splitlines(keepends=True) if not line.startswith("tags:")]
    env.write_text("".join(kept) + BILLION_LAUGHS)
    with pytest.raises(ConfigError, match="expands to more than 100,000 values through YAML aliases"):
        read_yaml(env, "dev.yaml")
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert err.endswith("use fewer nested aliases (&anchor / *alias)")


def test_expanded_size_counts_aliases_without_walking_them() -> None:
    node = yaml.compose(BILLION_LAUGHS, Loader=yaml.SafeLoader)
    assert node is not None
    assert expanded_size(node) == MAX_EXPANDED_VALUES + 1  # capped, not 10^9
    small = yaml.compose("a: &x [1, 2]\nb: *x\nc: *x\n", Loader=yaml.SafeLoader)
    assert small is not None
    assert expanded_size(small) == 1 + 3 + 3 * 3  # mapping, 3 keys, 3 lists of 2 values


def test_a_file_above_the_size_cap_is_refused_unread(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    with env.open("a") as out:
        out.write("#" + "x" * (MAX_FILE_BYTES + 10) + "\n")
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert "dev.yaml: is 1.0 MiB; config files are at most 1 MiB" in err


def test_long_values_are_cut_in_messages(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    huge = "x" * 5000
    env.write_text(env.read_text().replace("region: us-west-2", f"region: {huge}"))
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert "x" * (MAX_SHOWN - 3) + "..." in err
    assert "x" * (MAX_SHOWN + 1) not in err


def test_problems_of_every_file_are_reported_at_once(config_copy: Path) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.write_text(env.read_text().replace("nat_gateways: 1", "nat_gateways: many"))
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(lob.read_text().replace("gpu_quota:", "gpu_quota: lots\nold_quota:"))
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    files = {Path(p.file).name for p in raised.value.problems}
    assert files == {"dev.yaml", "retail.yaml"}, [str(p) for p in raised.value.problems]


def test_a_symlink_loop_and_a_dangling_link_say_so(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.unlink()
    loop = config_copy / "environments" / "loop.yaml"
    env.symlink_to(loop)
    loop.symlink_to(env)
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert "dev.yaml: is a symbolic link that loops back on itself; point it at a real file" in err
    loop.unlink()
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert f"dev.yaml: is a symbolic link to {loop}, which does not exist" in err


def test_a_config_dir_that_is_a_file_or_missing_is_named(
    tmp_path: Path, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "config.yaml"
    a_file.write_text("name: dev\n")
    err = _one_line(capsys, ["validate", "--config-dir", str(a_file)])
    assert err.endswith(f"{a_file}: is a file, not a config folder; pass the folder that holds environments/ and lobs/")
    missing = tmp_path / "nowhere"
    err = _one_line(capsys, ["validate", "--config-dir", str(missing)])
    assert f"{missing}: config folder does not exist" in err
    (config_copy / "environments").rename(config_copy / "envs")
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert f"{config_copy / 'environments'}: folder does not exist" in err


@pytest.mark.parametrize("name", ["../lobs/retail", "/etc/passwd", "Dev", "dev.yaml", ""])
def test_env_names_resolve_only_inside_environments(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line(capsys, ["validate", "-e", name])
    assert "is not an environment name" in err
    assert "use one of byoc, dev, prod" in err


def _zones(config_copy: Path, zones: str) -> None:
    env = config_copy / "environments" / "dev.yaml"
    text = env.read_text()
    start = text.index("availability_zones:")
    end = text.index("\n", start)
    env.write_text(text[:start] + f"availability_zones: {zones}" + text[end:])


@pytest.mark.parametrize(
    ("zones", "words"),
    [
        ("[us-west-2a, us-west-2z]", "availability_zones[1]: zone 'us-west-2z' is not a zone of us-west-2; use one of"),
        ("[usw2-az1, use1-az2]", "availability_zones[1]: AZ ID 'use1-az2' is not in region us-west-2"),
        ("[usw2-az1, us-west-2b]", "availability_zones[1]: 'us-west-2b' is a zone name and availability_zones[0]"),
    ],
)
def test_zones_are_checked_against_the_region(
    zones: str, words: str, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _zones(config_copy, zones)
    err = _one_line(capsys, ["validate", "--config-dir", str(config_copy)])
    assert words in err


def test_zone_ids_are_accepted(config_copy: Path) -> None:
    _zones(config_copy, "[usw2-az1, usw2-az2]")
    env = load_checked(config_copy, "dev").env
    assert env.zones_are_ids
    assert env.availability_zones == ("usw2-az1", "usw2-az2")


def test_zone_ids_pin_each_subnet_by_zone_id(config_copy: Path) -> None:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from kvtier.stacks.network import NetworkStack

    _zones(config_copy, "[usw2-az1, usw2-az3]")
    stack = NetworkStack(cdk.App(), load_checked(config_copy, "dev").env)
    subnets = Template.from_stack(stack).find_resources("AWS::EC2::Subnet")
    assert len(subnets) == 4  # public and nodes, in each zone
    for subnet in subnets.values():
        assert "AvailabilityZone" not in subnet["Properties"]
        assert subnet["Properties"]["AvailabilityZoneId"] in {"usw2-az1", "usw2-az3"}
