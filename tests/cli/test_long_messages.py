"""An error about many things stays one readable line: lists are capped where they are written, and any error line
on stderr is capped as a last resort (--json keeps the whole message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvtier.cli import MAX_LINE, _cap
from kvtier.cli import main as cli
from kvtier.errors import name_list


def _many_endpoints(config_dir: Path, count: int) -> None:
    path = config_dir / "lobs" / "retail.yaml"
    doc = yaml.safe_load(path.read_text())
    first = doc["endpoints"][0]
    doc["endpoints"] = [{**first, "name": f"qwen3-8b-endpoint-number-{i:03d}", "replicas": 1} for i in range(count)]
    doc["gpu_quota"] = 2 * count
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_500_endpoint_error_is_one_short_line(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _many_endpoints(config_copy, 500)
    assert cli(["validate", "-e", "dev", "--config-dir", str(config_copy)]) == 2
    lines = capsys.readouterr().err.splitlines()
    (gpus,) = [line for line in lines if "groups have" in line]
    assert "retail/qwen3-8b-endpoint-number-004 1 x TP 1 and 495 more)" in gpus
    assert "number-005" not in gpus
    assert all(len(line) <= 600 for line in lines), max(len(line) for line in lines)


def test_name_list_caps_and_says_how_many_more() -> None:
    assert name_list(["a", "b"]) == "a, b"
    assert name_list([str(i) for i in range(12)]) == "0, 1, 2, 3, 4 and 7 more"
    assert name_list([]) == ""


def test_any_error_line_is_capped_on_stderr_and_whole_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    long = "x" * 20_000
    assert len(_cap(long)) < MAX_LINE + 100
    assert _cap(long).endswith("(19,100 more characters; --json prints the whole message)")
    assert _cap("short") == "short"
    missing = "m" * 5_000 + ".json"
    assert cli(["bench", "compare", missing, missing, "--json"]) == 2
    out, err = capsys.readouterr()
    assert max(len(line) for line in err.splitlines()) <= MAX_LINE
    assert missing in json.loads(out)["error"]["message"]
