"""`KVTIER_ADMISSION_BREAK`: render the manifests as they were before issue 33's admission controls, for the tests
that show those controls are what makes them pass. A comma-separated list of parts: `psa` (LOB namespaces without
Pod Security labels), `guard` (no LOB ClusterPolicy), `keda` (TriggerAuthentications without the LOB's role)."""

from __future__ import annotations

import os

ADMISSION_BREAK = "KVTIER_ADMISSION_BREAK"


def admission_broken(part: str) -> bool:
    return part in os.environ.get(ADMISSION_BREAK, "").split(",")
