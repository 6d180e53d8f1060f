"""checkov over every synthesized template and every dist/ manifest of dev, prod and byoc, in one process.

Findings are compared with the checked-in list of accepted ones (tests/stacks/checkov-skips.yaml), each with its reason: a
finding no entry covers fails, and so does an entry that covers nothing. checkov runs from its own venv
(.venv-checkov, requirements-checkov.txt: its pins conflict with ours), offline (`--skip-download`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.app.dist import write_dist
from tests.support import ROOT, Synth, synthesize

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
SKIPS = Path(__file__).with_name("checkov-skips.yaml")
TIMEOUT_S = 600
CHECKOV_FLAGS = ("--skip-download", "--quiet", "--compact", "--output", "json")


@dataclass(frozen=True)
class Finding:
    check: str
    name: str
    where: str  # "<file name>:<resource>"


@dataclass(frozen=True)
class Skip:
    check: str
    findings: tuple[str, ...]
    reason: str
    excepted: tuple[str, ...] = ()

    def covers(self, finding: Finding) -> bool:
        return (
            finding.check == self.check
            and any(fnmatchcase(finding.where, p) for p in self.findings)
            and not any(fnmatchcase(finding.where, p) for p in self.excepted)
        )


def load_skips(path: Path = SKIPS) -> list[Skip]:
    skips = []
    for i, entry in enumerate(yaml.safe_load(path.read_text())):
        assert str(entry.get("reason", "")).strip(), f"{path.name} entry {i} ({entry.get('id')}) has no reason"
        skips.append(Skip(entry["id"], tuple(entry["findings"]), entry["reason"], tuple(entry.get("except", ()))))
    return skips


def parse_report(text: str) -> list[Finding]:
    """checkov's JSON output: one report, a list of them, or (several frameworks) reports one after another."""
    decoder, index, reports = json.JSONDecoder(), 0, []
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        report, index = decoder.raw_decode(text, index)
        reports.extend(report if isinstance(report, list) else [report])
    return [
        Finding(f["check_id"], f["check_name"], f"{Path(f['file_path']).name}:{f['resource']}")
        for report in reports
        for f in report.get("results", {}).get("failed_checks", [])
    ]


def unexplained(findings: list[Finding], skips: list[Skip]) -> tuple[list[Finding], list[Skip]]:
    """(findings no skip covers, skips that cover no finding)."""
    new = [f for f in findings if not any(s.covers(f) for s in skips)]
    stale = [s for s in skips if not any(s.covers(f) for f in findings)]
    return new, stale


@pytest.fixture(scope="module")
def byoc_plain(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize("byoc", tmp_path_factory.mktemp("cdk-byoc-scan"))


@pytest.fixture(scope="module")
def scan(dev: Synth, prod: Synth, byoc_plain: Synth, tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing; run `make pytest` (it installs requirements-checkov.txt)")
    root = tmp_path_factory.mktemp("scan")
    for synth in (dev, prod, byoc_plain):
        env = synth.stacks.cluster.config_env.name
        templates = root / "cdk.out" / env
        templates.mkdir(parents=True)
        for template in synth.outdir.glob("*.template.json"):  # templates only: assets are not ours to scan
            shutil.copy(template, templates / template.name)
        write_dist(root / "dist", env, {s.stack_name: s.outputs for s in synth.stacks.all})
    result = subprocess.run(
        [str(CHECKOV), "-d", str(root), "--framework", "cloudformation", "kubernetes", *CHECKOV_FLAGS],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode in (0, 1), f"checkov failed to run ({result.returncode}): {result.stderr[-2000:]}"
    findings = parse_report(result.stdout)
    assert findings or result.returncode == 0, "checkov reported failures but none could be read"
    return findings


def test_every_finding_is_explained(scan: list[Finding]) -> None:
    new, stale = unexplained(scan, load_skips())
    listed = "\n".join(f"  {f.check} {f.where} ({f.name})" for f in sorted(new, key=lambda f: (f.check, f.where)))
    assert not new, f"checkov findings without an entry in {SKIPS.name}; fix them or explain them:\n{listed}"
    assert not stale, (
        f"entries in {SKIPS.name} that cover nothing; delete them: {[(s.check, s.findings) for s in stale]}"
    )


def test_the_fixed_findings_stay_fixed(scan: list[Finding]) -> None:
    """What issue 14 fixed: pod hardening of vLLM, routers and benchmarks, TLS bucket versioning, flow-log encryption."""
    fixed = {"CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_29", "CKV_K8S_30", "CKV_K8S_31", "CKV_K8S_37"}
    ours = ("endpoint-", "bench-")
    assert not [f for f in scan if f.check in fixed and f.where.startswith(ours)]
    assert not [
        f for f in scan if f.where.startswith(ours) and "-router" in f.where and f.check in {"CKV_K8S_23", "CKV_K8S_22"}
    ]
    assert not [
        f for f in scan if f.check == "CKV_K8S_38" and f.where.startswith("endpoint-") and "-router" not in f.where
    ]
    assert not [f for f in scan if f.check == "CKV_AWS_21"]  # bucket versioning
    assert not [f for f in scan if f.check == "CKV_AWS_158" and "FlowLogs" in f.where]


def test_a_new_finding_fails_and_a_stale_skip_is_reported() -> None:
    skips = load_skips()
    invented = Finding("CKV_K8S_23", "root", "endpoint-x.yaml:Deployment.kvtier-retail.x-router")
    new, _ = unexplained([invented], skips)
    assert new == [invented]  # the router's exception in the engine entries keeps it visible
    engine = Finding("CKV_K8S_23", "root", "endpoint-x.yaml:Deployment.kvtier-retail.x")
    new, stale = unexplained([engine], skips)
    assert not new and stale and all(s.check != "CKV_K8S_23" or "endpoint-*" not in s.findings[0] for s in stale)


def test_the_report_parser_reads_concatenated_reports() -> None:
    one: dict[str, Any] = {
        "check_type": "kubernetes",
        "results": {
            "failed_checks": [{"check_id": "C1", "check_name": "n", "file_path": "/a/b.yaml", "resource": "R"}]
        },
    }
    text = json.dumps(one) + "\n" + json.dumps([one])
    assert parse_report(text) == [Finding("C1", "n", "b.yaml:R")] * 2
