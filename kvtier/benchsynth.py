"""`make bench-synth`: time `python app.py` for dev against a minimal one-stack CDK app, in the same run.

Both run as fresh processes with the same Python and Node, so jsii start-up is in both; the ratio says what
kvtier's own constructs cost. Medians of several runs go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtier.benchdoc import write_section

ROOT = Path(__file__).resolve().parent.parent
MINIMAL_APP = """
import os
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App(outdir=os.environ["CDK_OUTDIR"])
stack = cdk.Stack(app, "Minimal")
s3.Bucket(stack, "Bucket")
app.synth()
"""


def _time(args: list[str], outdir: Path, cwd: Path) -> float:
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        "PATH": f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}",
    }
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    kvtier: list[float] = []
    minimal: list[float] = []
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        script = work_dir / "minimal_app.py"
        script.write_text(MINIMAL_APP)
        _time([sys.executable, str(script)], work_dir / "warm", work_dir)  # fill the jsii cache once
        for run in range(args.runs):  # interleaved, so both see the same machine load
            kvtier.append(_time([sys.executable, "app.py"], work_dir / f"kvtier-{run}", ROOT))
            minimal.append(_time([sys.executable, str(script)], work_dir / f"minimal-{run}", work_dir))
    k, m = statistics.median(kvtier), statistics.median(minimal)
    body = "\n".join(
        [
            "## Synth time (`make bench-synth`)",
            "",
            f"`python app.py` (environment `dev`, every stack) against a minimal one-stack CDK app, {args.runs} runs each,",
            f"interleaved, on {platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}.",
            "",
            "| app | median (s) | runs (s) |",
            "|---|---|---|",
            f"| kvtier dev | {k:.2f} | {', '.join(f'{t:.2f}' for t in kvtier)} |",
            f"| minimal | {m:.2f} | {', '.join(f'{t:.2f}' for t in minimal)} |",
            "",
            f"Ratio kvtier / minimal: **{k / m:.2f}**. The minimal app's time is mostly Python and jsii start-up.",
        ]
    )
    write_section(args.output, "synth", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
