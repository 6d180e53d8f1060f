"""The node-fit rule: vLLM + Curvine (worker, FUSE, CSI node) + kvtier's L2 pods + the other DaemonSets against the
allocatable CPU and memory of every GPU instance type (the FUSE pod is bound by nodeName, so nothing else keeps room)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import INSTANCE_TYPES
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from kvtier.sizing import allocatable, kube_reserved_cpu_millis, kube_reserved_memory_mib
from tests.support import many_lobs


def use_instance(config_dir: Path, instance_type: str) -> None:
    """dev's GPU group and the retail endpoint on `instance_type`, with a worker size its NVMe holds."""
    env_file = config_dir / "environments" / "dev.yaml"
    env: dict[str, Any] = yaml.safe_load(env_file.read_text())
    next(g for g in env["hyperpod"]["instance_groups"] if g["role"] == "gpu")["instance_type"] = instance_type
    env["curvine"]["worker_data_gb"] = 300
    env_file.write_text(yaml.safe_dump(env, sort_keys=False))
    lob_file = config_dir / "lobs" / "retail.yaml"
    lob: dict[str, Any] = yaml.safe_load(lob_file.read_text())
    lob["endpoints"][0]["instance_type"] = instance_type
    lob_file.write_text(yaml.safe_dump(lob, sort_keys=False))


def test_a_g6e_2xlarge_gpu_group_with_curvine_is_rejected_with_the_numbers(config_copy: Path) -> None:
    use_instance(config_copy, "ml.g6e.2xlarge")
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "dev")
    found = [str(p) for p in err.value.problems if "can allocate" in str(p)]
    assert len(found) == 1, [str(p) for p in err.value.problems]
    message = found[0]
    assert "environments/dev.yaml: hyperpod.instance_groups[1].instance_type: " in message
    # 8 vCPU - 90m kube-reserved = 7.91; vLLM 4 (half the vCPUs) + worker 2 + FUSE 2 + CSI node 0.07 + healer 0.05
    # + 1 janitor 0.01 + other DaemonSets 0.965 = 9.095.
    for words in (
        "a ml.g6e.2xlarge node can allocate 7.91 CPU (8 vCPU - 0.09 kube-reserved)",
        "requests 9.095 CPU (vLLM (1 x retail/qwen3-8b) 4, Curvine worker 2, FUSE 2, CSI node 0.07, L2 healer 0.05, "
        "L2 janitors x1 0.01, other DaemonSets 0.965)",
        "not enough CPU",
        "the kubelet rejects the FUSE pod",
    ):
        assert words in message, message


def test_a_g6e_4xlarge_gpu_group_with_curvine_is_accepted(config_copy: Path) -> None:
    use_instance(config_copy, "ml.g6e.4xlarge")
    config = load_checked(config_copy, "dev")
    assert not [w for w in config.warnings if "allocate" in str(w)]
    # The margin the acceptance rests on: 15.89 allocatable against 13.185 requested.
    assert allocatable(INSTANCE_TYPES["ml.g6e.4xlarge"]).cpu_millis == 15_890


@pytest.mark.parametrize(("vcpus", "reserved"), [(1, 60), (2, 70), (4, 80), (8, 90), (16, 110), (192, 550)])
def test_kube_reserved_cpu_is_the_eks_ami_formula(vcpus: int, reserved: int) -> None:
    # nodeadm getCPUMillicoresToReserve: 6% of core 1, 1% of core 2, 0.5% of cores 3-4, 0.25% of the rest.
    assert kube_reserved_cpu_millis(vcpus) == reserved


def test_kube_reserved_memory_is_the_eks_ami_formula() -> None:
    assert kube_reserved_memory_mib(234) == 11 * 234 + 255 == 2829
    node = allocatable(INSTANCE_TYPES["ml.g6e.4xlarge"])
    assert node.max_pods == 234
    assert node.reserved_memory_bytes == (2829 + 100) * 1024**2


def test_fifty_lobs_with_their_shipped_settings_fit_ml_g6e_4xlarge(tmp_path: Path) -> None:
    """The product's promise: a stack per line of business. Fifty of them (prod's LOBs, copied in turn) each add a
    janitor that the worst case places on one GPU node; requests of 10m CPU keep that within the node."""
    config = many_lobs(tmp_path / "config", 50)
    checked = load_checked(config, "lobs50")
    assert len(checked.env.lobs) == 50
    assert {g.instance_type for g in checked.env.groups("gpu")} == {"ml.g6e.4xlarge"}
