"""`validate --previous` names the policies a deploy adds (issue 33): NetworkPolicies, Kyverno admission rules and
changed Pod Security labels, a notice per stack, never a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main as cli
from kvtier.k8s.breaks import ADMISSION_BREAK
from kvtier.k8s.isolation import BREAK_SWITCH
from kvtier.rules.day2 import added_admission_rules, added_network_policies, compare, pod_security_changes
from tests.support import synthesize


def _template(objects: list[dict[str, Any]]) -> dict[str, Any]:
    manifest = {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": json.dumps(objects)}}
    return {"Resources": {"Manifest": manifest}}


def _policy(namespace: str, name: str) -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": namespace}, "spec": {"podSelector": {}}}


def _guard(*rules: str) -> dict[str, Any]:
    return {"kind": "ClusterPolicy", "metadata": {"name": "kvtier-guard-retail"}, "spec": {"rules": [{"name": r} for r in rules]}}  # fmt: skip


def _namespace(**labels: str) -> dict[str, Any]:
    psa = {f"pod-security.kubernetes.io/{mode}": level for mode, level in labels.items()}
    return {"kind": "Namespace", "metadata": {"name": "kvtier-retail", "labels": {"kvtier.io/line-of-business": "retail", **psa}}}  # fmt: skip


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


def test_added_admission_rules_and_pod_security_labels_are_named() -> None:
    """A new guard names each of its rules; a guard that gains a rule names that rule; a namespace that gains or
    changes a Pod Security label names old and new labels."""
    old = {"lob": _template([_namespace(), _guard("pods-stay-off-the-node")])}
    new = {
        "lob": _template(
            [
                _namespace(enforce="baseline", warn="restricted"),
                _guard("pods-stay-off-the-node", "services-have-no-external-ips"),
            ]
        )
    }
    (rules,) = added_admission_rules(old, new)
    assert (rules.stack, rules.before, rules.after) == ("lob", 1, ["kvtier-guard-retail/services-have-no-external-ips"])
    (labels,) = pod_security_changes(old, new)
    assert (labels.what, labels.before, labels.after) == (
        "namespace kvtier-retail Pod Security labels",
        {},
        {"enforce": "baseline", "warn": "restricted"},
    )
    assert "kubectl label --dry-run=server --overwrite ns kvtier-retail" in str(labels)
    warn_only = {"lob": _template([_namespace(warn="baseline", audit="baseline")])}
    (warned,) = pod_security_changes(old, warn_only)
    assert "warned about and audited, not refused" in warned.why
    assert added_admission_rules(new, new) == [] and pod_security_changes(new, new) == []
    assert compare(old, new) == []  # notices only: nothing is refused


def test_validate_previous_names_the_policies_this_issue_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against a synth of the manifests before issue 33 (no NetworkPolicies: KVTIER_ISOLATION_BREAK=1; no Pod Security
    labels, guard or LOB KEDA role: KVTIER_ADMISSION_BREAK=psa,guard,keda), `validate --previous` lists, per stack,
    what the apply adds, and refuses nothing."""
    monkeypatch.setenv(BREAK_SWITCH, "1")
    monkeypatch.setenv(ADMISSION_BREAK, "psa,guard,keda")
    old = synthesize("dev", tmp_path / "old")
    monkeypatch.delenv(BREAK_SWITCH)
    monkeypatch.delenv(ADMISSION_BREAK)
    assert cli(["validate", "-e", "dev", "--previous", str(old.outdir)]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("notice: ")]
    print("\n".join(notices))
    platform = next(n for n in notices if n.startswith("notice: kvtier-dev-platform: NetworkPolicies added"))
    assert '"curvine/default-deny-ingress"' in platform and '"curvine/master-rpc"' in platform
    lob = next(n for n in notices if n.startswith("notice: kvtier-dev-retail: NetworkPolicies added"))
    assert '"kvtier-retail/default-deny-egress"' in lob
    rules = next(n for n in notices if n.startswith("notice: kvtier-dev-retail: admission rules added"))
    assert '"kvtier-guard-retail/pods-stay-off-the-node"' in rules
    assert '"kvtier-guard-retail/services-have-no-external-ips"' in rules
    labels = next(n for n in notices if "namespace kvtier-retail Pod Security labels" in n)
    assert labels.startswith("notice: kvtier-dev-retail: namespace kvtier-retail Pod Security labels: {} -> {")
