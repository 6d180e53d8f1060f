"""`make bench-synth` without timing anything: the generated 20-LOB environment is a valid kvtier configuration, and
the report's ratios and verdicts follow the measured times (the minimal app as CDK writes it is the yardstick)."""

from __future__ import annotations

from pathlib import Path

from kvtier.rules import load_checked
from tests.support import CONFIG_DIR
from tools.benchsynth import BASELINE, GENERATED_ENV, KVTIER_SETTINGS, MANY_LOBS, Timings, _report, generate_many_lobs


def test_generated_environment_has_twenty_lobs_and_passes_every_rule(tmp_path: Path) -> None:
    config = load_checked(generate_many_lobs(CONFIG_DIR, tmp_path / "config"), GENERATED_ENV)
    assert len(config.lobs) == MANY_LOBS
    assert len({lob.name for lob in config.lobs}) == MANY_LOBS


def _timings(**walls: float) -> dict[str, Timings]:
    return {name: Timings(wall=[w, w, w], cpu=[w, w, w]) for name, w in walls.items()}


def test_report_judges_each_goal_from_the_medians() -> None:
    walls = {BASELINE: 3.0, KVTIER_SETTINGS: 1.0, "dev": 4.2, "prod": 5.7, GENERATED_ENV: 4.2 + 19 * 0.25}
    body = _report(_timings(**walls), 3)
    assert "dev 1.40x (goal at most 1.4x: met)" in body
    assert "prod 1.90x (goal at most 1.8x: NOT met)" in body
    assert "| dev | 4.20 | 1.40 | 4.20 |" in body  # wall, x minimal, x minimal without validation
    assert "**0.25 s** wall" in body  # (20 LOBs - dev) / 19
