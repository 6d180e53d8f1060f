"""`validate --previous` names the NetworkPolicies a deploy adds (issue 33): a notice per stack, never a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main as cli
from kvtier.k8s.isolation import BREAK_SWITCH
from kvtier.rules.day2 import added_network_policies, compare
from tests.support import synthesize


def _template(objects: list[dict[str, Any]]) -> dict[str, Any]:
    manifest = {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": json.dumps(objects)}}
    return {"Resources": {"Manifest": manifest}}


def _policy(namespace: str, name: str) -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": namespace}, "spec": {"podSelector": {}}}


def test_added_policies_are_named_per_stack() -> None:
    old = {"lob": _template([_policy("kvtier-retail", "default-deny-ingress")]), "platform": _template([])}
    new = {
        "lob": _template(
            [
                _policy("kvtier-retail", "default-deny-ingress"),
                _policy("kvtier-retail", "default-deny-egress"),
                _policy("hyperpod-inference-system", "retail-qwen3-8b-router"),
            ]
        ),
        "platform": _template([_policy("curvine", "default-deny-ingress")]),
    }
    lob, platform = added_network_policies(old, new)
    assert (lob.stack, lob.before, lob.after) == (
        "lob",
        1,
        ["hyperpod-inference-system/retail-qwen3-8b-router", "kvtier-retail/default-deny-egress"],
    )
    assert platform.after == ["curvine/default-deny-ingress"]
    assert str(platform).startswith('platform: NetworkPolicies added: 0 -> ["curvine/default-deny-ingress"]; ')
    assert added_network_policies(new, new) == [] and compare(old, new) == []


def test_validate_previous_names_the_policies_this_issue_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against a synth of the old manifests (KVTIER_ISOLATION_BREAK=1), `validate --previous` lists, per stack, the
    policies the apply adds, and refuses nothing."""
    monkeypatch.setenv(BREAK_SWITCH, "1")
    old = synthesize("dev", tmp_path / "old")
    monkeypatch.delenv(BREAK_SWITCH)
    assert cli(["validate", "-e", "dev", "--previous", str(old.outdir)]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if "NetworkPolicies added" in line]
    print("\n".join(notices))
    platform = next(n for n in notices if n.startswith("notice: kvtier-dev-platform:"))
    assert '"curvine/default-deny-ingress"' in platform and '"curvine/master-rpc"' in platform
    lob = next(n for n in notices if n.startswith("notice: kvtier-dev-retail:"))
    assert '"kvtier-retail/default-deny-egress"' in lob
