"""The sample outputs in README.md and docs/*.md, run and compared (or rewritten) so that they cannot drift.

A sample is a ```console or ```text block whose first line is a `$ kvtier ...` command: every `$ ` line (with its
`\\` continuation lines) is run in order by bash, and the block must equal what the commands print (stdout and
stderr together, 80 columns, as in a pipe). The commands run in a scratch folder holding a copy of `config/` and
the repository's `examples/` (with the Mooncake trace the samples replay). Comments right above the block may
change the copied configuration first, each replacing a text that occurs once in one file
(docs/configuration.md's validate samples use them):

    <!-- sample: config/environments/dev.yaml: "memory_percent: 20" -> "memory_percent: 10" -->

    python -m tools.docsamples           # list the samples that differ (exit 1 if any)
    python -m tools.docsamples --write   # rewrite them from what the tools print now
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
EDIT = re.compile(r'^<!-- sample: (?P<file>\S+): (?P<old>"(?:[^"\\]|\\.)*") -> (?P<new>"(?:[^"\\]|\\.)*") -->$')
TIMEOUT_S = 300
RUN_FOLDER = re.compile(r"\b\d{8}T\d{6}Z(?:-\d+)?\b")  # kvtier simulate's plot folder, named by its UTC start


@dataclass(frozen=True)
class Sample:
    page: Path
    first: int  # index of the block's first line (after the fence) in the page's lines
    last: int  # index of the closing fence
    text: str  # the block as written
    commands: tuple[str, ...]  # each command as shown, continuation lines included
    edits: tuple[tuple[str, str, str], ...]  # (file under the scratch folder, old text, new text)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.first}"


def samples(page: Path) -> list[Sample]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence in ("```console", "```text") and i + 1 < len(lines) and lines[i + 1].startswith("$ kvtier "):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = lines[i + 1 : end]
            found.append(Sample(page, i + 1, end, "\n".join(body), _commands(body), _edits(lines, i)))
            i = end
        i += 1
    return found


def _commands(body: list[str]) -> tuple[str, ...]:
    commands, current = [], None
    for line in body:
        if current is not None:
            current.append(line)
        elif line.startswith("$ "):
            current = [line]
        if current is not None and not line.endswith("\\"):
            commands.append("\n".join(current))
            current = None
    return tuple(commands)


def _edits(lines: list[str], fence: int) -> tuple[tuple[str, str, str], ...]:
    edits = []
    j = fence - 1
    while j >= 0 and (not lines[j].strip() or EDIT.match(lines[j].strip())):
        match = EDIT.match(lines[j].strip())
        if match:
            edits.append((match["file"], json.loads(match["old"]), json.loads(match["new"])))
        j -= 1
    return tuple(reversed(edits))


def _edit(work: Path, file: str, old: str, new: str) -> None:
    path = work / file
    text = path.read_text(encoding="utf-8")
    if text.count(old) != 1:
        raise ValueError(f"{file}: {old!r} occurs {text.count(old)} times; a sample edit needs one")
    path.write_text(text.replace(old, new), encoding="utf-8")


def run(sample: Sample) -> str:
    """What the sample's commands print now, in the form of the block."""
    with tempfile.TemporaryDirectory(prefix="kvtier-docsample-") as scratch:
        work = Path(scratch)
        shutil.copytree(ROOT / "config", work / "config")
        (work / "examples").symlink_to(ROOT / "examples")
        for file, old, new in sample.edits:
            _edit(work, file, old, new)
        # Each command shown as written, then run; `echo $?` sees the previous command's code, not printf's.
        script = "rc=0\n" + "".join(
            f"printf '%s\\n' {_quote(command)}\n(exit $rc); {command[2:]} 2>&1; rc=$?\n" for command in sample.commands
        )
        env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "KVTIER_CONFIG_DIR", "FORCE_COLOR"}}
        env.update(
            PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",  # stdout and stderr in the order they were written, as on a terminal
            COLUMNS="80",
            NO_COLOR="1",
            TERM="dumb",
        )
        done = subprocess.run(
            ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        text = (done.stdout + done.stderr).replace(str(work) + "/", "")
        return normalise(text)


# kvtier simulate's progress lines off a terminal (kvtier/cli/simulate.py `_Lines`): on a terminal the bar is
# transient and leaves nothing, which is what the docs show.
PROGRESS_LINE = re.compile(r"^kvtier simulate: (reading .* \(bytes\)|simulating)( \.\.\.|: [\d,]+.*, \d+ s)$")


def normalise(text: str) -> str:
    """Without what changes from run to run (a run folder's UTC time) or cannot show in Markdown (trailing blanks
    of a padded table)."""
    text = RUN_FOLDER.sub("<time>", text)
    lines = [line.rstrip() for line in text.rstrip("\n").splitlines() if not PROGRESS_LINE.match(line)]
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def rewrite(sample: Sample, output: str) -> None:
    lines = sample.page.read_text(encoding="utf-8").splitlines()
    lines[sample.first : sample.last] = output.splitlines()
    sample.page.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the samples that differ")
    args = parser.parse_args(argv)
    differ = 0
    for page in PAGES:
        for sample in reversed(samples(page)):  # bottom first: a rewrite keeps the line numbers above it
            output = run(sample)
            if output == sample.text:
                continue
            differ += 1
            print(f"{sample.where}: differs from what the commands print now", file=sys.stderr)
            if args.write:
                rewrite(sample, output)
    return 1 if differ and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
