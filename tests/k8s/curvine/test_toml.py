"""curvine-cluster.toml: parses with tomllib and holds the ports, peers, data dirs and TTL kvtier asks for."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.config.curvine import CurvineConfig
from kvtier.config.environment import Environment
from kvtier.k8s.curvine import master_addresses
from kvtier.k8s.curvine.toml import cluster_config, cluster_toml, render
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR


def env_named(name: str) -> Environment:
    return load_checked(CONFIG_DIR, name).env


def env_with_masters(masters: int, worker_gb: int = 400) -> Environment:
    env = env_named("prod")
    curvine = CurvineConfig(masters=masters, worker_data_gb=worker_gb, worker_reserved_gb=1)
    return env.model_copy(update={"curvine": curvine})


def parsed(env: Environment) -> dict[str, Any]:
    return tomllib.loads(cluster_toml(env))


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_file_parses_and_equals_the_data_it_was_rendered_from(name: str) -> None:
    env = env_named(name)
    assert parsed(env) == cluster_config(env)


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_format_flags_are_written_false(name: str) -> None:
    # Absent means TRUE in Curvine v0.4.1 (ClusterConf::default): both must be present and false.
    doc = parsed(env_named(name))
    assert doc["format_master"] is False
    assert doc["format_worker"] is False


def test_every_port_is_explicit_and_distinct() -> None:
    doc = parsed(env_named("dev"))
    ports = {
        "master rpc": doc["master"]["rpc_port"],
        "master web": doc["master"]["web_port"],
        "journal": doc["journal"]["rpc_port"],
        "worker rpc": doc["worker"]["rpc_port"],
        "worker web": doc["worker"]["web_port"],
        "fuse web": doc["fuse"]["web_port"],
    }
    # v0.4.1 values (notes Q2): web ports 9000/9001/9002, not main's 9001/9002/9003.
    assert ports == {
        "master rpc": 8995,
        "master web": 9000,
        "journal": 8996,
        "worker rpc": 8997,
        "worker web": 9001,
        "fuse web": 9002,
    }


def test_data_dirs_are_below_the_volume_mounts_with_type_and_size() -> None:
    doc = parsed(env_named("prod"))
    assert doc["master"]["meta_dir"] == "/data/meta/db"  # not the mount root: lost+found would block the start
    assert doc["journal"]["journal_dir"] == "/data/journal/db"
    assert doc["worker"]["data_dir"] == ["[SSD:500GB]/data/nvme"]
    assert doc["worker"]["dir_reserved"] == "10GB"


def test_client_ttl_is_explicitly_off() -> None:
    client = parsed(env_named("dev"))["client"]
    assert (client["ttl_ms"], client["ttl_action"]) == ("0", "none")
    assert isinstance(client["ttl_ms"], str), "Curvine's field is a string (ttl_ms_str)"


@settings(max_examples=25, deadline=None)
@given(masters=st.sampled_from([1, 3, 5, 7]))
def test_journal_peers_and_client_masters_follow_the_master_count(masters: int) -> None:
    env = env_with_masters(masters)
    doc = parsed(env)
    peers = doc["journal"]["journal_addrs"]
    assert [p["id"] for p in peers] == list(range(1, masters + 1))
    assert len({p["hostname"] for p in peers}) == masters
    assert all(p["port"] == doc["journal"]["rpc_port"] for p in peers)
    for i, peer in enumerate(peers):
        assert peer["hostname"] == f"curvine-master-{i}.curvine-master.curvine.svc.cluster.local"
    clients = doc["client"]["master_addrs"]
    assert [c["hostname"] for c in clients] == [p["hostname"] for p in peers]
    assert {c["port"] for c in clients} == {doc["master"]["rpc_port"]}
    assert master_addresses(env) == ",".join(f"{c['hostname']}:{c['port']}" for c in clients)


@settings(max_examples=50, deadline=None)
@given(gb=st.integers(min_value=10, max_value=100_000))
def test_worker_size_is_written_in_curvine_gb(gb: int) -> None:
    doc = parsed(env_with_masters(1, gb))
    assert doc["worker"]["data_dir"] == [f"[SSD:{gb}GB]/data/nvme"]


scalars = st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text())
keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(
    top=st.dictionaries(keys, scalars, max_size=4),
    tables=st.dictionaries(
        keys,
        st.dictionaries(
            keys,
            st.one_of(
                scalars,
                st.lists(scalars, max_size=3),
                st.dictionaries(keys, scalars, max_size=3),
                st.lists(st.dictionaries(keys, scalars, max_size=3), min_size=1, max_size=3),
            ),
            max_size=4,
        ),
        max_size=3,
    ),
)
def test_render_round_trips_through_tomllib(top: dict[str, Any], tables: dict[str, Any]) -> None:
    document: dict[str, Any] = {**top, **{k: v for k, v in tables.items() if k not in top}}
    assert tomllib.loads(render(document)) == document


def test_render_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="needs quoting"):
        render({"a.b": 1})
    with pytest.raises(TypeError):
        render({"a": 1.5})
