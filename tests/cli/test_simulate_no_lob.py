"""`simulate` on an environment that runs no line of business says so (and where), instead of asking for `--lob`."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.cli import main as cli
from tests.support import SAMPLE_TRACE


def test_an_environment_without_lobs_names_its_lobs_list(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.write_text(env.read_text().replace("lobs: [retail]", "lobs: []"))
    code = cli(["simulate", "--config-dir", str(config_copy), "--trace", str(SAMPLE_TRACE), "--no-plots"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        f"kvtier simulate: {env}: lobs: environment 'dev' runs no line of business, so it has no endpoint to simulate; "
        "list a LOB file under lobs: (see config/lobs/), or pick another environment with -e"
    )
