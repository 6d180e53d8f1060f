#!/usr/bin/env bash
# OnCreate of kvtier `gpu` instance groups: vLLM, Curvine workers and the CSI node plugin.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
log "gpu node: start"
keep_runtime_off_nvme
prepare_curvine_dir
log "gpu node: done"
