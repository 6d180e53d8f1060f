"""Each LOB's guard: a Kyverno `ClusterPolicy` `kvtier-guard-<lob>` that a LOB-namespace admin cannot edit
(docs/security.md). The LOB's namespaced `Policy` (kyverno_policy.py) is that admin's to delete, so everything that
keeps one LOB out of another's data is here, cluster-scoped:

- pods in the namespace stay off the node: they pass every Pod Security baseline control but one allowance, a hostPath
  `/dev/shm` (the operator's pods are reported to mount it; docs/references.md), so also where Pod Security only
  warns (kyverno_conditions.py); no inline Curvine CSI volume, and an inline S3 CSI volume only on the LOB's own
  buckets;
- Services in the namespace set no `externalIPs`: kube-proxy would send every node's and pod's traffic for those
  addresses (a Curvine master's, another LOB's engine's) to the LOB's pods (CVE-2020-8554; EKS does not enable the
  DenyServiceExternalIPs admission plugin);
- claims in the namespace name no other LOB's L2 volume; Curvine volumes claimed from the namespace point into the
  LOB's own L2 directory, S3 volumes claimed from it at the LOB's own buckets (the operator creates those from the
  InferenceEndpointConfig);
- InferenceEndpointConfigs name only the LOB's own (bucket, prefix) pairs and no hostPath but `/dev/shm`;
- KEDA: a TriggerAuthentication names exactly the LOB's KEDA role (`podIdentity: {provider: aws, roleArn}`), never
  `identityOwner: workload` or `aws-eks` (both read a role from a service account annotation the LOB admin writes),
  no `awsRoleArn` parameter and no AWS Secrets Manager (both sign with KEDA's own identity); ScaledObjects and
  ScaledJobs use no ClusterTriggerAuthentication and no `identityOwner: operator` trigger (KEDA's own identity).
  The operator's own KEDA objects are excluded: what it renders from the IEC is UNVERIFIED (docs/security.md);
- the namespace's Pod Security labels keep the values kvtier renders (kvtier's own apply passes; any other change
  fails), so whoever may edit the Namespace cannot lower them.

Validate only, `Enforce`, admission only, CREATE and UPDATE. Its webhook fails closed for this LOB's requests only
(matchConditions, as in kyverno_policy.py). `KVTIER_ADMISSION_BREAK=guard` renders no guard (the old manifests).
"""

from __future__ import annotations

from typing import Any

from kvtier.config.endpoint import S3Model
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.breaks import admission_broken
from kvtier.k8s.curvine.names import CSI_DRIVER
from kvtier.k8s.kyverno_conditions import VOLUMES, any_not_in, non_empty, pod_baseline
from kvtier.k8s.kyverno_conditions import var as _n
from kvtier.k8s.kyverno_policy import WEBHOOK_TIMEOUT_S
from kvtier.k8s.namespace import PSA_MODES, PSA_PREFIX, psa_labels
from kvtier.naming import l2_lob_path, lob_namespace

S3_CSI_DRIVER = "s3.csi.aws.com"  # Mountpoint for Amazon S3 CSI driver
ALLOWED_HOST_PATHS = ["/dev/shm"]
OPERATOR_SUBJECT = {  # the Inference Operator's controller (kvtier/constructs/inference_operator.py CONTROLLER_SA)
    "kind": "ServiceAccount",
    "name": "hyperpod-inference-controller-manager",
    "namespace": "hyperpod-inference-system",
}
IEC_KIND = "inference.sagemaker.aws.amazon.com/v1/InferenceEndpointConfig"


def guard_name(lob: str) -> str:
    return f"kvtier-guard-{lob}"


def keda_role_name(env: str, lob: str) -> str:
    """The LOB's KEDA role (12 + 20 + 14 characters, IAM allows 64)."""
    return f"kvtier-{env}-{lob}-keda"


def own_models(lob: LineOfBusiness) -> list[tuple[str, str]]:
    """The (bucket, prefix) pairs the LOB file names."""
    return sorted({(e.model.bucket, e.model.prefix) for e in lob.endpoints if isinstance(e.model, S3Model)})


def _rule(name: str, kinds: list[str], message: str, conditions: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"kinds": kinds, "operations": ["CREATE", "UPDATE"], **match}
    return {
        "name": name,
        "match": {"any": [{"resources": resources}]},
        "validate": {"failureAction": "Enforce", "message": message, "deny": {"conditions": {"any": conditions}}},
    }


def _pods(lob: str, namespace: str, buckets: list[str]) -> dict[str, Any]:
    return _rule(
        "pods-stay-off-the-node",
        ["Pod"],
        f"{namespace}: a pod must pass the Pod Security baseline level (a hostPath {ALLOWED_HOST_PATHS} excepted) "
        f"and mount no inline Curvine volume or S3 volume outside LOB {lob}'s buckets (kvtier ClusterPolicy "
        f"{guard_name(lob)}; docs/security.md)",
        [
            *pod_baseline(ALLOWED_HOST_PATHS),
            non_empty(f"{VOLUMES}[?csi.driver == '{CSI_DRIVER}']"),
            *any_not_in(f"{VOLUMES}[?csi.driver == '{S3_CSI_DRIVER}'].csi.volumeAttributes.bucketName", buckets),
        ],
        namespaces=[namespace],
    )


def _services(lob: str, namespace: str) -> dict[str, Any]:
    return _rule(
        "services-have-no-external-ips",
        ["Service"],
        f"{namespace}: a Service may set no externalIPs (they take other pods' traffic: CVE-2020-8554) (kvtier "
        f"ClusterPolicy {guard_name(lob)})",
        [non_empty("request.object.spec.externalIPs || `[]`")],
        namespaces=[namespace],
    )


def _claims(env: str, lob: str, namespace: str) -> dict[str, Any]:
    own = f"kvtier-{env}-{lob}-l2"  # kvtier/stacks/lob.py l2_volume_name
    volume = "(request.object.spec.volumeName || '')"
    return _rule(
        "claims-name-only-own-volumes",
        ["PersistentVolumeClaim"],
        f"{namespace}: a claim may name no kvtier volume but {own} (kvtier ClusterPolicy {guard_name(lob)})",
        [
            {
                "key": _n(f"starts_with({volume}, 'kvtier-') && {volume} != '{own}'"),
                "operator": "Equals",
                "value": True,
            }
        ],
        namespaces=[namespace],
    )


def _volumes(env: str, lob: str, namespace: str, buckets: list[str]) -> dict[str, Any]:
    path = l2_lob_path(env, lob)
    curvine = "(request.object.spec.csi.volumeAttributes.\"curvine-path\" || '')"
    rule = _rule(
        "volumes-claimed-here-stay-in-the-lob",
        ["PersistentVolume"],
        f"a volume claimed from {namespace} must be a Curvine volume under {path} or an S3 volume on LOB {lob}'s "
        f"buckets (kvtier ClusterPolicy {guard_name(lob)})",
        [
            {
                "key": _n(
                    f"request.object.spec.csi.driver == '{CSI_DRIVER}' && {curvine} != '{path}' "
                    f"&& !starts_with({curvine}, '{path}/')"
                ),
                "operator": "Equals",
                "value": True,
            },
            *any_not_in(
                f"request.object.spec.csi.driver == '{S3_CSI_DRIVER}' && "
                "request.object.spec.csi.volumeAttributes.bucketName || ''",
                [*buckets, ""],
            ),
        ],
    )
    rule["preconditions"] = {
        "all": [{"key": _n("request.object.spec.claimRef.namespace || ''"), "operator": "Equals", "value": namespace}]
    }
    return rule


def _endpoints(lob: LineOfBusiness, namespace: str) -> dict[str, Any]:
    source = "request.object.spec.modelSourceConfig"
    pairs = [f"{bucket}/{prefix}" for bucket, prefix in own_models(lob)]
    return _rule(
        "endpoints-name-only-own-models",
        [IEC_KIND],
        f"{namespace}: an InferenceEndpointConfig may read only LOB {lob.name}'s S3 models {pairs or '(none)'} and "
        f"mount no hostPath but {ALLOWED_HOST_PATHS} (kvtier ClusterPolicy {guard_name(lob.name)})",
        [
            *any_not_in(
                f"{source}.modelSourceType == 's3' && join('/', [{source}.s3Storage.bucketName || '', "
                f"{source}.modelLocation || '']) || ''",
                [*pairs, ""],
            ),
            *any_not_in("request.object.spec.kubernetes.volumes[?hostPath].hostPath.path || `[]`", ALLOWED_HOST_PATHS),
        ],
        namespaces=[namespace],
    )


def _keda(lob: str, namespace: str, role_arn: str) -> list[dict[str, Any]]:
    identity = "request.object.spec.podIdentity"
    auth = _rule(
        "trigger-authentications-name-the-lob-role",
        ["keda.sh/v1alpha1/TriggerAuthentication"],
        f"{namespace}: an AWS TriggerAuthentication must be podIdentity {{provider: aws, roleArn: {role_arn}}}, with "
        f"no identityOwner, awsRoleArn parameter or awsSecretManager (kvtier ClusterPolicy {guard_name(lob)})",
        [
            {"key": _n(f"{identity}.provider || ''"), "operator": "Equals", "value": "aws-eks"},
            *any_not_in(f"{identity}.provider == 'aws' && ({identity}.roleArn || 'none') || ''", [role_arn, ""]),
            {"key": _n(f"{identity}.identityOwner || ''"), "operator": "NotEquals", "value": ""},
            {"key": _n("contains(to_string(request.object.spec), 'awsRoleArn')"), "operator": "Equals", "value": True},
            non_empty("[request.object.spec.awsSecretManager][?@]"),
        ],
        namespaces=[namespace],
    )
    triggers = "(request.object.spec.triggers || `[]`)"
    scaled = _rule(
        "scalers-use-only-the-lob-identity",
        ["keda.sh/v1alpha1/ScaledObject", "keda.sh/v1alpha1/ScaledJob"],
        f"{namespace}: triggers may use no ClusterTriggerAuthentication and no identityOwner: operator (KEDA's own "
        f"identity) (kvtier ClusterPolicy {guard_name(lob)})",
        [
            non_empty(f"{triggers}[?authenticationRef.kind == 'ClusterTriggerAuthentication']"),
            non_empty(f"{triggers}[?metadata.identityOwner == 'operator']"),
        ],
        namespaces=[namespace],
    )
    for rule in (auth, scaled):
        rule["exclude"] = {"any": [{"subjects": [dict(OPERATOR_SUBJECT)]}]}
    return [auth, scaled]


def _labels(lob: str, namespace: str, operator_pods: bool) -> dict[str, Any]:
    expected = psa_labels(operator_pods=operator_pods)
    conditions = [
        {
            "key": _n(f"request.object.metadata.labels.\"{PSA_PREFIX}{mode}\" || ''"),
            "operator": "NotEquals",
            "value": expected.get(f"{PSA_PREFIX}{mode}", ""),
        }
        for mode in PSA_MODES
    ]
    return _rule(
        "namespace-keeps-its-pod-security",
        ["Namespace"],
        f"{namespace}: the Pod Security labels are kvtier's ({expected}); change them in kvtier "
        f"(kvtier ClusterPolicy {guard_name(lob)})",
        conditions,
        names=[namespace],
    )


def lob_guard(
    env: str,
    lob: LineOfBusiness,
    *,
    operator_pods: bool,
    inference_operator: bool,
    keda_role_arn: str | None,
) -> dict[str, Any]:
    """The LOB's ClusterPolicy. `inference_operator`: the cluster has the InferenceEndpointConfig CRD;
    `keda_role_arn`: the LOB's KEDA role where the cluster runs KEDA (Kyverno refuses a rule on an unknown kind)."""
    namespace = lob_namespace(lob.name)
    buckets = sorted({bucket for bucket, _ in own_models(lob)})
    rules = [
        _pods(lob.name, namespace, buckets),
        _services(lob.name, namespace),
        _claims(env, lob.name, namespace),
        _volumes(env, lob.name, namespace, buckets),
        _labels(lob.name, namespace, operator_pods),
    ]
    if inference_operator:
        rules.append(_endpoints(lob, namespace))
    if keda_role_arn is not None:
        rules += _keda(lob.name, namespace, keda_role_arn)
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": guard_name(lob.name)},
        "spec": {
            "admission": True,
            "background": False,
            "webhookConfiguration": {
                "failurePolicy": "Fail",
                "timeoutSeconds": WEBHOOK_TIMEOUT_S,
                "matchConditions": [
                    {
                        "name": "kvtier-lob-requests-only",
                        "expression": (
                            f"request.namespace == '{namespace}' || request.name == '{namespace}' || "
                            "request.kind.kind == 'PersistentVolume'"
                        ),
                    }
                ],
            },
            "rules": rules,
        },
    }


def add_lob_guard(chart: KvtierChart, env: str, lob: LineOfBusiness, **options: Any) -> bool:
    """Adds the guard (False under KVTIER_ADMISSION_BREAK=guard, which restores the old manifests)."""
    if admission_broken("guard"):
        return False
    api_object(chart, "lob-guard", lob_guard(env, lob, **options))
    return True
