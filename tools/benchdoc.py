"""docs/benchmarks.md holds one section per benchmark; each benchmark rewrites only its own section."""

from __future__ import annotations

from pathlib import Path

HEADER = "# Benchmarks\n\nEach section is written by the command it names; numbers are from the machine that ran it.\n"


def write_section(path: Path, key: str, body: str) -> None:
    """Replace the section between `<!-- begin:key -->` and `<!-- end:key -->`, or append it."""
    begin, end = f"<!-- begin:{key} -->", f"<!-- end:{key} -->"
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
