"""Version pins that must move together, in one place.

Kubernetes: one supported version at a time (design). Upgrading means changing, together: `KUBERNETES_VERSION`,
the `cdk8s-plus-NN` and `aws-cdk.lambda-layer-kubectl-vNN` pins in requirements.txt and their imports in
`kvtier/k8s/base.py` / `kvtier/constructs/eks.py`, and `K8S_SCHEMA_VERSION` used by the manifest validation tests.
"""

from __future__ import annotations

KUBERNETES_VERSION = "1.34"  # newest version HyperPod documents (1.28-1.34), design "Kubernetes version"
K8S_SCHEMA_VERSION = "1.34.0"  # kubernetes-validate bundled schema used in tests
UPGRADE_HINT = (
    "kvtier supports exactly one Kubernetes version; to move to another, change together KUBERNETES_VERSION in "
    "kvtier/versions.py, the cdk8s-plus-NN and aws-cdk.lambda-layer-kubectl-vNN pins in requirements.txt and their "
    "imports, and K8S_SCHEMA_VERSION"
)
