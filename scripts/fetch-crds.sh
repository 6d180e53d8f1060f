#!/usr/bin/env bash
# Fetch the pinned upstream CRDs the tests validate against into .crds/.
# Needs network; never run by the tests. Pins: kvtier/versions.py (HYPERPOD_CLI_CRD_COMMIT, KYVERNO_APP_VERSION).
set -euo pipefail

cd "$(dirname "$0")/.."
HPCLI_COMMIT="011ca927123e02b35a399935bbb3ab1905fe33c7"   # aws/sagemaker-hyperpod-cli, HYPERPOD_CLI_CRD_COMMIT
KYVERNO_TAG="v1.19.0"                                      # kyverno/kyverno, KYVERNO_APP_VERSION (chart 3.9.0)
PROM_OPERATOR_TAG="v0.93.0"                                # prometheus-operator, tests/crds/prometheus-operator/README.md
KEDA_TAG="v2.17.1"                                         # kedacore/keda, KEDA_VERSION (the operator add-on's KEDA)
OUT=".crds"

HPCLI="https://raw.githubusercontent.com/aws/sagemaker-hyperpod-cli/${HPCLI_COMMIT}/helm_chart/HyperPodHelmChart/charts/inference-operator/config/crd"
KYVERNO="https://raw.githubusercontent.com/kyverno/kyverno/${KYVERNO_TAG}/config/crds/kyverno"

PROM="https://raw.githubusercontent.com/prometheus-operator/prometheus-operator/${PROM_OPERATOR_TAG}/example/prometheus-operator-crd"
KEDA="https://raw.githubusercontent.com/kedacore/keda/${KEDA_TAG}/config/crd/bases"

# The pins above must be the ones the code uses.
grep -q "HYPERPOD_CLI_CRD_COMMIT = \"${HPCLI_COMMIT}\"" kvtier/versions.py
grep -q "KYVERNO_APP_VERSION = \"${KYVERNO_TAG}\"" kvtier/versions.py
grep -q "prometheus-operator@${PROM_OPERATOR_TAG}" tests/crds/prometheus-operator/README.md
grep -q "KEDA_VERSION = \"${KEDA_TAG}\"" kvtier/versions.py

fetch() {  # url target
  local tmp
  tmp="$(mktemp)"
  curl --fail --silent --show-error --location --retry 3 --output "$tmp" "$1"
  mv "$tmp" "$2"
  echo "fetched $2"
}

mkdir -p "$OUT/kyverno"
for crd in inferenceendpointconfigs jumpstartmodels sagemakerendpointregistrations; do
  fetch "$HPCLI/inference.sagemaker.aws.amazon.com_${crd}.yaml" "$OUT/inference.sagemaker.aws.amazon.com_${crd}.yaml"
done
for crd in policies clusterpolicies; do
  fetch "$KYVERNO/kyverno.io_${crd}.yaml" "$OUT/kyverno/kyverno.io_${crd}.yaml"
done
# Prometheus Operator CRDs are kept in the repository: CI is offline and the shared reference folder lacks them.
for crd in podmonitors servicemonitors prometheusrules; do
  fetch "$PROM/monitoring.coreos.com_${crd}.yaml" "tests/crds/prometheus-operator/monitoring.coreos.com_${crd}.yaml"
done
# KEDA CRDs, likewise kept in the repository (tests/crds/keda/README.md).
for crd in scaledobjects triggerauthentications; do
  fetch "$KEDA/keda.sh_${crd}.yaml" "tests/crds/keda/keda.sh_${crd}.yaml"
done
