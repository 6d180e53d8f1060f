"""Every citation a reader meets can be followed from a clone: no tracked file outside tests/ points at a path that
exists only on the machine the project was built on (the shared reference folder beside the clone, or /work)."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT

LOCAL_PATH = re.compile(r"/work/|\.\./shared")


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30)
    return [name for name in listed.stdout.decode().split("\0") if name and not name.startswith("tests/")]


def test_no_tracked_file_outside_tests_cites_a_local_path() -> None:
    files = tracked_files()
    assert "README.md" in files and "kvtier/versions.py" in files  # the listing works
    found = []
    for name in files:
        path = ROOT / name
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}" for m in LOCAL_PATH.finditer(text)]
    assert found == [], "cite the public source or docs/references.md instead:\n" + "\n".join(found)
