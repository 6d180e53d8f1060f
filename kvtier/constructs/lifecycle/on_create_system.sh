#!/usr/bin/env bash
# OnCreate of kvtier `system` instance groups: controllers, Curvine masters, routers.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"
log "system node: start"
keep_runtime_off_nvme
log "system node: done"
