"""The `curvine` section: defaults, clear errors (even masters, worker larger than the NVMe), size conversions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kvtier.catalog import INSTANCE_TYPES
from kvtier.config.curvine import (
    CURVINE_GIB,
    DECIMAL_GB,
    IMAGE_SOURCES,
    NVME_USABLE_FRACTION,
    CurvineConfig,
    CurvineImages,
    Resources,
    cpu_millis,
    curvine_gb_bytes,
    max_worker_data_gb,
    memory_bytes,
)
from kvtier.config.environment import Environment
from kvtier.config.errors import problems_from
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from kvtier.rules.l2 import check_masters_fit, check_worker_fits, curvine_problems
from tests.support import CONFIG_DIR

GPU_TYPES = sorted(name for name, t in INSTANCE_TYPES.items() if t.is_gpu)


def env_with(
    edit: dict[str, Any] | None = None, *, gpu_type: str | None = None, system_count: int | None = None
) -> Environment:
    data = load_checked(CONFIG_DIR, "dev").env.model_dump(mode="json", exclude_unset=True)
    data["curvine"].update(edit or {})
    for group in data["hyperpod"]["instance_groups"]:
        if group["role"] == "gpu" and gpu_type is not None:
            group["instance_type"] = gpu_type
        if group["role"] == "system" and system_count is not None:
            group["count"] = system_count
    return Environment.model_validate(data)


def messages(err: ValidationError) -> list[str]:
    return [str(p) for p in problems_from(err, "dev.yaml", Environment)]


def test_defaults_are_what_the_examples_rely_on() -> None:
    cfg = CurvineConfig()
    assert cfg.masters == 1
    assert cfg.images.curvine.endswith(":v0.4.1")
    assert cfg.images.csi.endswith(":v0.4.1")
    assert set(IMAGE_SOURCES) == set(CurvineImages.model_fields), "every default image names its source"


@pytest.mark.parametrize("masters", [2, 4, 6])
def test_even_master_count_is_a_clear_error(masters: int) -> None:
    with pytest.raises(ValidationError) as err:
        env_with({"masters": masters})
    assert messages(err.value) == [
        f"dev.yaml: curvine.masters: {masters} masters cannot form a Raft majority safely; "
        "use an odd count (1 in dev, 3 in prod)"
    ]


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ({"images": {"csi": "ghcr.io/curvineio/curvine-csi"}}, "curvine.images.csi", "not a pinned container image"),
        ({"images": {"curvine": "ghcr.io/curvineio/curvine:latest"}}, "curvine.images.curvine", "moving tag 'latest'"),
        ({"worker_reserved_gb": 400}, "curvine.worker_reserved_gb", "reserve less than worker_data_gb"),
        (
            {
                "resources": {
                    "fuse": {"cpu_request": "4", "cpu_limit": "2", "memory_request": "1Gi", "memory_limit": "2Gi"}
                }
            },
            "curvine.resources.fuse.cpu_limit",
            "below the request",
        ),
        (
            {"resources": {"worker": {"cpu_request": "1", "memory_request": "4G", "memory_limit": "8Gi"}}},
            "curvine.resources.worker.memory_request",
            "binary suffix",
        ),
        ({"unknown": 1}, "curvine.unknown", "known keys here: masters"),
    ],
)
def test_bad_values_name_their_field(edit: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        env_with(edit)
    found = messages(err.value)
    assert len(found) == 1, found
    assert found[0].startswith(f"dev.yaml: {field}: ")
    assert words in found[0]


def test_worker_larger_than_nvme_is_a_clear_error() -> None:
    env = env_with({"worker_data_gb": 600})  # 600 GiB on a 600 GB (decimal) ml.g6e.4xlarge
    problems = check_worker_fits(env, "config/environments/dev.yaml")
    limit = max_worker_data_gb(INSTANCE_TYPES["ml.g6e.4xlarge"].nvme_gb)
    assert [str(p) for p in problems] == [
        "config/environments/dev.yaml: curvine.worker_data_gb: 600 GB (Curvine GB = GiB, 644 decimal GB) does not fit "
        f"the 600 GB instance store of ml.g6e.4xlarge, of which kvtier lets Curvine use 95%; use at most {limit} for "
        "ml.g6e.4xlarge, or set catalog_overrides.ml.g6e.4xlarge.nvme_gb if the catalog's unverified size is wrong "
        "(check `df -BG /opt/dlami/nvme` on a node)"
    ]
    assert check_worker_fits(env_with({"worker_data_gb": limit}), "f") == []


def test_catalog_override_moves_the_nvme_limit() -> None:
    data = load_checked(CONFIG_DIR, "dev").env.model_dump(mode="json", exclude_unset=True)
    data["curvine"]["worker_data_gb"] = 1000
    assert check_worker_fits(Environment.model_validate(data))
    data["catalog_overrides"] = {"ml.g6e.4xlarge": {"nvme_gb": 1200}}
    assert check_worker_fits(Environment.model_validate(data)) == []


def test_masters_need_distinct_system_nodes() -> None:
    env = env_with({"masters": 3}, system_count=2)
    assert [p.field for p in check_masters_fit(env)] == ["curvine.masters"]
    assert "3 distinct system nodes and the system groups have 2" in str(check_masters_fit(env)[0])
    assert check_masters_fit(env_with({"masters": 3}, system_count=3)) == []
    assert curvine_problems(env) == check_masters_fit(env)


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_example_environments_pass_every_curvine_check(name: str) -> None:
    env = load_checked(CONFIG_DIR, name).env
    assert curvine_problems(env) == []


def test_loader_refuses_a_worker_larger_than_the_nvme(config_copy: Path) -> None:
    """The Curvine charts render what they are given (kvtier/k8s/curvine/charts.py): the loader is what refuses a pool
    the nodes cannot hold, before any chart is built."""
    path = config_copy / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    data["curvine"]["worker_data_gb"] = 5000
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"curvine\.worker_data_gb: 5000 GB"):
        load_checked(config_copy, "dev")


def test_loader_reports_an_even_master_count_with_file_and_field(config_copy: Path) -> None:
    path = config_copy / "environments" / "prod.yaml"
    data = yaml.safe_load(path.read_text())
    data["curvine"]["masters"] = 2
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "prod")
    assert [p.field for p in err.value.problems] == ["curvine.masters"]
    assert str(err.value).startswith(f"{path}: curvine.masters: 2 masters cannot form a Raft majority")


@settings(max_examples=200, deadline=None)
@given(gb=st.integers(min_value=10, max_value=40_000), type_name=st.sampled_from(GPU_TYPES))
def test_worker_fits_exactly_when_its_bytes_fit_the_usable_nvme(gb: int, type_name: str) -> None:
    env = env_with({"worker_data_gb": gb, "worker_reserved_gb": 1}, gpu_type=type_name)
    nvme_bytes = INSTANCE_TYPES[type_name].nvme_gb * DECIMAL_GB
    fits = gb * CURVINE_GIB <= nvme_bytes * NVME_USABLE_FRACTION
    assert (check_worker_fits(env) == []) == fits


@settings(max_examples=200, deadline=None)
@given(nvme_gb=st.integers(min_value=0, max_value=100_000))
def test_max_worker_size_is_the_largest_that_fits(nvme_gb: int) -> None:
    limit = max_worker_data_gb(nvme_gb)
    usable = nvme_gb * DECIMAL_GB * NVME_USABLE_FRACTION
    assert curvine_gb_bytes(limit) <= usable < curvine_gb_bytes(limit + 1)


@settings(max_examples=200, deadline=None)
@given(millis=st.integers(min_value=1, max_value=1_000_000))
def test_cpu_quantities_convert_in_both_spellings(millis: int) -> None:
    assert cpu_millis(f"{millis}m") == millis
    cores = f"{millis // 1000}.{millis % 1000:03d}".rstrip("0").rstrip(".")
    assert cpu_millis(cores) == millis


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=1, max_value=10**6), unit=st.sampled_from(["", "Ki", "Mi", "Gi", "Ti"]))
def test_memory_quantities_are_binary(n: int, unit: str) -> None:
    power = ["", "Ki", "Mi", "Gi", "Ti"].index(unit)
    assert memory_bytes(f"{n}{unit}") == n * 1024**power


def test_resources_render_without_cpu_limit_when_unset() -> None:
    fuse = Resources(cpu_request="2", memory_request="2Gi", memory_limit="8Gi")
    assert fuse.k8s() == {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
