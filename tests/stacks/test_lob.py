"""Lines of business as forked stacks: each holds its own fences, volume, policy and endpoints, and nothing of another."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvtier.connectors import l2_subdir
from kvtier.rules import load_checked
from kvtier.rules.day2 import manifests
from tests.support import CONFIG_DIR, Synth

LOBS = ("retail", "support", "search")


def _objects(synth: Synth, lob: str) -> list[dict[str, Any]]:
    return list(manifests(synth.templates[f"kvtier-prod-{lob}"]))


def _kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_one_stack_per_lob(prod: Synth) -> None:
    assert {f"kvtier-prod-{lob}" for lob in LOBS} <= set(prod.templates)
    assert set(load_checked(CONFIG_DIR, "prod").env.lobs) == set(LOBS)


@pytest.mark.parametrize("lob", LOBS)
def test_lob_stack_holds_its_fences_volume_policy_and_endpoints(prod: Synth, lob: str) -> None:
    config = load_checked(CONFIG_DIR, "prod")
    objects = _objects(prod, lob)
    namespace = f"kvtier-{lob}"
    [ns] = _kinds(objects, "Namespace")
    assert ns["metadata"]["name"] == namespace
    [quota] = _kinds(objects, "ResourceQuota")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == str(config.lob(lob).gpu_quota)
    assert _kinds(objects, "LimitRange")
    policies = {p["metadata"]["name"] for p in _kinds(objects, "NetworkPolicy")}
    assert {"default-deny-ingress", "allow-same-namespace", "allow-clients-to-routers"} <= policies
    [volume] = _kinds(objects, "PersistentVolume")
    assert volume["spec"]["csi"]["volumeAttributes"]["curvine-path"] == f"/kvtier/prod/{lob}"
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    [claim] = _kinds(objects, "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "l2-cache" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    janitors = [d for d in _kinds(objects, "Deployment") if d["metadata"]["name"] == "l2-cache-janitor"]
    assert janitors, "the L2 janitor"
    args = janitors[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    wanted = {f"--in-use={l2_subdir(e)}" for e in config.lob(lob).endpoints if e.cache.l2 == "curvine"}
    assert {a for a in args if a.startswith("--in-use=")} == wanted, "the janitor keeps exactly the endpoints' dirs"
    assert _kinds(objects, "RoleBinding"), "the L2 healer may restart this LOB's pods"
    [policy] = _kinds(objects, "Policy")
    assert policy["metadata"]["namespace"] == namespace
    for endpoint in config.lob(lob).endpoints:
        kind = "InferenceEndpointConfig" if endpoint.mode == "operator" else "Deployment"
        assert any(o["metadata"]["name"] == endpoint.name for o in _kinds(objects, kind)), endpoint.name
    for obj in objects:
        if obj["kind"] in ("Namespace", "PersistentVolume"):
            continue
        if obj["kind"] == "ClusterPolicy":  # the LOB's guard, cluster-scoped and named after it (issue 33)
            assert obj["metadata"]["name"] == f"kvtier-guard-{lob}", obj["metadata"]
            continue
        if obj["metadata"].get("namespace") == "hyperpod-inference-system":
            # The objects outside the LOB namespace: a Service in front of the operator's router pods and the
            # NetworkPolicy that admits only this LOB to them (issue 33), named after the LOB so that LOBs never collide
            # (kvtier/k8s/endpoint_names.py).
            assert obj["kind"] in ("Service", "NetworkPolicy"), obj["metadata"]
            assert obj["metadata"]["name"].startswith(f"{lob}-"), obj["metadata"]
            continue
        assert obj["metadata"].get("namespace") == namespace, obj["metadata"]


def test_no_lob_stack_refers_to_another(prod: Synth) -> None:
    for lob in LOBS:
        text = json.dumps(prod.templates[f"kvtier-prod-{lob}"])
        for other in set(LOBS) - {lob}:
            assert f"kvtier-prod-{other}" not in text
            assert f"kvtier-{other}" not in text
            assert f"/kvtier/prod/{other}" not in text


def test_lob_stacks_depend_only_on_cluster_and_platform(prod: Synth) -> None:
    artifacts = json.loads((prod.outdir / "manifest.json").read_text())["artifacts"]
    for lob in LOBS:
        deps = {d for d in artifacts[f"kvtier-prod-{lob}"].get("dependencies", []) if not d.endswith(".assets")}
        assert deps == {"kvtier-prod-cluster", "kvtier-prod-platform"}, deps


def test_lob_resources_carry_env_lob_and_user_tags(prod: Synth) -> None:
    tagged = 0
    for lob in LOBS:
        for key, resource in prod.templates[f"kvtier-prod-{lob}"]["Resources"].items():
            tags = resource.get("Properties", {}).get("Tags")
            if isinstance(tags, list):
                pairs = {t["Key"]: t["Value"] for t in tags}
                assert pairs.get("kvtier:environment") == "prod", key
                assert pairs.get("kvtier:line-of-business") == lob, key
                assert pairs.get("cost-center") == "ml-platform", key
                tagged += 1
    assert tagged >= 1  # search's Pod Identity role


def test_s3_model_reader_can_read_only_its_prefix(prod: Synth) -> None:
    template = prod.templates["kvtier-prod-search"]["Resources"]
    [association] = [r["Properties"] for r in template.values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert association["Namespace"] == "kvtier-search" and association["ServiceAccount"] == "model-reader"
    statements = [
        s
        for r in template.values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    partition = '{"Ref": "AWS::Partition"}'
    resources = sorted(json.dumps(s["Resource"]) for s in statements)
    assert resources == [  # partition-agnostic ARNs
        f'{{"Fn::Join": ["", ["arn:", {partition}, ":s3:::acme-ml-models"]]}}',
        f'{{"Fn::Join": ["", ["arn:", {partition}, ":s3:::acme-ml-models/qwen2.5-7b-instruct/*"]]}}',
    ]
    assert all(s["Action"] in ("s3:GetObject", "s3:ListBucket") for s in statements)
    for lob in ("retail", "support"):  # Hugging Face models: no role at all
        types = {r["Type"] for r in prod.templates[f"kvtier-prod-{lob}"]["Resources"].values()}
        assert "AWS::IAM::Role" not in types
