"""The planner's L2 read rate is the network model at the connector's measured read efficiency (issue 40): the
catalog's rate was measured with LMCache reading the blog's 14.7 MB chunk files, so an endpoint whose connector
reads its own files less efficiently (small files: a thread hop or an open a file) is planned slower, and one that
reads them as LMCache reads the blog's keeps the calibrated rate (tests/planner/test_l2_calibration.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from kvtier.catalog import L2_CALIBRATION_FILE_BYTES, MODELS
from kvtier.connectors import connector_named, l2_read_share
from kvtier.connectors.base import ReadEfficiency
from kvtier.planner.speed import speeds
from kvtier.planner.tiers import find_endpoint, tier_model
from kvtier.rules import load_checked

CURVE = ReadEfficiency(((1_000_000, 0.4), (10_000_000, 0.8), (20_000_000, 0.7), (100_000_000, 1.2)), "test")


def test_the_curve_interpolates_on_log_size_never_falls_holds_at_the_ends_and_never_exceeds_one() -> None:
    assert CURVE.at(100) == 0.4 and CURVE.at(1_000_000) == 0.4
    assert CURVE.at(int(math.sqrt(1e6 * 1e7))) == pytest.approx(0.6)
    assert CURVE.at(10_000_000) == pytest.approx(0.8)
    assert CURVE.at(20_000_000) == pytest.approx(0.8)  # the measured 0.7 is below a smaller size's: noise
    assert CURVE.at(int(math.sqrt(2e7 * 1e8))) == pytest.approx(1.0)  # halfway from 0.8 to 1.2: capped from here
    assert CURVE.at(50_000_000) == 1.0 and CURVE.at(10**12) == 1.0


@pytest.mark.parametrize("name", ["lmcache", "vllm"])
def test_every_connector_has_a_measured_curve_with_its_source(name: str) -> None:
    curve = connector_named(name).read_efficiency
    sizes = [size for size, _ in curve.points]
    assert sizes == sorted(sizes) and len(sizes) >= 2
    assert all(share > 0 for _, share in curve.points)
    assert "make bench-l2" in curve.source and "docs/benchmarks.md" in curve.source


def _retail(config_dir: Path, **cache: object) -> None:
    path = config_dir / "lobs" / "retail.yaml"
    lob = yaml.safe_load(path.read_text())
    lob["endpoints"][0]["cache"].update(cache)
    path.write_text(yaml.safe_dump(lob))


def test_lmcache_at_the_blogs_file_size_keeps_the_calibrated_rate(config_copy: Path) -> None:
    lmcache = connector_named("lmcache")
    blog = int(L2_CALIBRATION_FILE_BYTES.value)
    assert blog == 256 * MODELS["Qwen/Qwen2-7B-Instruct"].kv_bytes_per_token + lmcache.l2_file_overhead_bytes(
        find_endpoint(load_checked(config_copy, "dev"), "retail", "qwen3-8b")[1]
    )
    _, endpoint = find_endpoint(load_checked(config_copy, "dev"), "retail", "qwen3-8b")
    qwen2 = MODELS["Qwen/Qwen2-7B-Instruct"]
    assert lmcache.l2_file_bytes(endpoint, qwen2) == blog
    assert l2_read_share(endpoint, qwen2) == 1.0


def test_small_files_plan_a_slower_l2_read_by_exactly_the_measured_share(config_copy: Path) -> None:
    """chunk_size 16 makes 2.4 MB files of Qwen3-8B: the plan's per-token L2 load is the network model's divided by
    the connector's share there (the old planner used the network model alone, whatever the file size)."""
    _retail(config_copy, chunk_size=16)
    config = load_checked(config_copy, "dev")
    lob, endpoint = find_endpoint(config, "retail", "qwen3-8b")
    model = MODELS["Qwen/Qwen3-8B"]
    share = l2_read_share(endpoint, model)
    lmcache = connector_named("lmcache")
    calibrated = lmcache.read_efficiency.at(int(L2_CALIBRATION_FILE_BYTES.value))
    assert share == pytest.approx(min(lmcache.read_efficiency.at(16 * model.kv_bytes_per_token + 28) / calibrated, 1))
    assert share < 1.0
    from kvtier.catalog import INSTANCE_TYPES

    network = speeds(model, INSTANCE_TYPES[endpoint.instance_type], endpoint.tensor_parallel).l2_s_per_token
    tiers = tier_model(config, lob.name, endpoint.name)
    assert tiers.l2_load_s_per_token == pytest.approx(network / share)
    assert tiers.l2_load_s_per_token > network * 1.05


def _measured_tmpfs_rows() -> dict[str, list[tuple[int, float]]]:
    """(file bytes, ratio) of each connector's tmpfs rows in docs/benchmarks.md's `make bench-l2` section."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text.split("<!-- begin:l2-read -->", 1)[1].split("<!-- end:l2-read -->", 1)[0]
    rows: dict[str, list[tuple[int, float]]] = {"lmcache": [], "vllm": []}
    names = {"LMCache `fs://`": "lmcache", "vLLM fs tier": "vllm"}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0] in names and cells[1] == "tmpfs" and not cells[6].startswith("failed"):
            tokens = int(cells[2].replace(",", ""))
            rows[names[cells[0]]].append((tokens * MODELS["Qwen/Qwen3-8B"].kv_bytes_per_token, float(cells[6])))
    return rows


@pytest.mark.parametrize("name", ["lmcache", "vllm"])
def test_the_curves_are_the_tmpfs_rows_docs_benchmarks_shows(name: str) -> None:
    """The planner's source is the table: after `make bench-l2` the curves are updated with it (the header bytes of
    LMCache's files aside)."""
    measured = _measured_tmpfs_rows()[name]
    curve = connector_named(name).read_efficiency.points
    assert len(measured) == len(curve) >= 2
    for (size, share), (doc_size, doc_share) in zip(curve, measured, strict=True):
        assert abs(size - doc_size) <= 28 and share == doc_share
