"""The L2 janitor: its selection logic on known files, sizes and ages, run exactly as shipped in the ConfigMap."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.k8s.curvine.scripts import JANITOR, l2_janitor, script_text
from kvtier.k8s.curvine.scripts.l2_janitor import GB, Entry, plan

NOW = 1_900_000_000.0  # a fixed clock: the script takes --now
HOUR = 3600.0
MB = 1000**2  # decimal, like the budget


def interpreters() -> list[str]:
    """This interpreter, plus Python 3.9 (the Curvine runtime image's) when this machine has it."""
    found = [sys.executable]
    for candidate in ("/root/.pyenv/versions/3.9.18/bin/python3.9", shutil.which("python3.9")):
        if candidate and Path(candidate).exists() and _is_python_3_9(candidate):
            found.append(candidate)
            break
    return found


def _is_python_3_9(python: str) -> bool:
    check = "import sys; sys.exit(sys.version_info[:2] != (3, 9))"
    return subprocess.run([python, "-c", check], capture_output=True, timeout=30, check=False).returncode == 0


def make_tree(root: Path, files: dict[str, tuple[int, float]]) -> None:
    """files: relative path -> (size in bytes, age in hours)."""
    for relative, (size, age_hours) in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)
        mtime = NOW - age_hours * HOUR
        os.utime(path, (mtime, mtime))


def run(root: Path, *args: str, python: str = sys.executable) -> tuple[int, dict[str, Any]]:
    script = root.parent / JANITOR
    script.write_text(script_text(JANITOR))  # the ConfigMap's content
    result = subprocess.run(
        [python, str(script), str(root), f"--now={NOW}", "--once", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = result.stdout.strip() or result.stderr.strip()
    return result.returncode, json.loads(out.splitlines()[-1]) if out.startswith("{") else {"raw": out}


def remaining(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# Two endpoints, as LMCache writes them: /mnt/kvtier/l2/<endpoint>/<key>.data, temp files <key>.data.tmp.
TREE = {
    "qwen3-8b/a@bfloat16.data": (10 * MB, 30.0),  # older than max age (24 h)
    "qwen3-8b/b@bfloat16.data": (10 * MB, 5.0),
    "qwen3-8b/c@bfloat16.data": (10 * MB, 1.0),
    "qwen3-8b/d@bfloat16.data.tmp": (10 * MB, 3.0),  # interrupted write: stale after 60 min
    "qwen3-8b/e@bfloat16.data.tmp": (10 * MB, 0.1),  # a write in progress
    "llama-8b/f@bfloat16.data": (10 * MB, 8.0),
    "llama-8b/g@bfloat16.data": (10 * MB, 2.0),
    "llama-8b/deep/h.data": (10 * MB, 4.0),  # deeper levels are walked too
}


@pytest.mark.parametrize("python", interpreters(), ids=lambda p: Path(p).name)
def test_one_pass_on_a_known_tree(tmp_path: Path, python: str) -> None:
    root = tmp_path / "l2"
    make_tree(root, TREE)
    # Budget 40 MB (0.04 GB), target 0.9 -> 36 MB: after age and temp cleanup 60 MB remain (incl. the young temp file), so
    # the oldest writes go until at most 36 MB are left: f (8 h), b (5 h), h (4 h) -> 30 MB.
    code, summary = run(root, "--budget-gb=0.04", "--max-age-hours=24", python=python)
    assert code == 0, summary
    assert remaining(root) == {"qwen3-8b/c@bfloat16.data", "qwen3-8b/e@bfloat16.data.tmp", "llama-8b/g@bfloat16.data"}
    assert summary["deleted_stale_tmp"] == 1
    assert summary["deleted_expired"] == 1
    assert summary["deleted_over_budget"] == 3
    assert summary["bytes_after"] == 30 * MB
    assert summary["budget_bytes"] == 40 * MB == round(0.04 * GB)
    assert summary["bytes_by_dir"] == {"llama-8b": 10 * MB, "qwen3-8b": 20 * MB}
    assert (root / "llama-8b" / "deep").is_dir(), "directories are never deleted"


def test_under_budget_only_age_and_stale_temp_files_go(tmp_path: Path) -> None:
    root = tmp_path / "l2"
    make_tree(root, TREE)
    code, summary = run(root, "--budget-gb=1", "--max-age-hours=24")
    assert code == 0
    assert remaining(root) == set(TREE) - {"qwen3-8b/a@bfloat16.data", "qwen3-8b/d@bfloat16.data.tmp"}
    assert summary["deleted_over_budget"] == 0


def test_dry_run_deletes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "l2"
    make_tree(root, TREE)
    code, summary = run(root, "--budget-gb=0.04", "--max-age-hours=24", "--dry-run")
    assert code == 0
    assert remaining(root) == set(TREE)
    assert summary["deleted_over_budget"] == 3


def test_symlinks_are_neither_followed_nor_deleted(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_tree(outside, {"precious.data": (MB, 100.0)})
    root = tmp_path / "l2"
    make_tree(root, {"ep/old.data": (MB, 100.0)})
    (root / "ep" / "link").symlink_to(outside / "precious.data")
    (root / "dirlink").symlink_to(outside)
    code, _ = run(root, "--budget-gb=1", "--max-age-hours=1")
    assert code == 0
    assert (outside / "precious.data").exists()
    assert (root / "ep" / "link").is_symlink()
    assert not (root / "ep" / "old.data").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--budget-gb=0", "--max-age-hours=1"],
        ["--budget-gb=1", "--max-age-hours=-1"],
        ["--budget-gb=1"],
        ["--budget-gb=1", "--max-age-hours=1", "--probe-max-files=0"],
        ["--budget-gb=1", "--max-age-hours=1", "--probe-seconds=0"],
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str]) -> None:
    root = tmp_path / "l2"
    root.mkdir()
    code, _ = run(root, *args)
    assert code == 2


def test_a_missing_root_exits_2_and_touches_nothing(tmp_path: Path) -> None:
    code, _ = run(tmp_path / "absent", "--budget-gb=1", "--max-age-hours=1")
    assert code == 2


def test_the_script_is_python_3_9_syntax() -> None:
    # The Curvine runtime image is Rocky Linux 9: python3 is 3.9.
    ast.parse(script_text(JANITOR), feature_version=(3, 9))
    assert l2_janitor.__doc__ is not None


files = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=50 * MB),
        st.floats(min_value=0, max_value=100 * HOUR, allow_nan=False),
        st.booleans(),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    spec=files,
    budget=st.integers(min_value=1, max_value=500 * MB),
    max_age_h=st.floats(min_value=0.1, max_value=48),
    fraction=st.floats(min_value=0.1, max_value=1.0),
)
def test_plan_properties(spec: list[tuple[int, float, bool]], budget: int, max_age_h: float, fraction: float) -> None:
    entries = [
        Entry(f"/l2/ep/{i}.data" + (".tmp" if tmp else ""), size, NOW - age) for i, (size, age, tmp) in enumerate(spec)
    ]
    result = plan(
        entries, now=NOW, budget_bytes=budget, max_age_s=max_age_h * HOUR, tmp_max_age_s=HOUR, target_fraction=fraction
    )
    deleted, kept = result.deleted(), result.kept
    assert sorted(map(id, deleted + kept)) == sorted(map(id, entries)), "every file is either deleted or kept"
    assert all(NOW - e.mtime > max_age_h * HOUR for e in result.expired)
    assert all(not e.is_tmp and NOW - e.mtime <= max_age_h * HOUR for e in kept if not e.is_tmp)
    assert all(e.is_tmp and NOW - e.mtime > HOUR for e in result.stale_tmp)
    assert not any(e.is_tmp for e in result.over_budget), "a write in progress is never a budget victim"
    young_tmp = sum(e.size for e in kept if e.is_tmp)
    kept_bytes = sum(e.size for e in kept)
    if result.over_budget:
        # Oldest first: nothing kept (but in-flight temp files) is older than what went for the budget.
        newest_victim = max(e.mtime for e in result.over_budget)
        assert all(e.mtime >= newest_victim for e in kept if not e.is_tmp)
        # Stopped as soon as the target was reached, or nothing but temp files is left.
        assert kept_bytes <= budget * fraction or kept_bytes == young_tmp
        assert kept_bytes + result.over_budget[-1].size > budget * fraction
    else:
        assert kept_bytes <= budget or all(e.is_tmp for e in kept), "over budget only when nothing is deletable"
