"""The day-2 guard: `kvtier validate --previous <cdk.out>` refuses edits that replace or break things."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.connectors import lmcache
from kvtier.connectors.lmcache import DEFAULT_IMAGES, IMAGE_LMCACHE_VERSIONS
from kvtier.naming import L2_IDENTITY_ANNOTATION, L2_IDENTITY_FACTS_ANNOTATION
from kvtier.rules.day2 import CURVINE_MASTERS, IEC_KIND, autoscaler_handovers, cold_starts, compare, manifests
from kvtier.versions import OPERATOR_LMCACHE_VERSION, OPERATOR_VLLM_IMAGE, STANDALONE_VLLM_IMAGE
from tests.support import Synth


def _template(hyperpod: dict[str, Any] | None = None, objects: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if hyperpod is not None:
        resources["HyperPod"] = {"Type": "AWS::SageMaker::Cluster", "Properties": hyperpod}
    if objects is not None:
        resources["Manifest"] = {
            "Type": "Custom::AWSCDK-EKS-KubernetesResource",
            "Properties": {"Manifest": json.dumps(objects)},
        }
    return {"Resources": resources}


HYPERPOD: dict[str, Any] = {
    "ClusterName": "kvtier-dev",
    "VpcConfig": {"Subnets": ["a"]},
    "Orchestrator": {"Eks": {"ClusterArn": "x"}},
    "NodeRecovery": "Automatic",
    "InstanceGroups": [{"InstanceCount": 2}],
}
IEC: dict[str, Any] = {
    "kind": "InferenceEndpointConfig",
    "metadata": {"name": "qwen3-8b", "namespace": "kvtier-retail"},
    "spec": {"replicas": 2, "intelligentRoutingSpec": {"enabled": True, "routingStrategy": "prefixaware"}},
}
MASTERS: dict[str, Any] = {
    "kind": "StatefulSet",
    "metadata": {"name": "curvine-master", "namespace": "curvine"},
    "spec": {"replicas": 1},
}


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("ClusterName",), "kvtier-dev2", "HyperPod ClusterName"),
        (("VpcConfig", "Subnets"), ["b"], "HyperPod VpcConfig"),
        (("Orchestrator", "Eks", "ClusterArn"), "y", "HyperPod Orchestrator/Eks"),
    ],
)
def test_create_only_hyperpod_changes_are_named(path: tuple[str, ...], value: Any, expected: str) -> None:
    after = copy.deepcopy(HYPERPOD)
    target: Any = after
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    [change] = compare({"c": _template(HYPERPOD)}, {"c": _template(after)})
    assert change.what == expected and "replaces the HyperPod cluster" in change.why


def test_updatable_hyperpod_changes_pass() -> None:
    after = copy.deepcopy(HYPERPOD)
    after["InstanceGroups"][0]["InstanceCount"] = 4
    after["NodeRecovery"] = "None"
    assert compare({"c": _template(HYPERPOD)}, {"c": _template(after)}) == []


def test_master_count_and_routing_changes_are_named() -> None:
    masters = copy.deepcopy(MASTERS)
    masters["spec"]["replicas"] = 3
    iec = copy.deepcopy(IEC)
    iec["spec"]["intelligentRoutingSpec"]["routingStrategy"] = "kvaware"
    changes = compare({"p": _template(objects=[MASTERS, IEC])}, {"p": _template(objects=[masters, iec])})
    assert sorted(c.what for c in changes) == [
        "Curvine master count",
        "endpoint kvtier-retail/qwen3-8b intelligentRoutingSpec",
    ]
    iec["spec"]["intelligentRoutingSpec"] = IEC["spec"]["intelligentRoutingSpec"]
    iec["spec"]["replicas"] = 3  # scaling an endpoint is fine
    assert compare({"p": _template(objects=[IEC])}, {"p": _template(objects=[iec])}) == []


def test_new_and_removed_endpoints_are_not_replacements() -> None:
    assert compare({"p": _template(objects=[])}, {"p": _template(objects=[IEC])}) == []
    assert compare({"p": _template(objects=[IEC])}, {"p": _template(objects=[])}) == []


def _set(config_dir: Path, edit: Any) -> None:
    path = config_dir / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def test_guard_on_real_synths(dev: Synth, config_copy: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """capfd: also what the jsii kernel prints, such as a validation report's path (the synth folder is deleted)."""
    capsys = capfd
    previous = str(dev.outdir)
    assert cli(["validate", "--config-dir", str(config_copy), "--previous", previous]) == 0
    quiet = capsys.readouterr()
    assert "validation-report.json" not in quiet.out + quiet.err
    assert "configuration is valid" in quiet.out
    _set(config_copy, lambda d: d["hyperpod"].update(cluster_name="kvtier-dev-b"))
    assert cli(["validate", "--config-dir", str(config_copy), "--previous", previous]) == 1
    err = capsys.readouterr().err
    assert 'refused: kvtier-dev-cluster: HyperPod ClusterName: "kvtier-dev" -> "kvtier-dev-b"' in err
    assert cli(["validate", "--config-dir", str(config_copy), "--previous", previous, "--allow-replacement"]) == 0
    assert "allowed: kvtier-dev-cluster: HyperPod ClusterName" in capsys.readouterr().err


def _with_identity(obj: dict[str, Any], identity: str, **facts: Any) -> dict[str, Any]:
    notes = {L2_IDENTITY_ANNOTATION: identity, L2_IDENTITY_FACTS_ANNOTATION: json.dumps(facts)}
    return {**obj, "metadata": {**obj["metadata"], "annotations": notes}}


STANDALONE = {"kind": "Deployment", "metadata": {"name": "llama31-8b", "namespace": "kvtier-support"}, "spec": {}}


def test_a_changed_l2_identity_is_a_notice_naming_what_changed() -> None:
    before = [_with_identity(IEC, "aaaaaaaaaaaa", model="m", dtype="auto"), _with_identity(STANDALONE, "cccccccccccc")]
    after = [
        _with_identity(IEC, "bbbbbbbbbbbb", model="m", dtype="float16"),
        _with_identity(STANDALONE, "dddddddddddd"),
    ]
    old, new = {"p": _template(objects=before)}, {"p": _template(objects=after)}
    iec, deployment = cold_starts(old, new)
    assert iec.what == "endpoint kvtier-retail/qwen3-8b L2 identity" and (iec.before, iec.after) == (
        "aaaaaaaaaaaa",
        "bbbbbbbbbbbb",
    )
    assert iec.why.startswith("L2 starts cold: dtype changed")
    assert deployment.what == "endpoint kvtier-support/llama31-8b L2 identity"
    assert compare(old, new) == []  # never refused
    assert cold_starts(old, old) == []
    assert cold_starts(old, {"p": _template(objects=[])}) == []  # a removed endpoint is not a cold start


def test_a_model_change_starts_cold_on_real_synths(
    dev: Synth, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_copy / "lobs" / "retail.yaml"
    data = yaml.safe_load(path.read_text())
    data["endpoints"][0]["model"]["weights_version"] = "2026-12-02"  # weights re-uploaded under the same id
    path.write_text(yaml.safe_dump(data))
    assert cli(["validate", "--config-dir", str(config_copy), "--previous", str(dev.outdir)]) == 0
    err = capsys.readouterr().err
    assert "notice: kvtier-dev-retail: endpoint kvtier-retail/qwen3-8b L2 identity" in err
    assert "L2 starts cold: weights_version changed" in err and "refused" not in err


def test_previous_must_be_a_synth_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["validate", "--previous", str(tmp_path)]) == 2
    assert "not a cdk.out folder" in capsys.readouterr().err


def test_manifests_with_tokens_are_still_read() -> None:
    joined = {
        "Fn::Join": [
            "",
            [
                '[{"kind": "StatefulSet", "metadata": {"name": "curvine-master", "namespace": "curvine"}, '
                '"spec": {"replicas": 1, "serviceName": "',
                {"Ref": "Something"},
                '"}}]',
            ],
        ]
    }
    template = {
        "Resources": {"M": {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": joined}}}
    }
    [obj] = list(manifests(template))
    assert obj["spec"]["replicas"] == 1


def test_the_guard_sees_the_real_objects_it_watches(dev: Synth) -> None:
    """If a chart renames the objects the guard compares, this fails instead of the guard going blind."""
    platform = list(manifests(dev.templates["kvtier-dev-platform"]))
    assert any((o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) == CURVINE_MASTERS for o in platform)
    retail = list(manifests(dev.templates["kvtier-dev-retail"]))
    assert any(o["kind"] == IEC_KIND and "intelligentRoutingSpec" in o["spec"] for o in retail)
    assert any(L2_IDENTITY_ANNOTATION in o["metadata"].get("annotations", {}) for o in retail if o["kind"] == IEC_KIND)


def test_previous_synth_of_another_environment_is_refused(prod: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["validate", "-e", "dev", "--previous", str(prod.outdir)]) == 2
    assert "are not this environment's" in capsys.readouterr().err


def test_broken_previous_synth_is_refused_before_synthesizing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    assert cli(["validate", "--previous", str(tmp_path)]) == 2
    assert "not readable as a CDK synth output" in capsys.readouterr().err


def test_the_notice_says_what_moved_from_what_to_what() -> None:
    before = [_with_identity(IEC, "aaaaaaaaaaaa", schema=2, image="a:1", lmcache="0.3.9.post2", weights="c1")]
    after = [_with_identity(IEC, "bbbbbbbbbbbb", schema=2, image="a:2", weights="c1", weights_version="v2")]
    [change] = cold_starts({"p": _template(objects=before)}, {"p": _template(objects=after)})
    assert change.why.startswith(
        'L2 starts cold: image changed ("a:1" -> "a:2": a new vLLM image), lmcache changed ("0.3.9.post2" -> unset: '
        'another LMCache version in the image), weights_version changed (unset -> "v2": other weights), so its pods'
    )


def test_an_image_change_names_the_image_and_its_lmcache_on_real_synths(
    dev: Synth, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = "registry.example/vllm@sha256:" + "b" * 64
    path = config_copy / "lobs" / "retail.yaml"
    data = yaml.safe_load(path.read_text())
    data["endpoints"][0]["image"] = image
    path.write_text(yaml.safe_dump(data))
    assert cli(["validate", "--config-dir", str(config_copy), "--previous", str(dev.outdir)]) == 0
    err = capsys.readouterr().err
    assert "notice: kvtier-dev-retail: endpoint kvtier-retail/qwen3-8b L2 identity" in err
    assert (
        f'L2 starts cold: image changed ("{OPERATOR_VLLM_IMAGE}" -> "{image}": a new vLLM image), lmcache changed '
        f'("{OPERATOR_LMCACHE_VERSION}" -> unset: another LMCache version in the image), so its pods'
    ) in err.replace("\n", " ")


def test_a_standalone_pin_bump_starts_only_standalone_endpoints_cold(
    prod: Synth, config_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a kvtier release that moves the standalone image and LMCache pin tells the operator: the standalone
    endpoint starts cold, the operator endpoints (their image is the operator's) keep their warm L2."""
    bumped = "lmcache/vllm-openai:v0.5.6"
    monkeypatch.setitem(DEFAULT_IMAGES, "standalone", bumped)
    versions = {k: v for k, v in IMAGE_LMCACHE_VERSIONS.items() if k != STANDALONE_VLLM_IMAGE}
    monkeypatch.setattr(lmcache, "IMAGE_LMCACHE_VERSIONS", {**versions, bumped: "0.5.6"})
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy), "--previous", str(prod.outdir)]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1, notices
    assert notices[0].startswith("notice: kvtier-prod-support: endpoint kvtier-support/llama31-8b L2 identity")
    assert f'image changed ("{STANDALONE_VLLM_IMAGE}" -> "{bumped}"' in notices[0]
    assert 'lmcache changed ("0.4.3" -> "0.5.6"' in notices[0]


def test_a_standalone_endpoint_that_starts_autoscaling_gets_a_notice() -> None:
    """Its Deployment loses `replicas` to a ScaledObject: the apply may scale it to one pod once (never refused)."""
    fixed = {**STANDALONE, "spec": {"replicas": 2}}
    scaled = {
        "kind": "ScaledObject",
        "metadata": {"name": "llama31-8b", "namespace": "kvtier-support"},
        "spec": {"scaleTargetRef": {"name": "llama31-8b"}},
    }
    old, new = {"p": _template(objects=[fixed])}, {"p": _template(objects=[STANDALONE, scaled])}
    [notice] = autoscaler_handovers(old, new)
    assert notice.what == "endpoint kvtier-support/llama31-8b replicas" and (notice.before, notice.after) == (
        2,
        "autoscaling",
    )
    assert "one pod once" in notice.why
    assert compare(old, new) == []
    assert autoscaler_handovers(new, new) == [] and autoscaler_handovers(old, old) == []
    assert autoscaler_handovers(old, {"p": _template(objects=[STANDALONE])}) == []  # no ScaledObject: not a handover


def test_a_connector_change_says_the_endpoint_starts_cold_on_real_synths(
    prod: Synth, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moving an endpoint from LMCache's connector to vLLM's own (docs/l2.md): one notice, naming the connector."""
    path = config_copy / "lobs" / "support.yaml"
    data = yaml.safe_load(path.read_text())
    data["endpoints"][0]["cache"]["connector"] = "vllm"
    path.write_text(yaml.safe_dump(data))
    assert cli(["validate", "-e", "prod", "--config-dir", str(config_copy), "--previous", str(prod.outdir)]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1, notices
    assert notices[0].startswith("notice: kvtier-prod-support: endpoint kvtier-support/llama31-8b L2 identity")
    assert "L2 starts cold: connector changed (lmcache -> vllm: the two connectors' L2 files are not" in notices[0]
