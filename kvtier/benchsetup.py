"""`make bench-setup`: time a fresh set-up (a new venv with every pinned package, as `make setup` installs it) and
write it to docs/benchmarks.md. uv's cache (under the user's cache folder) is what a machine keeps between clones;
the first run on a new machine also downloads, so run it twice to see both."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtier.benchdoc import write_section

ROOT = Path(__file__).resolve().parent.parent
LMCACHE = "lmcache==0.4.3"  # the Makefile's LMCACHE_VERSION


def _fresh_install(installer: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        venv = Path(work) / "venv"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        done = subprocess.run(
            ["scripts/install-venv.sh", str(venv), "requirements-dev.txt", LMCACHE],
            cwd=ROOT,
            env={**os.environ, "KVTIER_INSTALLER": installer},
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"bench-setup: the {installer} install failed: {done.stderr.strip()[-500:]}")
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--installers", nargs="+", default=["uv"], choices=["uv", "pip"])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    rows = [f"| {name} | {_fresh_install(name):.0f} |" for name in args.installers]
    body = "\n".join(
        [
            "## Set-up time (`make bench-setup`)",
            "",
            "A fresh venv with every pin of requirements-dev.txt, LMCache's parser and kvtier (editable), on",
            f"{platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}, the installer's",
            "cache as this machine had it. `make setup` adds `npm ci` (about 1 min without npm's cache).",
            "",
            "| installer | seconds |",
            "|---|---|",
            *rows,
        ]
    )
    write_section(args.output, "setup", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
