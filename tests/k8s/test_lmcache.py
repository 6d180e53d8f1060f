"""LMCache settings: accepted by LMCache's own parser (the version the standalone image runs), and every LMCACHE_*
variable kvtier emits is one LMCache reads (its env loader silently drops unknown names)."""

from __future__ import annotations

import ast
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.config.endpoint import CacheConfig, L2Backend
from kvtier.config.loader import Config
from kvtier.connectors.lmcache import LMCACHE, env_name, lmcache_config, lmcache_env, rewire_env
from kvtier.k8s.kyverno_policy import l2_policy
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.k8s.router import router_objects
from kvtier.k8s.standalone import engine_deployment
from kvtier.rules import load_checked
from kvtier.serving import L2_STAGING_GB, l1_pinned_gib
from kvtier.versions import STANDALONE_LMCACHE_VERSION
from tests.support import CONFIG_DIR, ROOT

lmcache_config_module = pytest.importorskip("lmcache.v1.config")
LMCacheEngineConfig = lmcache_config_module.LMCacheEngineConfig
DEFINED: dict[str, Any] = lmcache_config_module._CONFIG_DEFINITIONS
LMCACHE_SOURCE = Path(lmcache_config_module.__file__).resolve().parents[1]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@pytest.fixture()
def lmcache_log() -> Iterator[Records]:
    """LMCache's loggers do not propagate: listen on the config loader's own logger."""
    handler = Records()
    logger = logging.getLogger("lmcache.v1.config_base")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _parse_file(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = tmp_path / "lmcache.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return LMCacheEngineConfig.from_file(str(path))


def _parse_env(monkeypatch: pytest.MonkeyPatch, variables: list[dict[str, str]]) -> Any:
    for name in [n for n in os.environ if n.startswith("LMCACHE_")]:
        monkeypatch.delenv(name)
    for var in variables:
        monkeypatch.setenv(var["name"], var["value"])
    return LMCacheEngineConfig.from_env()


def test_parser_is_the_image_version() -> None:
    """The parser under test is the LMCache the standalone image runs, and `make setup` installs that one."""
    assert metadata.version("lmcache") == STANDALONE_LMCACHE_VERSION
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(rf"^LMCACHE_VERSION := {re.escape(STANDALONE_LMCACHE_VERSION)}$", makefile, re.MULTILINE)


def test_unknown_keys_are_detected(tmp_path: Path, lmcache_log: Records) -> None:
    """The check below can fail: a misspelled key (and the alias that does not work) is reported."""
    _parse_file(tmp_path, {"chunk_size": 256, "max_local_cpu_sise": 4, "controller_url": "x:9000"})
    warnings = " ".join(lmcache_log.warnings())
    assert "Unknown configuration key: max_local_cpu_sise" in warnings
    assert "Unknown configuration key: controller_url" in warnings


CACHES = st.builds(
    CacheConfig,
    l1_gb=st.sampled_from([0.0, 4.0, 20.0, 37.5]),
    l2=st.sampled_from(["curvine", "tieredstorage", "none"]),
    chunk_size=st.sampled_from([16, 128, 256, 4096]),
)


@settings(deadline=None, max_examples=25)
@given(cache=CACHES, tp=st.sampled_from([1, 2, 4]))
def test_every_setting_parses_the_same_from_file_and_env(
    cache: CacheConfig, tp: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = lmcache_config(cache, "qwen3-8b", tensor_parallel=tp)
    if not config:
        assert cache.l1_gb == 0 and cache.l2 == "none"
        return
    handler = Records()
    logger = logging.getLogger("lmcache.v1.config_base")
    logger.addHandler(handler)
    try:
        from_file = _parse_file(tmp_path_factory.mktemp("lm"), config)
        with pytest.MonkeyPatch.context() as monkeypatch:
            from_env = _parse_env(monkeypatch, lmcache_env(config))
    finally:
        logger.removeHandler(handler)
    assert handler.warnings() == []
    for key, value in config.items():
        assert key in DEFINED
        assert getattr(from_file, key) == value, key
        assert getattr(from_env, key) == value, key
    assert from_file.remote_serde == "naive"
    assert from_file.local_cpu is (cache.l1_gb > 0)
    if cache.l2 == "curvine":
        assert from_file.remote_url == "fs://localhost:0/mnt/kvtier/l2/qwen3-8b/"


def _lmcache_url_parser() -> Any:
    """LMCache's own `parse_remote_url`, compiled from the installed package: its module imports torch, the two
    definitions it needs do not."""
    source = (LMCACHE_SOURCE / "v1" / "storage_backend" / "connector" / "__init__.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    wanted = [n for n in tree.body if getattr(n, "name", None) in ("ParsedRemoteURL", "parse_remote_url")]
    assert len(wanted) == 2, "LMCache moved parse_remote_url: update this test"
    namespace: dict[str, Any] = {
        "dataclass": dataclass,
        "field": field,
        "Optional": Optional,
        "Dict": dict,
        "List": list,
        "urlparse": urlparse,
        "parse_qs": parse_qs,
        "logger": logging.getLogger("lmcache-url-test"),
    }
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "lmcache-connector", "exec"), namespace)
    return namespace["parse_remote_url"]


def test_fs_url_passes_lmcache_url_parser() -> None:
    """LMCache asserts a host and a port in remote URLs; `fs://localhost:0/...` has both, only the path is used."""
    parse = _lmcache_url_parser()
    parsed = parse(lmcache_config(CacheConfig(), "qwen3-8b")["remote_url"])
    assert (parsed.host, parsed.port, parsed.path) == ("localhost", 0, "/mnt/kvtier/l2/qwen3-8b/")
    with pytest.raises(AssertionError, match="missing host"):
        parse("fs:///mnt/kvtier/l2/qwen3-8b/")  # the documented short form fails (notes vllm-lmcache-router 2.4)


VARIANTS: list[tuple[str, L2Backend]] = [
    ("operator", "tieredstorage"),
    ("operator", "curvine"),
    ("standalone", "curvine"),
]


def _emitted_env(prod: Config) -> list[dict[str, Any]]:
    variables: list[dict[str, Any]] = []
    for lob in prod.lobs:
        variables += rewire_env("{{ request.object.metadata.labels.app }}")
        policy = l2_policy(lob.name)
        for foreach in policy["spec"]["rules"][0]["mutate"]["foreach"]:
            for container in foreach["patchStrategicMerge"]["spec"]["containers"]:
                variables += container["env"]
        for endpoint in lob.endpoints:
            for mode, l2 in VARIANTS:
                # kvaware has no standalone router (rules/routing.py): standalone renders the other strategies.
                for routing in ("prefixaware", "kvaware") if mode == "operator" else ("prefixaware", "session"):
                    ep = endpoint.model_copy(
                        update={"mode": mode, "routing": routing, "cache": CacheConfig(l2=l2), "autoscaling": None}
                    )
                    if mode == "operator":
                        variables += inference_endpoint_config(prod.env, lob.name, ep)["spec"]["worker"][
                            "environmentVariables"
                        ]
                    else:
                        pod = engine_deployment(prod.env, lob.name, ep)["spec"]["template"]["spec"]
                        variables += pod["containers"][0]["env"]
                        for obj in router_objects(prod.env, lob.name, ep):
                            if obj["kind"] == "Deployment":
                                variables += obj["spec"]["template"]["spec"]["containers"][0].get("env", [])
    return variables


def test_every_emitted_lmcache_variable_is_read_by_lmcache(prod: Config) -> None:
    names = {v["name"] for v in _emitted_env(prod) if v["name"].startswith("LMCACHE_")}
    assert env_name("remote_url") in names  # the sweep saw the L2 settings (no kvaware instance id: no controller)
    defined = {env_name(key) for key in DEFINED}
    others = names - defined
    # Names outside the config table must be read literally by LMCache itself (config file path, usage telemetry).
    sources = "".join(p.read_text(encoding="utf-8") for p in LMCACHE_SOURCE.rglob("*.py"))
    for name in sorted(others):
        assert re.search(rf"""["']{name}["']""", sources), f"{name} is neither a config key nor read by LMCache"
    assert others == {"LMCACHE_TRACK_USAGE"}  # no LMCACHE_CONFIG_FILE: every setting is a variable (issue 34)


def test_the_standalone_engine_env_is_what_lmcache_reads(
    prod: Config, monkeypatch: pytest.MonkeyPatch, lmcache_log: Records
) -> None:
    """The engine container's `LMCACHE_*` variables (its pod template: issue 34), through LMCache's own env loader,
    are the endpoint's settings, its L2 directory included."""
    for lob in prod.lobs:
        for endpoint in lob.endpoints:
            config = LMCACHE.settings(endpoint.model_copy(update={"mode": "standalone"}))
            if not config:
                continue
            standalone = endpoint.model_copy(update={"mode": "standalone", "routing": "prefixaware"})
            container = engine_deployment(prod.env, lob.name, standalone)["spec"]["template"]["spec"]["containers"][0]
            parsed = _parse_env(monkeypatch, [v for v in container["env"] if v["name"].startswith("LMCACHE_")])
            assert endpoint.cache.l1_gb in (parsed.max_local_cpu_size * endpoint.tensor_parallel, 0)
            assert parsed.chunk_size == endpoint.cache.chunk_size
            assert (parsed.remote_url, parsed.remote_serde) == (config.get("remote_url"), config["remote_serde"])
            assert parsed.extra_config == config.get("extra_config")
    assert lmcache_log.warnings() == []


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize(
    "cache",
    [CacheConfig(l1_gb=20), CacheConfig(l1_gb=37.5, l2="none"), CacheConfig(l1_gb=0), CacheConfig(l1_gb=0, l2="none")],
)
def test_each_rank_pins_its_share_of_the_replicas_l1(
    cache: CacheConfig, tp: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`l1_gb` (and the staging buffer) is per replica; LMCache 0.4.3 runs one engine per TP rank, each allocating
    int(max_local_cpu_size * 1024**3) bytes (v1/cache_engine.py), so the ranks together pin what the replica has."""
    pinned = l1_pinned_gib(cache)
    assert pinned == (cache.l1_gb if cache.l1_gb else L2_STAGING_GB if cache.l2 != "none" else 0.0)
    config = lmcache_config(cache, "qwen3-8b", tensor_parallel=tp)
    if not pinned:
        assert config == {}
        return
    for engine in (_parse_file(tmp_path, config), _parse_env(monkeypatch, lmcache_env(config))):
        assert abs(tp * int(engine.max_local_cpu_size * 1024**3) - pinned * 1024**3) < tp


def test_environment_wins_over_a_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the operator may mount its own LMCache file and still use our URL and L1 size: LMCache's vLLM integration
    loads LMCACHE_CONFIG_FILE first, then lets LMCACHE_* variables override it (checked in its source and run)."""
    source = (LMCACHE_SOURCE / "integration" / "vllm" / "utils.py").read_text(encoding="utf-8")
    function = next(
        n for n in ast.walk(ast.parse(source)) if getattr(n, "name", None) == "lmcache_get_or_create_config"
    )
    calls = {
        node.func.attr: node.lineno
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert calls["from_file"] < calls["update_config_from_env"]
    operator_file = {"remote_url": "sagemaker-hyperpod://10.0.0.1:9200", "max_local_cpu_size": 5, "chunk_size": 256}
    config = _parse_file(tmp_path, operator_file)
    for var in rewire_env("qwen3-8b") + lmcache_env({"max_local_cpu_size": 20.0}):
        monkeypatch.setenv(var["name"], var["value"])
    config.update_config_from_env()
    assert config.remote_url == "fs://localhost:0/mnt/kvtier/l2/qwen3-8b/"
    assert config.max_local_cpu_size == 20.0
