#!/usr/bin/env bash
# kvtier lifecycle helpers, sourced by on_create_<role>.sh. HyperPod downloads the whole SourceS3Uri prefix
# to the node and runs the group's OnCreate script from it.
set -euo pipefail

LOG_FILE=${KVTIER_LOG_FILE:-/var/log/provision/kvtier.log}
EBS_ROOT=${KVTIER_EBS_ROOT:-/opt/sagemaker}        # the group's EBS volume (InstanceStorageConfigs)
NVME_ROOT=${KVTIER_NVME_ROOT:-/opt/dlami/nvme}     # the local instance store, pooled by Curvine on GPU nodes
FSTAB=${KVTIER_FSTAB:-/etc/fstab}
MOUNT_WAIT_S=${KVTIER_MOUNT_WAIT_S:-120}
CONTAINERD_DIR=${KVTIER_CONTAINERD_DIR:-/var/lib/containerd}
KUBELET_DIR=${KVTIER_KUBELET_DIR:-/var/lib/kubelet}

mkdir -p "$(dirname "$LOG_FILE")"

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) kvtier: $*" | tee -a "$LOG_FILE"; }

# Like AWS's reference lifecycle scripts: wait before failing so the node's logs reach CloudWatch first.
die() { log "ERROR: $*"; sleep "${KVTIER_DIE_WAIT_S:-60}"; exit 1; }

wait_for_mount() {
  local path=$1 waited=0
  until mountpoint -q "$path"; do
    (( waited >= MOUNT_WAIT_S )) && return 1
    sleep 5
    waited=$(( waited + 5 ))
  done
}

device_of() { findmnt -rno SOURCE --target "$1"; }

# relocate DIR TARGET: keep DIR's data on TARGET through a bind mount that survives reboots.
relocate() {
  local dir=$1 target=$2
  mkdir -p "$dir" "$target"
  if [ "$(device_of "$dir")" = "$(device_of "$target")" ]; then
    log "$dir is already on $(device_of "$target")"
    return 0
  fi
  cp -a "$dir/." "$target/"
  find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  mount --bind "$target" "$dir"
  grep -qs " $dir none bind" "$FSTAB" || echo "$target $dir none bind,x-systemd.requires-mounts-for=$EBS_ROOT 0 0" >> "$FSTAB"
  log "moved $dir onto $target"
}

# Containerd images and kubelet volumes stay on EBS: the instance-store NVMe belongs to the Curvine pool.
keep_runtime_off_nvme() {
  wait_for_mount "$EBS_ROOT" || die "$EBS_ROOT (the group's EBS volume) is not mounted; set ebs_gb for the group"
  # Stop and restart only what was already running: starting kubelet before HyperPod's own bootstrap is not
  # what AWS's reference scripts do (they leave start-up to HyperPod; docs/references.md "Issue 26").
  local running=() unit
  for unit in kubelet containerd; do
    if systemctl is-active --quiet "$unit"; then running+=("$unit"); fi
  done
  if [ ${#running[@]} -gt 0 ]; then systemctl stop "${running[@]}" || true; fi
  relocate "$CONTAINERD_DIR" "$EBS_ROOT/containerd"
  relocate "$KUBELET_DIR" "$EBS_ROOT/kubelet"
  systemctl daemon-reload
  if [ ${#running[@]} -gt 0 ]; then systemctl start "${running[@]}" || true; fi
  if mountpoint -q "$NVME_ROOT"; then
    for dir in "$CONTAINERD_DIR" "$KUBELET_DIR"; do
      [ "$(device_of "$dir")" != "$(device_of "$NVME_ROOT")" ] || die "$dir is still on the instance store"
    done
  fi
}

# The Curvine worker's data directory on the instance store (hostPath of the worker DaemonSet).
prepare_curvine_dir() {
  wait_for_mount "$NVME_ROOT" || die "$NVME_ROOT is not mounted: this instance type has no instance store for L2"
  mkdir -p "$NVME_ROOT/curvine-data"
  chmod 0700 "$NVME_ROOT/curvine-data"
  log "prepared $NVME_ROOT/curvine-data ($(df -h --output=size "$NVME_ROOT" | tail -1 | tr -d ' ') instance store)"
}
