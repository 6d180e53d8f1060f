"""The janitor benchmark on a small tree: it runs the shipped script as a process, measures both passes, writes its
own section of the benchmarks page and leaves no tree behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import benchjanitor


def test_a_small_run_writes_its_section_and_cleans_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "benchmarks.md"
    work = tmp_path / "work"
    work.mkdir()
    assert benchjanitor.main(["--files=50", "--per-dir=10", f"--workdir={work}", f"--output={output}"]) == 0
    text = output.read_text()
    assert "<!-- begin:janitor -->" in text and "One janitor pass over 50 files" in text
    rows = [line for line in text.splitlines() if line.startswith(("| under budget", "| dry run"))]
    assert len(rows) == 2
    for row in rows:
        wall, cpu, rss = (float(cell) for cell in row.strip("|").split("|")[1:])
        assert wall > 0 and cpu > 0 and rss > 0
    assert list(work.iterdir()) == [], "the tree is removed"
    assert "| Pass |" in capsys.readouterr().out


def test_bad_sizes_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        benchjanitor.main(["--files=0"])
    assert info.value.code == 2
