"""Helpers shared by test modules: paths, ../shared access, and one-shot synthesis of an environment."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from kvtier.planner.model import TierModel

if TYPE_CHECKING:
    from kvtier.config.endpoint import Endpoint
    from kvtier.config.environment import Environment
    from kvtier.k8s.base import KvtierChart

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "config"
SHARED = ROOT.parent / "shared"
# The shipped trace: the whole Mooncake synthetic trace, unchanged (examples/traces/README.md). Tests that need the
# short window the repository shipped before issue 39 take its first SAMPLE_WINDOW requests (`--limit`).
SAMPLE_TRACE = ROOT / "examples" / "traces" / "mooncake_synthetic.jsonl"
SAMPLE_WINDOW = 500
# jsii runs on the Node release pinned in package.json (Node 20 is end-of-life for it).
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"


# A tier model with linear costs in round numbers and an unbounded L0, so expected TTFTs can be written down.
ROUND_COSTS = TierModel(
    kv_bytes_per_token=1000,
    chunk_tokens=256,
    block_tokens=16,
    replicas=1,
    l0_tokens=10**12,
    l1_tokens=0,
    l2_tokens=0,
    l1_load_s_per_token=1e-5,
    l2_load_s_per_token=1e-4,
    prefill_s_per_token=1e-3,
    prefill_s_per_token_squared=0.0,
    max_model_len=10**12,
)


def lmcache_config_map(lob: str, endpoint: Endpoint) -> dict[str, Any]:
    """The ConfigMap an LMCache endpoint's engine mounts (kvtier.k8s.standalone.engine_config_map); fails the test
    when the endpoint has none."""
    from kvtier.k8s.standalone import engine_config_map

    config_map = engine_config_map(lob, endpoint)
    assert config_map is not None, f"{endpoint.name} mounts no connector files"
    return config_map


def shared_path(relative: str) -> Path:
    """A file under ../shared: skip (saying why) only when absent outside CI; under CI its absence fails."""
    path = SHARED / relative
    if path.exists():
        return path
    message = f"{path} is absent (the read-only ../shared folder of reference data)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must have it")
    pytest.skip(f"{message}; it ships with the CI workspace, not with a fresh clone")
    raise AssertionError("unreachable")


@dataclass
class Synth:
    """One synthesized environment: templates by stack name, and the assembly folder."""

    outdir: Path
    stacks: Any  # kvtier.stacks.EnvironmentStacks: the constructs, for tests that inspect charts
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def template(self, kind: str) -> dict[str, Any]:
        return next(t for name, t in self.templates.items() if name.endswith(f"-{kind}"))

    def resources(self, kind: str, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template(kind)["Resources"].items() if v["Type"] == type_}

    def only(self, kind: str, type_: str) -> dict[str, Any]:
        found = list(self.resources(kind, type_).values())
        assert len(found) == 1, f"expected one {type_} in {kind}, found {len(found)}"
        return found[0]


def synthesize(env_name: str, outdir: Path, config_dir: Path = CONFIG_DIR, *, nag: bool = False) -> Synth:
    """Synthesize one environment into `outdir`. With `nag`, cdk-nag's report lands in `outdir/validation-report.json`;
    a synth that cdk-nag fails still returns its templates (the validation runs on the written assembly), so one synth
    serves the nag tests and every template test, and the nag tests say what failed."""
    from kvtier.app.main import build, new_app
    from kvtier.rules import load_checked

    app = new_app(str(outdir), nag=nag)
    stacks = build(app, load_checked(config_dir, env_name))
    try:
        app.synth()
    except RuntimeError as err:
        if not (nag and ("Validation failed" in str(err) or "ValidationFailed" in str(err))):
            raise
    synth = Synth(outdir=outdir, stacks=stacks)
    manifest = json.loads((outdir / "manifest.json").read_text())
    for name, artifact in manifest["artifacts"].items():
        if artifact["type"] == "aws:cloudformation:stack":
            template = outdir / artifact["properties"]["templateFile"]
            synth.templates[name] = json.loads(template.read_text())
    return synth


def lob_helpers_chart(env: Environment, claim_namespace: str | None = None) -> KvtierChart:
    """What a LOB stack adds to the L2: its static PV (and claim), janitor and healer access, for `retail`."""
    from kvtier.k8s.base import KvtierChart, chart_app  # here: importing cdk8s starts jsii, after PATH is set above
    from kvtier.k8s.curvine import add_janitor, static_pv
    from kvtier.k8s.curvine.healer import add_healer_access

    chart = KvtierChart(chart_app(), "lob")
    static_pv(
        chart,
        "pv",
        env=env,
        name=f"kvtier-{env.name}-retail",
        curvine_path=f"/kvtier/{env.name}/retail",
        claim_namespace=claim_namespace,
    )
    add_janitor(
        chart,
        "janitor",
        env=env,
        lob="retail",
        namespace="kvtier-retail",
        claim_name="l2-cache",
        budget_gb=200,
        max_age_hours=24,
        in_use=["qwen3-8b"],
    )
    add_healer_access(chart, "healer", "kvtier-retail")
    return chart


def many_lobs(
    target: Path, count: int, base: str = "prod", name: str | None = None, gpu_nodes: int | None = None
) -> Path:
    """A copy of config/ with environment `name` (default `lobs<count>`): `base` with `count` LOBs copied in turn from its own (each
    with its shipped settings, renamed), and enough GPU nodes for their replicas and gpu_quota. Returns the folder."""
    shutil.copytree(CONFIG_DIR, target)
    env = yaml.safe_load((target / "environments" / f"{base}.yaml").read_text())
    templates = [yaml.safe_load((target / "lobs" / f"{name}.yaml").read_text()) for name in env["lobs"]]
    names, quota = [], 0
    for i in range(count):
        lob = {**templates[i % len(templates)], "name": f"lob{i:02d}"}
        quota += lob["gpu_quota"]
        names.append(lob["name"])
        (target / "lobs" / f"{lob['name']}.yaml").write_text(yaml.safe_dump(lob, sort_keys=False))
    for group in env["hyperpod"]["instance_groups"]:
        if group["role"] == "gpu":
            # One GPU per node (ml.g6e.4xlarge): every quota fits, rolling updates too.
            group["count"] = gpu_nodes or quota
    name = name or f"lobs{count}"
    env |= {"name": name, "lobs": names}
    (target / "environments" / f"{name}.yaml").write_text(yaml.safe_dump(env, sort_keys=False))
    return target
