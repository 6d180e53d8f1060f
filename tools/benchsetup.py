"""`make bench-setup`: time a fresh `make setup` in a fresh clone of this repository, step by step (the same make
targets, in the order `make setup` runs them), and write it to docs/benchmarks.md.

What a machine keeps between clones is used as it is: uv's and npm's caches under the user's home (the first run on
a new machine also downloads, so run it twice to see both). `--installer pip` times pip's fallback instead of uv.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.benchdoc import write_section

ROOT = Path(__file__).resolve().parent.parent
# The prerequisites of `make setup`, in its order, then `setup` itself (kvtier's own .pyc); then what `make pytest`
# adds for the tests alone.
STEPS = (
    (".venv/.installed", "main venv: requirements-dev.txt, LMCache's parser, kvtier (editable)"),
    ("node_modules/.installed", "npm ci: aws-cdk CLI and Node"),
    (".venv/.optimized", "-O and plain bytecode of what a synth and the command load (scripts/compile-optimized.py)"),
    ("setup", "kvtier's own .pyc"),
)
TEST_ONLY = (
    (".venv-checkov/.installed", "checkov's venv for the tests: requirements-checkov.txt"),
    (".venv-nca/.installed", "network-config-analyzer's venv for the tests: requirements-nca.txt"),
    (".venv-aiperf/.installed", "NVIDIA AIPerf's venv for the tests: requirements-aiperf.txt"),
    (".venv/.compiled", "plain bytecode of every installed package, for the tests"),
)
INSTALLS = (".venv/.installed", "node_modules/.installed")
# After the set-up, the synth a newcomer runs next: `make synth` from a fresh clone is the two together.
SYNTH = ("synth", "cdk synth of the default environment (dev)")


def _make(clone: Path, target: str, installer: str) -> float:
    start = time.perf_counter()
    env = {**os.environ, "KVTIER_INSTALLER": installer}
    done = subprocess.run(
        ["make", "-s", target], cwd=clone, env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"bench-setup: make {target} failed: {(done.stderr or done.stdout).strip()[-800:]}")
    return time.perf_counter() - start


def fresh_setup(installer: str) -> list[tuple[str, str, float]]:
    """(target, what, seconds) for each step of `make setup`, then the test-only ones, in a fresh clone of HEAD."""
    with tempfile.TemporaryDirectory() as work:
        clone = Path(work) / "kvtier"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
        return [(target, what, _make(clone, target, installer)) for target, what in (*STEPS, SYNTH, *TEST_ONLY)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--installer", default="uv", choices=["uv", "pip"])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    steps = fresh_setup(args.installer)
    installs = sum(s for target, _, s in steps if target in INSTALLS)
    setup = sum(s for target, _, s in steps if target in dict(STEPS))
    synth = sum(s for target, _, s in steps if target == SYNTH[0])
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    body = "\n".join(
        [
            "## Set-up time (`make bench-setup`)",
            "",
            f"A fresh `make setup` in a fresh clone (installer: {args.installer}), step by step, on",
            f"{platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}, with uv's and npm's",
            f"caches as this machine had them. Load average (1 / 5 / 15 min) at the end: {load}.",
            "",
            "| step (make target) | what | seconds |",
            "|---|---|---|",
            *[f"| `{target}` | {what} | {seconds:.0f} |" for target, what, seconds in steps],
            f"| | installs of `make setup` (venv and npm) | **{installs:.0f}** |",
            f"| | whole `make setup` (without the test-only steps) | **{setup:.0f}** |",
            f"| | `make synth` from a fresh clone (set-up and synth) | **{setup + synth:.0f}** |",
        ]
    )
    write_section(args.output, "setup", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
