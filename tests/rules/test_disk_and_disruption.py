"""Issue 38's cross-file checks: the engines' disk (ephemeral-storage requests of the fullest packing plus the
images) against the GPU group's `ebs_gb`, and the voluntary disruptions a PodDisruptionBudget cannot protect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import DISK_USABLE_FRACTION, ENGINE_IMAGE_DISK_GB, NODE_OTHER_IMAGES_GB
from kvtier.errors import ConfigError
from kvtier.rules import load_checked


def _edit(path: Path, change: Any) -> None:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _gpu_group(env: dict[str, Any]) -> dict[str, Any]:
    group: dict[str, Any] = next(g for g in env["hyperpod"]["instance_groups"] if g["role"] == "gpu")
    return group


def test_an_ebs_volume_too_small_for_the_engines_and_images_is_one_line(config_copy: Path) -> None:
    _edit(config_copy / "environments" / "dev.yaml", lambda env: _gpu_group(env).update(ebs_gb=60))
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "dev")
    (found,) = [str(p) for p in err.value.problems if ".ebs_gb" in str(p)]
    assert "\n" not in found
    assert found.startswith("config/") or "environments/dev.yaml: hyperpod.instance_groups[1].ebs_gb: " in found
    # One qwen3-8b replica per g6e.4xlarge node: 18 GiB download + 10 GiB scratch = 28 GiB = 30 GB; images 42 + 10.
    for words in (
        "a ml.g6e.4xlarge node's 60 GB EBS volume holds 51 GB",
        "1 x retail/qwen3-8b 28 GiB (weights 15.3 GiB downloaded, model-cache 18Gi, adapters 0Gi, scratch 10Gi)",
        f"pulls {ENGINE_IMAGE_DISK_GB.value + NODE_OTHER_IMAGES_GB.value:.0f} GB of images",
        "raise ebs_gb to at least",
    ):
        assert words in found, found
    need = 28 * 1024**3 / 1000**3 + ENGINE_IMAGE_DISK_GB.value + NODE_OTHER_IMAGES_GB.value
    minimum = int(found.split("at least ")[1].split(",")[0])
    assert minimum * DISK_USABLE_FRACTION.value >= need > (minimum - 1) * DISK_USABLE_FRACTION.value


def test_the_shipped_volumes_hold_their_engines(config_copy: Path) -> None:
    for env in ("dev", "prod"):
        config = load_checked(config_copy, env)
        assert not [w for w in config.warnings if "ebs_gb" in str(w)]


def test_more_engines_per_node_and_distinct_images_need_more_disk(config_copy: Path) -> None:
    """Four TP-1 replicas on a 4-GPU node, two endpoints with two engine images: what the node holds adds up."""

    def env_change(env: dict[str, Any]) -> None:
        _gpu_group(env).update(instance_type="ml.g6e.12xlarge", count=2, ebs_gb=150)

    def lob_change(lob: dict[str, Any]) -> None:
        first = lob["endpoints"][0]
        first.update(instance_type="ml.g6e.12xlarge", mode="standalone")
        second = {**first, "name": "qwen3-8b-vllm", "cache": {**first["cache"], "connector": "vllm"}}
        lob["endpoints"].append(second)
        lob["gpu_quota"] = 8

    _edit(config_copy / "environments" / "dev.yaml", env_change)
    _edit(config_copy / "lobs" / "retail.yaml", lob_change)
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "dev")
    (found,) = [str(p) for p in err.value.problems if ".ebs_gb" in str(p)]
    assert "2 engine image(s)" in found and "x retail/qwen3-8b " in found and "x retail/qwen3-8b-vllm " in found


def test_an_existing_clusters_volumes_are_not_checked() -> None:
    from tests.support import CONFIG_DIR

    config = load_checked(CONFIG_DIR, "byoc")
    assert not [w for w in config.warnings if "ebs_gb" in str(w)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"replicas": 1}, "endpoints[0].replicas"),
        (
            {"replicas": 1, "mode": "standalone", "autoscaling": {
                "min_replicas": 1, "max_replicas": 2, "trigger": {"signal": "queue_per_replica", "target": 4}}},
            "endpoints[0].autoscaling.min_replicas",
        ),
    ],
)  # fmt: skip
def test_an_endpoint_that_can_run_on_one_replica_is_warned(
    config_copy: Path, change: dict[str, Any], field: str
) -> None:
    _edit(config_copy / "lobs" / "retail.yaml", lambda lob: lob["endpoints"][0].update(change))
    if "autoscaling" in change:  # KEDA for a standalone endpoint: the operator's (rules/autoscaling.py)
        _edit(
            config_copy / "environments" / "dev.yaml",
            lambda env: env.update(
                keda={"source": "inference-operator", "prometheus_url": "http://prometheus.monitoring:9090"}
            ),
        )
    config = load_checked(config_copy, "dev")
    found = [str(w) for w in config.warnings if "voluntary disruptions" in str(w)]
    assert len(found) == 1 and f"lobs/retail.yaml: {field}: with one replica" in found[0], found


def test_a_standalone_endpoint_holding_every_gpu_is_warned_about_drains(config_copy: Path) -> None:
    _edit(config_copy / "environments" / "dev.yaml", lambda env: _gpu_group(env).update(count=2))
    _edit(config_copy / "lobs" / "retail.yaml", lambda lob: lob["endpoints"][0].update(mode="standalone"))
    config = load_checked(config_copy, "dev")
    found = [str(w) for w in config.warnings if "node drain cannot start elsewhere" in str(w)]
    assert len(found) == 1 and "endpoints[0].replicas" in found[0], [str(w) for w in config.warnings]
