"""`make bench-synth`: time `python app.py` for dev, prod and a generated 20-LOB environment against a minimal
one-stack CDK app, interleaved in one run, and write the ratios and the cost per LOB to docs/benchmarks.md.

kvtier runs as `cdk synth` runs it: the app command in cdk.json (`python -O app.py`). Two minimal apps, one S3 bucket
each: `minimal` as a CDK user writes it (`python3 app.py`, `cdk.App()` with aws-cdk-lib's defaults, so its built-in
CloudFormation validation runs), the yardstick issue 18 measured against; and `minimal-novalidation`, run the way
kvtier runs (`-O`, that validation off), so the second ratio says what kvtier's own constructs and charts cost.
Every run is a fresh process with the same Python and Node, so jsii start-up is in all of them. Wall
time is what a user waits; CPU time (the process and its Node child) is steadier on a busy machine. The 20-LOB
environment is dev with 20 copies of its LOB, so (20 LOBs - dev) / 19 is the cost of one more LOB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tools.benchdoc import write_section

ROOT = Path(__file__).resolve().parent.parent
MINIMAL_APP = """
import os
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App(outdir=os.environ["CDK_OUTDIR"]{settings})
stack = cdk.Stack(app, "Minimal")
s3.Bucket(stack, "Bucket")
app.synth()
"""
BASELINE, KVTIER_SETTINGS = "minimal", "minimal-novalidation"
GOALS = {"dev": 1.4, "prod": 1.8}  # issue 18: at most this many times the minimal app's wall time
# cdk.json's app command, with this interpreter in place of the .venv/bin/python it names
APP_COMMAND = [sys.executable, *json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["app"].split()[1:]]
MANY_LOBS = 20
GENERATED_ENV = "lobs20"


@dataclass
class Timings:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def _time(args: list[str], outdir: Path, cwd: Path, into: Timings, extra_env: dict[str, str] | None = None) -> None:
    env = {
        **os.environ,
        **(extra_env or {}),
        "CDK_OUTDIR": str(outdir),
        "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
    }
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, check=False, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"bench-synth: {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    into.wall.append(time.perf_counter() - start)
    into.cpu.append(_children_cpu() - cpu)
    shutil.rmtree(outdir, ignore_errors=True)


def generate_many_lobs(config_dir: Path, target: Path, count: int = MANY_LOBS) -> Path:
    """A copy of `config_dir` with environment `lobs20`: dev with `count` copies of dev's first LOB, and enough GPU
    nodes for all of them."""
    shutil.copytree(config_dir, target)
    env = yaml.safe_load((target / "environments" / "dev.yaml").read_text())
    template_name = env["lobs"][0]
    lob = yaml.safe_load((target / "lobs" / f"{template_name}.yaml").read_text())
    gpus = sum(e["replicas"] * e.get("tensor_parallel", 1) for e in lob["endpoints"])
    names = [f"lob{i:02d}" for i in range(1, count + 1)]
    for name in names:
        (target / "lobs" / f"{name}.yaml").write_text(yaml.safe_dump({**lob, "name": name}, sort_keys=False))
    for group in env["hyperpod"]["instance_groups"]:
        if group["role"] == "gpu":
            group["count"] = max(group["count"] * count, (gpus + 1) * count)  # a free GPU per LOB for surges
    env |= {"name": GENERATED_ENV, "lobs": names}
    (target / "environments" / f"{GENERATED_ENV}.yaml").write_text(yaml.safe_dump(env, sort_keys=False))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    apps = [BASELINE, KVTIER_SETTINGS, "dev", "prod", GENERATED_ENV]
    timings = {name: Timings() for name in apps}
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        script, same_settings = work_dir / "minimal_app.py", work_dir / "minimal_novalidation_app.py"
        script.write_text(MINIMAL_APP.format(settings=""))
        same_settings.write_text(MINIMAL_APP.format(settings=", builtin_cloud_formation_validation=False"))
        config = generate_many_lobs(ROOT / "config", work_dir / "config")
        runs = {
            BASELINE: ([sys.executable, str(script)], work_dir, {}),
            KVTIER_SETTINGS: ([sys.executable, *APP_COMMAND[1:-1], str(same_settings)], work_dir, {}),
            "dev": (APP_COMMAND, ROOT, {"CDK_CONTEXT_JSON": '{"env": "dev"}'}),
            "prod": (APP_COMMAND, ROOT, {"CDK_CONTEXT_JSON": '{"env": "prod"}'}),
            GENERATED_ENV: (
                APP_COMMAND,
                ROOT,
                {"CDK_CONTEXT_JSON": f'{{"env": "{GENERATED_ENV}", "config_dir": "{config}"}}'},
            ),
        }
        _time(runs[BASELINE][0], work_dir / "warm", work_dir, Timings())  # fill the jsii cache once
        for run in range(args.runs):  # interleaved, so every app sees the same machine load
            for name in apps:
                command, cwd, env = runs[name]
                _time(command, work_dir / f"{name}-{run}", cwd, timings[name], env)
    body = _report(timings, args.runs)
    write_section(args.output, "synth", body)
    print(body)
    return 0


def _report(timings: dict[str, Timings], runs: int) -> str:
    base, same = timings[BASELINE], timings[KVTIER_SETTINGS]
    dev, many = timings["dev"], timings[GENERATED_ENV]
    wall_slope = (many.wall_median - dev.wall_median) / (MANY_LOBS - 1)
    cpu_slope = (many.cpu_median - dev.cpu_median) / (MANY_LOBS - 1)
    rows = [
        f"| {name} | {t.wall_median:.2f} | {t.wall_median / base.wall_median:.2f} | "
        f"{t.wall_median / same.wall_median:.2f} | {t.cpu_median:.2f} | {t.cpu_median / base.cpu_median:.2f} | "
        f"{', '.join(f'{w:.1f}' for w in t.wall)} |"
        for name, t in timings.items()
    ]
    verdicts = []
    for name, goal in GOALS.items():
        ratio = round(timings[name].wall_median / base.wall_median, 2)  # judged as printed
        verdicts.append(f"{name} {ratio:.2f}x (goal at most {goal}x: {'met' if ratio <= goal else 'NOT met'})")
    return "\n".join(
        [
            "## Synth time (`make bench-synth`)",
            "",
            f"`{' '.join(['python', *APP_COMMAND[1:]])}` (cdk.json's app command) per environment against a minimal",
            f"one-stack CDK app (one S3 bucket), {runs} runs each, interleaved, on {platform.machine()} with",
            f"{os.cpu_count()} cores, Python {platform.python_version()}. `{BASELINE}` is that app as CDK writes it",
            "(`python3 app.py`, aws-cdk-lib's defaults: its built-in CloudFormation validation runs);",
            f"`{KVTIER_SETTINGS}` runs as kvtier does (`-O`, that validation off), so its column is what kvtier's own",
            f"constructs and charts cost. `{GENERATED_ENV}` is dev with {MANY_LOBS} copies of its LOB.",
            "",
            f"| app | wall median (s) | x {BASELINE} | x {KVTIER_SETTINGS} | CPU median (s) | CPU x {BASELINE} | "
            "wall runs (s) |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Issue 18's targets, against `{BASELINE}` (the yardstick its measurements used: its dev ratio fell from",
            "2.36x to 1.39x when kvtier alone turned the validation off), in this run:",
            "",
            *[f"- {verdict}" for verdict in verdicts],
            "",
            f"Cost of one more LOB: **{wall_slope:.2f} s** wall, {cpu_slope:.2f} s CPU. Medians move by up to a tenth",
            "between runs on this shared machine. kvtier turns the validation back on with `-c cfn_validation=true`;",
            "cfn-lint checks every template in the tests.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
