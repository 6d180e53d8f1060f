"""Every derived name fits its AWS or Kubernetes limit for the longest names the design allows (env 12, LOB 20,
endpoint 28 characters), in the longest region name where HyperPod offers G6e; one extra synth."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.rules.day2 import manifests
from tests.support import CONFIG_DIR, Synth, synthesize

ENV = "e" * 12
LOB = "l" * 20
OPERATOR_ENDPOINT = "o" * 28
STANDALONE_ENDPOINT = "s" * 28
REGION = "ap-northeast-1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kinds whose names become DNS labels (63) or prefixes of generated names (CronJob 52, StatefulSet 52: pod and
# controller-revision-hash labels append to them).
NAME_LIMITS = {"Service": 63, "Namespace": 63, "Job": 63, "CronJob": 52, "StatefulSet": 52}


@pytest.fixture(scope="module")
def longest(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    root = tmp_path_factory.mktemp("longest")
    config = root / "config"
    (config / "environments").mkdir(parents=True)
    (config / "lobs").mkdir()
    env = yaml.safe_load((CONFIG_DIR / "environments" / "dev.yaml").read_text())
    env.update(name=ENV, region=REGION, availability_zones=[f"{REGION}a", f"{REGION}c"], lobs=[LOB])
    env["hyperpod"].pop("cluster_name")
    (config / "environments" / f"{ENV}.yaml").write_text(yaml.safe_dump(env))
    lob = yaml.safe_load((CONFIG_DIR / "lobs" / "retail.yaml").read_text())
    operator = dict(lob["endpoints"][0], name=OPERATOR_ENDPOINT, replicas=1, bench={"enabled": True})
    standalone = dict(operator, name=STANDALONE_ENDPOINT, mode="standalone")
    lob.update(name=LOB, endpoints=[operator, standalone])
    (config / "lobs" / f"{LOB}.yaml").write_text(yaml.safe_dump(lob))
    return synthesize(ENV, root / "cdk.out", config)


def _literal_names(template: dict[str, Any], prop: str) -> list[str]:
    return [
        r["Properties"][prop]
        for r in template.get("Resources", {}).values()
        if isinstance(r.get("Properties", {}).get(prop), str)
    ]


def test_aws_names_fit(longest: Synth) -> None:
    for name, template in longest.templates.items():
        assert len(name) <= 128 and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", name)
        for role in _literal_names(template, "RoleName"):
            assert len(role) <= 64, role
        for bucket in _literal_names(template, "BucketName"):
            assert len(bucket) <= 63, bucket
        for function in _literal_names(template, "FunctionName"):
            assert len(function) <= 64, function
    cluster = longest.template("cluster")
    [eks] = [r["Properties"] for r in cluster["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    assert len(eks["Name"]) <= 100
    [hyperpod] = [r["Properties"] for r in cluster["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"]
    assert re.fullmatch(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", hyperpod["ClusterName"])
    roles = _literal_names(longest.template("platform"), "RoleName")
    assert any(r.startswith("SageMakerHyperPodInference") for r in roles), roles  # the operator's execution role


def _labels(obj: dict[str, Any]) -> list[dict[str, str]]:
    found = [obj.get("metadata", {}).get("labels", {})]
    template = obj.get("spec", {}).get("template", {})
    found.append(template.get("metadata", {}).get("labels", {}))
    job = obj.get("spec", {}).get("jobTemplate", {}).get("spec", {}).get("template", {})
    found.append(job.get("metadata", {}).get("labels", {}))
    return found


def test_kubernetes_names_and_labels_fit(longest: Synth) -> None:
    seen = 0
    for template in longest.templates.values():
        for obj in manifests(template):
            seen += 1
            name = obj["metadata"]["name"]
            assert len(name) <= NAME_LIMITS.get(obj["kind"], 253), (obj["kind"], name)
            namespace = obj["metadata"].get("namespace")
            if namespace:
                assert len(namespace) <= 63 and DNS_LABEL.match(namespace)
            for labels in _labels(obj):
                for key, value in labels.items():
                    assert len(value) <= 63, (obj["kind"], name, key, value)
                    assert len(key.split("/")[-1]) <= 63, key
    assert seen > 30


def test_dist_paths_stay_short(longest: Synth) -> None:
    for stack in longest.stacks.all:
        for chart in stack.outputs.charts:
            path = Path("dist") / ENV / stack.stack_name / f"{chart.node.id}.yaml"
            assert len(str(path)) < 200, path
