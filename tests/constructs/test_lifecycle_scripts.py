"""The HyperPod lifecycle scripts, run for real against a sandbox: stubbed system commands, temporary folders."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvtier.constructs.hyperpod import LIFECYCLE_DIR

# Stubs keep state in $STATE: `mounts` (mounted paths) and `devices` ("<path> <device>" lines, longest prefix wins).
STUBS = {
    "mountpoint": 'grep -qxF "$2" "$STATE/mounts"',
    "findmnt": (
        'target="${@: -1}"; best=""; dev=rootfs\n'
        'while read -r path device; do case "$target/" in "$path"/*) [ ${#path} -gt ${#best} ] && best=$path && dev=$device;; esac; '
        'done < "$STATE/devices"\necho "$dev"'
    ),
    "mount": '[ "$1" = --bind ] || exit 2; echo "$3 $(findmnt -rno SOURCE --target "$2")" >> "$STATE/devices"',
    "systemctl": (
        'echo "systemctl $*" >> "$STATE/calls"\n'
        'if [ "$1" = is-active ]; then grep -qxF "${@: -1}" "$STATE/active" 2>/dev/null; fi'
    ),
    "df": "echo Size; echo 600G",
    "sleep": 'echo "sleep $*" >> "$STATE/calls"',
}


@pytest.fixture()
def sandbox(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        stub = bin_dir / name
        stub.write_text(f"#!/usr/bin/env bash\n{body}\n")
        stub.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    ebs, nvme = tmp_path / "opt-sagemaker", tmp_path / "nvme"
    containerd, kubelet = tmp_path / "var-lib-containerd", tmp_path / "var-lib-kubelet"
    for folder in (ebs, nvme, containerd, kubelet):
        folder.mkdir()
    (containerd / "image.layer").write_text("layer")
    (kubelet / "pods").mkdir()
    (state / "mounts").write_text(f"{ebs}\n{nvme}\n")
    (state / "devices").write_text(f"{ebs} /dev/nvme1n1\n{nvme} /dev/md0\n")
    (tmp_path / "fstab").write_text("")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STATE": str(state),
        "KVTIER_LOG_FILE": str(tmp_path / "log" / "kvtier.log"),
        "KVTIER_EBS_ROOT": str(ebs),
        "KVTIER_NVME_ROOT": str(nvme),
        "KVTIER_FSTAB": str(tmp_path / "fstab"),
        "KVTIER_MOUNT_WAIT_S": "0",
        "KVTIER_CONTAINERD_DIR": str(containerd),
        "KVTIER_KUBELET_DIR": str(kubelet),
    }


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LIFECYCLE_DIR / script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_gpu_node_keeps_runtime_on_ebs_and_prepares_the_curvine_dir(sandbox: dict[str, str]) -> None:
    result = _run("on_create_gpu.sh", sandbox)
    assert result.returncode == 0, result.stderr
    ebs, nvme = Path(sandbox["KVTIER_EBS_ROOT"]), Path(sandbox["KVTIER_NVME_ROOT"])
    assert (ebs / "containerd" / "image.layer").read_text() == "layer"  # existing data moved, not lost
    assert (ebs / "kubelet" / "pods").is_dir()
    fstab = Path(sandbox["KVTIER_FSTAB"]).read_text().splitlines()
    assert fstab == [
        f"{ebs}/containerd {sandbox['KVTIER_CONTAINERD_DIR']} none bind,x-systemd.requires-mounts-for={ebs} 0 0",
        f"{ebs}/kubelet {sandbox['KVTIER_KUBELET_DIR']} none bind,x-systemd.requires-mounts-for={ebs} 0 0",
    ]
    curvine = nvme / "curvine-data"
    assert curvine.is_dir() and oct(curvine.stat().st_mode & 0o777) == "0o700"
    calls = (Path(sandbox["STATE"]) / "calls").read_text()
    # Issue 26: nothing was running, so nothing is stopped or started (HyperPod starts kubelet itself).
    assert "systemctl stop" not in calls and "systemctl start" not in calls


def test_services_already_running_are_stopped_and_restarted(sandbox: dict[str, str]) -> None:
    (Path(sandbox["STATE"]) / "active").write_text("containerd\n")  # kubelet not started yet
    assert _run("on_create_gpu.sh", sandbox).returncode == 0
    calls = (Path(sandbox["STATE"]) / "calls").read_text()
    assert "systemctl stop containerd\n" in calls and "systemctl start containerd\n" in calls
    assert "kubelet" not in calls.replace("is-active --quiet kubelet", "")


def test_rerun_is_idempotent(sandbox: dict[str, str]) -> None:
    assert _run("on_create_gpu.sh", sandbox).returncode == 0
    second = _run("on_create_gpu.sh", sandbox)
    assert second.returncode == 0, second.stderr
    assert "is already on /dev/nvme1n1" in second.stdout
    assert len(Path(sandbox["KVTIER_FSTAB"]).read_text().splitlines()) == 2


def test_system_node_does_not_touch_the_instance_store(sandbox: dict[str, str]) -> None:
    assert _run("on_create_system.sh", sandbox).returncode == 0
    assert not (Path(sandbox["KVTIER_NVME_ROOT"]) / "curvine-data").exists()


def test_missing_instance_store_fails_the_node_loudly(sandbox: dict[str, str]) -> None:
    state = Path(sandbox["STATE"])
    (state / "mounts").write_text(sandbox["KVTIER_EBS_ROOT"] + "\n")
    result = _run("on_create_gpu.sh", sandbox)
    assert result.returncode == 1
    assert "no instance store for L2" in result.stdout
    assert "sleep 60" in (state / "calls").read_text()  # waits for the logs to upload, as AWS's scripts do


def test_missing_ebs_volume_fails_before_moving_anything(sandbox: dict[str, str]) -> None:
    (Path(sandbox["STATE"]) / "mounts").write_text(sandbox["KVTIER_NVME_ROOT"] + "\n")
    result = _run("on_create_gpu.sh", sandbox)
    assert result.returncode == 1
    assert "set ebs_gb for the group" in result.stdout
    assert (Path(sandbox["KVTIER_CONTAINERD_DIR"]) / "image.layer").exists()
