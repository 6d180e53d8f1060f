"""`make bench-client` (tools/benchclient.py): its bounds, and that it reads what `kvtier bench` really prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import benchclient


@pytest.mark.parametrize("requests", [["64", "64"], ["100", "256"], ["0", "64"]])
def test_request_counts_that_cannot_give_a_marginal_cost_exit_2(
    requests: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert benchclient.main(["--requests", *requests]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "multiples of 64" in err


def test_a_missing_engine_venv_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert benchclient.main(["--engine-python", str(tmp_path / "python")]) == 2
    assert "make test-engine" in capsys.readouterr().err


@pytest.mark.parametrize("baseline", ["old", "old=", "=.", "old=/nonexistent"])
def test_a_baseline_that_is_not_label_and_checkout_exits_2(
    baseline: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert benchclient.main(["--baseline", baseline]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "LABEL=DIR" in err


def test_kvtier_runs_are_read_from_the_real_commands_output(tmp_path: Path) -> None:
    """One real `kvtier bench shared-prefix` run against the test server: the summary row it parses is there."""
    with benchclient.test_server() as url:
        run = benchclient.kvtier_run(url, benchclient.IN_FLIGHT, tmp_path / "out")
    assert run.cpu_s > 0 and run.wall_s > 0
    assert run.rate is not None and run.rate > 0
    assert run.ttft_p50_ms is not None and run.ttft_p50_ms > 0
