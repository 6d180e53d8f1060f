"""The L2 identity cannot drift (issue 24): it hashes only facts that are set plus a schema version, names the LMCache
of the image that actually runs (so bumping the standalone pin leaves operator endpoints alone), and covers the
LMCache settings that change the bytes or keys of an L2 file, which both modes pin explicitly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier import serving
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity, l2_identity_facts, l2_subdir, lmcache
from kvtier.connectors.lmcache import DEFAULT_IMAGES, rewire_env
from kvtier.k8s.operator_endpoint import worker_env
from kvtier.k8s.standalone import engine_deployment
from kvtier.rules import load_checked
from kvtier.versions import OPERATOR_LMCACHE_VERSION, STANDALONE_LMCACHE_VERSION, STANDALONE_VLLM_IMAGE
from tests.support import CONFIG_DIR

lmcache_config_module = pytest.importorskip("lmcache.v1.config")
LMCacheEngineConfig = lmcache_config_module.LMCacheEngineConfig
LMCACHE_SOURCE = Path(lmcache_config_module.__file__).resolve().parents[1]
NEXT_STANDALONE_IMAGE = "lmcache/vllm-openai:v0.5.6"  # a standalone pin bump, as a future kvtier would make it


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _endpoints(config: Config) -> dict[str, Endpoint]:
    return {f"{lob.name}/{e.name}": e for lob in config.lobs for e in lob.endpoints if e.cache.l2 == "curvine"}


def _bump_standalone_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """What moving kvtier's standalone image and LMCache pin does to the module constants the identity reads."""
    monkeypatch.setitem(DEFAULT_IMAGES, "standalone", NEXT_STANDALONE_IMAGE)
    monkeypatch.setattr(lmcache, "STANDALONE_LMCACHE_VERSION", "0.5.6", raising=False)
    versions = {k: v for k, v in getattr(lmcache, "IMAGE_LMCACHE_VERSIONS", {}).items() if k != STANDALONE_VLLM_IMAGE}
    monkeypatch.setattr(lmcache, "IMAGE_LMCACHE_VERSIONS", {**versions, NEXT_STANDALONE_IMAGE: "0.5.6"}, raising=False)


def test_bumping_the_standalone_lmcache_pin_leaves_operator_identities_unchanged(
    prod: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints = _endpoints(prod)
    modes = {name: e.mode for name, e in endpoints.items()}
    assert set(modes.values()) == {"operator", "standalone"}  # the shipped prod config has both
    before = {name: l2_identity(e) for name, e in endpoints.items()}
    _bump_standalone_pin(monkeypatch)
    after = {name: l2_identity(e) for name, e in endpoints.items()}
    for name, mode in modes.items():
        if mode == "operator":
            assert after[name] == before[name], f"{name}: an operator endpoint moved with the standalone pin"
        else:
            assert after[name] != before[name], f"{name}: a standalone endpoint kept its identity on a new image"


def test_the_identity_names_the_lmcache_of_the_image_that_runs(prod: Config) -> None:
    endpoints = _endpoints(prod)
    operator = next(e for e in endpoints.values() if e.mode == "operator")
    standalone = next(e for e in endpoints.values() if e.mode == "standalone")
    assert l2_identity_facts(operator)["lmcache"] == OPERATOR_LMCACHE_VERSION
    assert l2_identity_facts(standalone)["lmcache"] == STANDALONE_LMCACHE_VERSION
    custom = operator.model_copy(update={"image": "registry.example/vllm@sha256:" + "a" * 64})
    assert "lmcache" not in l2_identity_facts(custom)  # unknown: the image fact alone names it


def test_only_set_facts_are_hashed_with_a_schema_version(prod: Config) -> None:
    """No null placeholders: an optional fact that is unset is absent, so adding one later changes no identity."""
    for name, endpoint in _endpoints(prod).items():
        facts = l2_identity_facts(endpoint)
        assert None not in facts.values(), name
        assert facts["schema"] == serving.L2_IDENTITY_SCHEMA, name
    retail = _endpoints(prod)["retail/qwen3-8b"]
    facts = l2_identity_facts(retail)
    assert "weights_version" not in facts and facts["weights"] == retail.model.revision  # type: ignore[union-attr]
    versioned = retail.model_copy(update={"model": retail.model.model_copy(update={"weights_version": "v2"})})
    assert set(l2_identity_facts(versioned)) - set(facts) == {"weights_version"}
    assert l2_identity(versioned) != l2_identity(retail)


def test_file_format_settings_are_in_the_identity(prod: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = _endpoints(prod)["support/llama31-8b"]
    facts = l2_identity_facts(endpoint)
    assert (facts["save_chunk_meta"], facts["use_layerwise"]) == (True, False)
    before = l2_identity(endpoint)
    monkeypatch.setattr(lmcache, "SAVE_CHUNK_META", False)
    assert l2_identity(endpoint) != before  # a different header format is a different directory


def test_lmcache_reads_the_pinned_keys_where_kvtier_puts_them() -> None:
    """LMCache 0.4.3: `use_layerwise` and `extra_config` are defined keys, and the fs connector's header flag is
    `extra_config["save_chunk_meta"]` (default True), forced on by `use_layerwise` (base_connector.py)."""
    defined = lmcache_config_module._CONFIG_DEFINITIONS
    assert defined["use_layerwise"]["default"] is False and "extra_config" in defined
    base = (LMCACHE_SOURCE / "v1" / "storage_backend" / "connector" / "base_connector.py").read_text(encoding="utf-8")
    assert 'config.extra_config.get("save_chunk_meta", True)' in base and "or config.use_layerwise" in base


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("LMCACHE_")]:
        monkeypatch.delenv(name)


def test_both_modes_pin_the_file_format_over_any_other_config_file(
    prod: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that says otherwise (the operator's own `lmcache-config`, contents UNVERIFIED) loses to kvtier's env in
    operator mode; the standalone ConfigMap states both. Parsed by LMCache's own loader."""
    other = tmp_path / "operator-lmcache.yaml"
    other.write_text(
        yaml.safe_dump({"chunk_size": 256, "extra_config": {"save_chunk_meta": False}, "use_layerwise": True})
    )
    endpoints = _endpoints(prod)
    operator = next(e for e in endpoints.values() if e.mode == "operator")
    _clean_env(monkeypatch)
    for var in worker_env("retail", operator):
        monkeypatch.setenv(var["name"], str(var["value"]))
    config: Any = LMCacheEngineConfig.from_file(str(other))
    config.update_config_from_env()
    assert (config.extra_config, config.use_layerwise) == ({"save_chunk_meta": True}, False)
    # The Kyverno rewiring sets them too, so a pod whose worker env lost them is still pinned.
    _clean_env(monkeypatch)
    for var in rewire_env(l2_subdir(operator)):
        monkeypatch.setenv(var["name"], var["value"])
    config = LMCacheEngineConfig.from_file(str(other))
    config.update_config_from_env()
    assert (config.extra_config, config.use_layerwise) == ({"save_chunk_meta": True}, False)
    # The standalone engine's variables (its pod template) say both too, over any file.
    standalone = next(e for e in endpoints.values() if e.mode == "standalone")
    _clean_env(monkeypatch)
    container = engine_deployment(prod.env, "support", standalone)["spec"]["template"]["spec"]["containers"][0]
    for var in container["env"]:
        if var["name"].startswith("LMCACHE_"):
            monkeypatch.setenv(var["name"], str(var["value"]))
    config = LMCacheEngineConfig.from_file(str(other))
    config.update_config_from_env()
    assert (config.extra_config, config.use_layerwise) == ({"save_chunk_meta": True}, False)
