"""Every `kvtier validate` sample in docs/configuration.md is what the tool prints, so the page cannot drift.

A sample is a ```console block with `$ kvtier validate ...` lines, each followed by the exact output (stdout and
stderr as a terminal interleaves them), and `$ echo $?` followed by the exit code. The HTML comments right above a
block say which edits turn the shipped config/ into the one the sample ran on:
`<!-- sample: config/lobs/retail.yaml: "old text" -> "new text" -->` (each old text must occur exactly once). The
test makes those edits in a copy of config/, runs the commands there with the CLI's own entry point and compares.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kvtier.cli import main as cli
from kvtier.config.loader import CONFIG_DIR_VARIABLE
from tests.support import CONFIG_DIR, ROOT

PAGE = ROOT / "docs" / "configuration.md"
EDIT = re.compile(r'^<!-- sample: (?P<file>\S+): (?P<old>"(?:[^"\\]|\\.)*") -> (?P<new>"(?:[^"\\]|\\.)*") -->$')


@dataclass
class Sample:
    line: int
    edits: list[tuple[str, str, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def samples(page: Path) -> list[Sample]:
    """The console blocks of `page` that run `kvtier validate`, with the edits written above each."""
    found: list[Sample] = []
    edits: list[tuple[str, str, str]] = []
    block: Sample | None = None
    for number, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if block is not None:
            if raw.strip() == "```":
                if any(line.startswith("$ kvtier validate") for line in block.lines):
                    found.append(block)
                block = None
            else:
                block.lines.append(raw)
            continue
        match = EDIT.match(raw.strip())
        if match:
            edits.append((match["file"], json.loads(match["old"]), json.loads(match["new"])))
        elif raw.strip() == "```console":
            block, edits = Sample(number, edits), []
        elif raw.strip():
            assert not edits, f"{page.name}:{number}: a sample edit must come right before its ```console block"
    return found


def _run(words: list[str]) -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli(words)
    return code, out.getvalue().splitlines()


def check(sample: Sample, work: Path) -> list[str]:
    """Differences between what the sample shows and what the tool prints, run in `work`."""
    shutil.copytree(CONFIG_DIR, work / "config")
    for file, old, new in sample.edits:
        path = work / file
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"line {sample.line}: {old!r} occurs {text.count(old)} times in {file}"
        path.write_text(text.replace(old, new), encoding="utf-8")
    problems: list[str] = []
    code: int | None = None
    lines = sample.lines
    i = 0
    while i < len(lines):
        command = lines[i]
        assert command.startswith("$ "), f"line {sample.line + 1 + i}: expected a `$ ` command, got {command!r}"
        expected: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        words = shlex.split(command[2:])
        if words == ["echo", "$?"]:
            got = [str(code)]
        else:
            assert words[0] == "kvtier", f"line {sample.line}: only kvtier and `echo $?` run in a sample: {command}"
            with contextlib.chdir(work):
                code, got = _run(words[1:])
        if got != expected:
            problems.append(f"docs/configuration.md:{sample.line}: {command}\n  shows {expected}\n  prints {got}")
    return problems


SAMPLES = samples(PAGE)


def test_the_page_has_samples_of_valid_invalid_and_warning_output() -> None:
    assert len(SAMPLES) >= 4, [s.line for s in SAMPLES]
    shown = "\n".join(line for s in SAMPLES for line in s.lines)
    assert "configuration is valid" in shown and "warning: " in shown and "kvtier validate: " in shown


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"line {s.line}" for s in SAMPLES])
def test_each_sample_is_what_validate_prints(sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_DIR_VARIABLE, raising=False)
    problems = check(sample, tmp_path)
    assert problems == [], "\n".join(problems)


def test_a_drifted_sample_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page as it was (a sample showing a failure on a value the shipped file no longer has) fails the check."""
    monkeypatch.delenv(CONFIG_DIR_VARIABLE, raising=False)
    page = tmp_path / "old.md"
    page.write_text(
        "```console\n$ kvtier validate -e dev\nkvtier validate: config/environments/dev.yaml: "
        "hyperpod.tiered_storage.memory_percent: 10 is out of range; use a value >= 20\n$ echo $?\n2\n```\n"
    )
    (old,) = samples(page)
    problems = check(old, tmp_path / "run")
    assert len(problems) == 2, problems  # the message and the exit code
    assert "prints ['dev: configuration is valid']" in problems[0]
    assert "prints ['0']" in problems[1]
