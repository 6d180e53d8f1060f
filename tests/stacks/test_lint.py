"""Real validators on every synthesized template: cfn-lint and cdk-nag (AwsSolutions), plus what cdk-nag cannot see."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cfnlint.api import ManualArgs, lint_by_config

from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, Synth, synthesize

# Each ignored cfn-lint check, and why.
IGNORED_CHECKS = {
    "W3005": "aws-cdk-lib emits DependsOn entries that a GetAtt already implies; harmless and not ours to change",
    "W3010": "availability zones are configured explicitly on purpose: synth never looks them up",
}


def _lint(synth: Synth, region: str) -> list[str]:
    """Every template of one environment through one cfn-lint runner (its rules load once, not per template)."""
    paths = [str(synth.outdir / f"{name}.template.json") for name in synth.templates]
    config = ManualArgs(templates=paths, regions=[region], ignore_checks=list(IGNORED_CHECKS))
    return [f"{Path(m.filename).name}: {m.rule.id} {m.message}" for m in lint_by_config(config)]


def test_cfn_lint_is_clean_on_every_template(dev: Synth, prod: Synth, byoc: Synth) -> None:
    assert _lint(dev, "us-west-2") == []
    assert _lint(prod, "us-east-1") == []
    assert _lint(byoc, "us-west-2") == []


def fifty_lobs(config_dir: Path, out: Path) -> Path:
    """prod with 50 LOBs, lob00-lob49 copied in turn from search, retail and support, on ml.g6e.16xlarge GPU nodes (at
    50 LOBs the per-LOB janitors no longer fit an ml.g6e.4xlarge: reviews-2026-12-b, "50 LOBs")."""
    shutil.copytree(config_dir, out)
    sources = ("search", "retail", "support")
    names = [f"lob{i:02d}" for i in range(50)]
    for i, name in enumerate(names):
        text = (config_dir / "lobs" / f"{sources[i % 3]}.yaml").read_text()
        text = re.sub(r"^name: .*$", f"name: {name}", text, flags=re.MULTILINE)
        (out / "lobs" / f"{name}.yaml").write_text(text.replace("ml.g6e.4xlarge", "ml.g6e.16xlarge"))
    env_file = out / "environments" / "prod.yaml"
    env = yaml.safe_load(env_file.read_text())
    env["lobs"] = names
    for group in env["hyperpod"]["instance_groups"]:
        if group["role"] == "gpu":
            group.update(instance_type="ml.g6e.16xlarge", count=150)
    env_file.write_text(yaml.safe_dump(env))
    return out


def test_cfn_lint_is_clean_on_a_50_lob_environment(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 26: 53 templates; every LOB imports the cluster stack's exports (reviews-2026-12-b S3 12)."""
    config_dir = fifty_lobs(CONFIG_DIR, tmp_path_factory.mktemp("config-50") / "config")
    synth = synthesize("prod", tmp_path_factory.mktemp("cdk-50"), config_dir)
    assert len(synth.templates) == 53
    assert _lint(synth, "us-east-1") == []


@pytest.fixture(scope="session")
def nag_report(prod: Synth) -> dict[str, Any]:
    """cdk-nag's report of the session's prod synth (conftest synthesizes prod with the AwsSolutions pack)."""
    report: dict[str, Any] = json.loads((prod.outdir / "validation-report.json").read_text())
    return report


def test_cdk_nag_has_no_unacknowledged_findings(nag_report: dict[str, Any]) -> None:
    [aws] = [p for p in nag_report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    unacknowledged = [
        f"{v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}" for v in aws["violations"]
    ]
    assert unacknowledged == []
    assert aws["conclusion"] == "success"


def test_every_acknowledgement_names_its_finding_and_a_reason(nag_report: dict[str, Any]) -> None:
    [aws] = [p for p in nag_report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    suppressed = aws.get("suppressedViolations", [])
    assert suppressed, "expected acknowledged findings (managed policies, CDK-managed handlers)"
    for violation in suppressed:
        where = [c["constructPath"] for c in violation["violatingConstructs"]]
        assert len(violation.get("reason", "").split()) >= 5, f"{violation['ruleName']} at {where}: say why"
        # acknowledged on the violating construct or one of its parents, not somewhere unrelated
        assert all(path.startswith(violation["acknowledgedAt"]) for path in where), (violation["acknowledgedAt"], where)


# What cdk-nag cannot see: it has no rules for aws_eks_v2's native cluster or for SageMaker HyperPod.


def test_eks_api_is_private_in_production_and_logged_everywhere(dev: Synth, prod: Synth) -> None:
    for synth in (dev, prod):
        [cluster] = synth.resources("cluster", "AWS::EKS::Cluster").values()
        assert len(cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]) == 5
        assert cluster["Properties"]["EncryptionConfig"]
    [prod_cluster] = prod.resources("cluster", "AWS::EKS::Cluster").values()
    assert prod_cluster["Properties"]["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert load_checked(CONFIG_DIR, "prod").env.eks.endpoint_access == "private"


def test_every_bucket_is_encrypted_tls_only_and_private(dev: Synth, prod: Synth) -> None:
    for synth in (dev, prod):
        for name, template in synth.templates.items():
            resources = template.get("Resources", {})
            policies = json.dumps([r for r in resources.values() if r["Type"] == "AWS::S3::BucketPolicy"])
            for key, bucket in resources.items():
                if bucket["Type"] != "AWS::S3::Bucket":
                    continue
                props = bucket["Properties"]
                assert props.get("BucketEncryption"), f"{name}/{key}"
                assert props["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True, f"{name}/{key}"
                assert key in policies and '"aws:SecureTransport": "false"' in policies, f"{name}/{key}"


def test_log_groups_have_retention(dev: Synth) -> None:
    for name, template in dev.templates.items():
        for key, resource in template.get("Resources", {}).items():
            if resource["Type"] == "AWS::Logs::LogGroup":
                assert resource["Properties"].get("RetentionInDays"), f"{name}/{key}"


def test_no_launch_templates_to_harden_with_imdsv2(dev: Synth, prod: Synth) -> None:
    """IMDSv2 applies to EC2 launch templates; HyperPod manages its instances, and kvtier creates none."""
    for synth in (dev, prod):
        for template in synth.templates.values():
            types = {r["Type"] for r in template.get("Resources", {}).values()}
            assert not types & {
                "AWS::EC2::LaunchTemplate",
                "AWS::EC2::Instance",
                "AWS::AutoScaling::LaunchConfiguration",
            }


def test_the_lint_runner_reports_findings_per_template(tmp_path: Path) -> None:
    """One runner over several templates still names the template of each finding (so the check above can fail)."""
    good = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}}}
    bad = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"NoSuchProperty": 1}}}}
    synth = Synth(outdir=tmp_path, stacks=None, templates={"good": good, "bad": bad})
    for name, template in synth.templates.items():
        (tmp_path / f"{name}.template.json").write_text(json.dumps(template))
    findings = _lint(synth, "us-west-2")
    assert findings, "a template with an unknown property must be reported"
    assert all(f.startswith("bad.template.json: E") for f in findings), findings
