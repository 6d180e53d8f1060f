"""EKS add-ons: the one list of every add-on kvtier installs, with its version, phase and IAM role.

Design "Add-ons and controllers: one owner each": the cluster stack owns the networking add-ons (installed before
any HyperPod node) and the add-ons whose pods need nodes (after the HyperPod cluster); the platform stack owns the
Inference Operator add-on. Nothing else declares an add-on. Plain data (no aws_cdk), so config validation and
`kvtier status` can read it; kvtier/constructs/eks_addons.py turns it into resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Phase = Literal["network", "nodes", "platform"]


@dataclass(frozen=True)
class AddonSpec:
    name: str
    version: str
    phase: Phase
    source: str  # where the version pin comes from
    namespace: str = "kube-system"
    service_account: str | None = None  # gets an IRSA role when set
    managed_policies: tuple[str, ...] = ()
    configuration: Mapping[str, Any] = field(default_factory=dict)


# Versions are pinned; none could be read from a live `describe-addon-versions` here. A version EKS does not offer
# for 1.34 fails the deployment at once (CloudFormation rejects the add-on), never silently. Sources: docs/references.md.
_BLUEPRINTS = "awslabs/cdk-eks-blueprints@0b82904e lib/addons (Kubernetes 1.34)"
_OPERATOR_SCRIPT = "aws/sagemaker-hyperpod-cli@c26d027d:helm_chart/HyperPodHelmChart/charts/inference-operator/migration/helm_to_addon.sh"

ADDONS: tuple[AddonSpec, ...] = (
    # Before nodes (reference aws-hyperpod.md 8, item 4: the HyperPod EKS prerequisites).
    AddonSpec(
        "vpc-cni",
        "v1.20.4-eksbuild.2",  # HyperPod needs >= 1.18.3
        "network",
        _BLUEPRINTS,
        service_account="aws-node",
        managed_policies=("AmazonEKS_CNI_Policy",),
        # Network policy enforcement, which the LOB NetworkPolicies rely on (a string, not a boolean).
        configuration={"enableNetworkPolicy": "true"},
    ),
    AddonSpec("kube-proxy", "v1.34.6-eksbuild.2", "network", "EKS user guide, managing-kube-proxy (1.34 row)"),
    AddonSpec("coredns", "v1.13.2-eksbuild.11", "network", "EKS user guide, managing-coredns (1.34 row)"),
    AddonSpec("eks-pod-identity-agent", "v1.3.10-eksbuild.2", "network", _BLUEPRINTS),
    # After the HyperPod cluster: their pods need nodes.
    AddonSpec(
        "aws-ebs-csi-driver",
        "v1.56.0-eksbuild.1",
        "nodes",
        _BLUEPRINTS,
        service_account="ebs-csi-controller-sa",
        managed_policies=("service-role/AmazonEBSCSIDriverPolicy",),
    ),
    AddonSpec("metrics-server", "v0.7.2-eksbuild.4", "nodes", _OPERATOR_SCRIPT),
    AddonSpec("cert-manager", "v1.18.2-eksbuild.2", "nodes", _OPERATOR_SCRIPT),
    AddonSpec(
        "aws-mountpoint-s3-csi-driver",
        "v1.14.1-eksbuild.1",
        "nodes",
        _OPERATOR_SCRIPT,
        service_account="s3-csi-driver-sa",
    ),
    AddonSpec(
        "aws-fsx-csi-driver",
        "v1.6.0-eksbuild.1",
        "nodes",
        _OPERATOR_SCRIPT,
        # Installed because the Inference Operator checks for it; kvtier mounts no FSx, so the driver gets no IAM
        # role (AWS's script grants it AmazonFSxFullAccess). Give it one if your endpoints load weights from FSx.
    ),
    # Platform stack: the Inference Operator. Its roles go through its configuration values, built with the roles
    # and TLS bucket in kvtier/constructs/inference_operator.py (the only string known: notes operator-addons.md 1.1).
    AddonSpec(
        "amazon-sagemaker-hyperpod-inference",
        "v1.0.0-eksbuild.1",
        "platform",
        _OPERATOR_SCRIPT,
        namespace="hyperpod-inference-system",
    ),
)


def addons(phase: Phase) -> tuple[AddonSpec, ...]:
    return tuple(a for a in ADDONS if a.phase == phase)


def addon(name: str) -> AddonSpec:
    return next(a for a in ADDONS if a.name == name)
