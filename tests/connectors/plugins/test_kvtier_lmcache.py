"""kvtier's LMCache connector module (kvtier/connectors/plugins/kvtier_lmcache.py) and how standalone endpoints ship it:
the tag stripping, kvtier's own request tags (cache_salt, LoRA adapter), and the wiring vLLM needs to import it in the
pod. The real engines run it in tests/engine/test_client_tags.py."""

from __future__ import annotations

import ast
import hmac
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvtier.config.loader import Config
from kvtier.connectors import lmcache
from kvtier.connectors.plugins import (
    LMCACHE_CONNECTOR_CLASS,
    LMCACHE_CONNECTOR_FILE,
    LMCACHE_CONNECTOR_MODULE,
    kvtier_lmcache,
    plugin_text,
)
from kvtier.k8s import standalone
from kvtier.rules import load_checked
from tests.support import lmcache_config_map


@pytest.fixture(scope="module")
def prod() -> Config:
    from tests.support import CONFIG_DIR

    return load_checked(CONFIG_DIR, "prod")


def test_only_cache_tags_are_dropped_from_the_same_dict() -> None:
    params: dict[str, Any] = {
        "lmcache.tag.user": "alice",
        "lmcache.tag.x": "1",
        "lmcache.skip_save": True,  # a client may only save less: kept
        "do_remote_prefill": False,  # other connectors' parameters: kept
    }
    extra_args = {"kv_transfer_params": params, "other": 1}
    assert kvtier_lmcache.strip_client_tags(extra_args) == ["lmcache.tag.user", "lmcache.tag.x"]
    assert extra_args["kv_transfer_params"] is params  # vLLM's Request holds this very dict
    assert params == {"lmcache.skip_save": True, "do_remote_prefill": False}
    assert extra_args["other"] == 1


@pytest.mark.parametrize("extra_args", [None, {}, {"kv_transfer_params": None}, {"kv_transfer_params": "x"}])
def test_requests_without_tags_are_left_alone(extra_args: dict[str, Any] | None) -> None:
    before = json.dumps(extra_args)
    assert kvtier_lmcache.strip_client_tags(extra_args) == []
    assert json.dumps(extra_args) == before


def test_the_module_runs_without_kvtier() -> None:
    """It is imported in the engine image, where kvtier is not installed: standard library only at import time."""
    tree = ast.parse(plugin_text(LMCACHE_CONNECTOR_FILE))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} <= set(sys.stdlib_module_names)


def _import_as_the_pod_does(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(LMCACHE_CONNECTOR_MODULE, folder / LMCACHE_CONNECTOR_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pod_imports_the_connector_vllm_is_told_to_load(prod: Config, tmp_path: Path) -> None:
    endpoint = prod.lob("support").endpoints[0]
    deployment = standalone.engine_deployment(prod.env, "support", endpoint)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == f"{endpoint.name}-lmcache")
    assert mounts[volume["name"]] == env["PYTHONPATH"]  # the folder vLLM imports from holds the ConfigMap
    data = lmcache_config_map("support", endpoint)["data"]
    assert config["kv_connector_module_path"] == LMCACHE_CONNECTOR_MODULE
    assert data[f"{config['kv_connector_module_path']}.py"] == plugin_text(LMCACHE_CONNECTOR_FILE)
    (tmp_path / LMCACHE_CONNECTOR_FILE).write_text(data[LMCACHE_CONNECTOR_FILE], encoding="utf-8")
    module = _import_as_the_pod_does(tmp_path)
    assert module.CLASS_NAME == config["kv_connector"] == LMCACHE_CONNECTOR_CLASS
    # vLLM 0.19 looks the name up in its own registry first: ours must not be the name it registers.
    assert config["kv_connector"] != "LMCacheConnectorV1"
    if "vllm" not in sys.modules and importlib.util.find_spec("vllm") is None:
        with pytest.raises(ModuleNotFoundError, match="vllm"):  # the class is built from vLLM's, on first access
            getattr(module, config["kv_connector"])


def test_a_new_connector_module_rolls_the_pods(prod: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = prod.lob("support").endpoints[0]

    def digest() -> str:
        template = standalone.engine_deployment(prod.env, "support", endpoint)["spec"]["template"]
        value: str = template["metadata"]["annotations"]["kvtier.io/lmcache-config-sha256"]
        return value

    before = digest()
    monkeypatch.setattr(lmcache, "plugin_text", lambda name: plugin_text(name) + "\n# changed\n")
    assert digest() != before


# ---- kvtier's request tags (issue 34) -----------------------------------------------------------------------------

KEY = b"0123456789abcdef"


@dataclass
class FakeSampling:
    extra_args: dict[str, Any] | None = None


@dataclass
class FakeLora:
    """vLLM's `LoRARequest` as the connector sees it (vllm/lora/request.py: lora_name, lora_int_id, lora_path)."""

    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class FakeRequest:
    """What the connector reads of vLLM's `Request` (vllm/v1/request.py, 0.19.0 and 0.32.0)."""

    sampling_params: FakeSampling | None = field(default_factory=FakeSampling)
    cache_salt: str | None = None
    lora_request: FakeLora | None = None
    request_id: str = "r1"


def lmcache_tags(request: FakeRequest) -> list[tuple[str, Any]]:
    """The tags LMCache 0.4.3 keys the request by: `extract_request_configs` (its `lmcache.*` entries of
    `sampling_params.extra_args["kv_transfer_params"]`), then `CacheEngineKey.__post_init__` (the `lmcache.tag.*` ones,
    in order)."""
    assert request.sampling_params is not None
    params = (request.sampling_params.extra_args or {}).get("kv_transfer_params") or {}
    return [(k[len("lmcache.tag.") :], v) for k, v in params.items() if k.startswith("lmcache.tag.")]


def test_a_salted_request_is_keyed_by_an_hmac_of_its_salt() -> None:
    request = FakeRequest(cache_salt="tenant-a")
    tags = kvtier_lmcache.apply_request_tags(request, KEY, env={})
    value = hmac.new(KEY, json.dumps(["cache_salt", "tenant-a"], separators=(",", ":")).encode(), "sha256").hexdigest()
    assert tags == {kvtier_lmcache.SALT_TAG: value[:32]}
    assert lmcache_tags(request) == [("kvtier_salt", value[:32])]
    assert re.fullmatch(r"[0-9a-f]{32}", value[:32])  # no `@`, `%` or `/`: LMCache's file name stays parseable
    assert "tenant" not in json.dumps(request.sampling_params.extra_args if request.sampling_params else None)


def test_salts_and_keys_each_give_their_own_tag() -> None:
    def tag(salt: str, key: bytes = KEY) -> str:
        return kvtier_lmcache.request_tags(key, salt, None, env={})[kvtier_lmcache.SALT_TAG]

    assert tag("x") == tag("x")  # every replica of the endpoint: the same key
    assert len({tag("x"), tag("y"), tag("x", b"other endpoint")}) == 3
    # an unsalted request has no tag (vLLM refuses an empty or non-string salt before the engine sees it)
    for salt in (None, "", 7):
        assert kvtier_lmcache.request_tags(KEY, salt, None, env={}) == {}


def test_client_tags_go_first_and_other_entries_stay() -> None:
    params: dict[str, Any] = {"lmcache.tag.kvtier_salt": "forged", "lmcache.tag.user": "x", "lmcache.skip_save": True}
    request = FakeRequest(FakeSampling({"kv_transfer_params": params}), cache_salt="s")
    kvtier_lmcache.apply_request_tags(request, KEY, env={})
    assert request.sampling_params is not None and request.sampling_params.extra_args is not None
    assert request.sampling_params.extra_args["kv_transfer_params"] is params  # the Request's own dict
    assert params == {"lmcache.skip_save": True, kvtier_lmcache.SALT_TAG: kvtier_lmcache.salt_tag(KEY, "s")}
    # unsalted: the forged tag goes, nothing replaces it
    params = {"lmcache.tag.kvtier_salt": kvtier_lmcache.salt_tag(KEY, "s")}
    request = FakeRequest(FakeSampling({"kv_transfer_params": params}))
    assert kvtier_lmcache.apply_request_tags(request, KEY, env={}) == {}
    assert params == {}


def test_tags_are_set_where_lmcache_reads_them_when_the_request_has_no_params() -> None:
    for sampling in (FakeSampling(None), FakeSampling({}), FakeSampling({"kv_transfer_params": None})):
        request = FakeRequest(sampling, cache_salt="s")
        kvtier_lmcache.apply_request_tags(request, KEY, env={})
        assert lmcache_tags(request) == [("kvtier_salt", kvtier_lmcache.salt_tag(KEY, "s"))]
    pooling = FakeRequest(None, cache_salt="s")
    assert kvtier_lmcache.apply_request_tags(pooling, KEY, env={}) == {}


def test_an_adapter_request_is_keyed_by_adapter_name_and_path() -> None:
    lora = FakeLora("sql", 1, "/mnt/adapters/sql/v3")

    def tags(lora: FakeLora | None, salt: str | None = None) -> list[tuple[str, Any]]:
        request = FakeRequest(cache_salt=salt, lora_request=lora)
        kvtier_lmcache.apply_request_tags(request, KEY, env={})
        return lmcache_tags(request)

    (only,) = tags(lora)
    assert only == ("kvtier_adapter", kvtier_lmcache.adapter_tag(KEY, "sql", "/mnt/adapters/sql/v3"))
    assert re.fullmatch(r"[0-9a-f]{32}", only[1])
    assert tags(FakeLora("sql", 7, "/mnt/adapters/sql/v3")) == [only]  # vLLM numbers adapters per server
    others = [tags(FakeLora("sql", 1, "/mnt/adapters/sql/v4")), tags(FakeLora("sql2", 1, "/mnt/adapters/sql/v3"))]
    assert [only] not in others and others[0] != others[1]
    assert tags(None) == []  # the base model
    # both sources: always the salt first (LMCache compares tags in order)
    assert [name for name, _ in tags(lora, "s")] == ["kvtier_salt", "kvtier_adapter"]
    assert kvtier_lmcache.adapter_tag(KEY, "a", "bc") != kvtier_lmcache.adapter_tag(KEY, "ab", "c")


def test_applying_twice_changes_nothing() -> None:
    """The scheduler asks again for a preempted request: the same tags, in the same order."""
    request = FakeRequest(FakeSampling({"kv_transfer_params": {"lmcache.tag.x": "1"}}), "s", FakeLora("a", 1, "/p"))
    kvtier_lmcache.apply_request_tags(request, KEY, env={})
    first = lmcache_tags(request)
    kvtier_lmcache.apply_request_tags(request, KEY, env={})
    assert lmcache_tags(request) == first and len(first) == 2


@pytest.mark.parametrize(
    ("switch", "left"),
    [(kvtier_lmcache.SALT_BREAK, ["kvtier_adapter"]), (kvtier_lmcache.ADAPTER_BREAK, ["kvtier_salt"])],
)
def test_each_break_switch_removes_its_own_tag(switch: str, left: list[str]) -> None:
    request = FakeRequest(cache_salt="s", lora_request=FakeLora("a", 1, "/p"))
    kvtier_lmcache.apply_request_tags(request, KEY, env={switch: "1"})
    assert [name for name, _ in lmcache_tags(request)] == left


def test_the_engine_refuses_to_start_without_its_key() -> None:
    with pytest.raises(RuntimeError, match=kvtier_lmcache.KEY_VAR):
        kvtier_lmcache.tag_key({})
    assert kvtier_lmcache.tag_key({kvtier_lmcache.KEY_VAR: "k"}) == b"k"


def test_the_connector_tags_a_request_before_lmcache_looks_it_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class the pod builds, over a stand-in for vLLM's `LMCacheConnectorV1` that records the tags LMCache's
    lookup would key the request by."""
    seen: list[list[tuple[str, Any]]] = []

    class StockConnector:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def get_num_new_matched_tokens(self, request: FakeRequest, computed: int) -> tuple[int, bool]:
            seen.append([*lmcache_tags(request), ("computed", computed)])
            return 0, False

    stock = ModuleType(kvtier_lmcache.BASE_MODULE)
    stock.LMCacheConnectorV1 = StockConnector  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, kvtier_lmcache.BASE_MODULE, stock)
    (tmp_path / LMCACHE_CONNECTOR_FILE).write_text(plugin_text(LMCACHE_CONNECTOR_FILE), encoding="utf-8")
    module = _import_as_the_pod_does(tmp_path)
    monkeypatch.delenv(kvtier_lmcache.KEY_VAR, raising=False)
    with pytest.raises(RuntimeError, match=kvtier_lmcache.KEY_VAR):
        getattr(module, LMCACHE_CONNECTOR_CLASS)(None, None, None)
    monkeypatch.setenv(kvtier_lmcache.KEY_VAR, KEY.decode())
    connector = getattr(module, LMCACHE_CONNECTOR_CLASS)(None, None, None)
    request = FakeRequest(FakeSampling({"kv_transfer_params": {"lmcache.tag.user": "x"}}), cache_salt="s")
    assert connector.get_num_new_matched_tokens(request, 0) == (0, False)
    assert seen == [[("kvtier_salt", kvtier_lmcache.salt_tag(KEY, "s")), ("computed", 0)]]


def test_every_replica_of_an_endpoint_gets_the_same_key_and_other_endpoints_another(prod: Config) -> None:
    def key(lob: str, index: int) -> str:
        endpoint = prod.lob(lob).endpoints[index]
        (container,) = standalone.engine_deployment(prod.env, lob, endpoint)["spec"]["template"]["spec"]["containers"]
        (value,) = [e["value"] for e in container["env"] if e["name"] == kvtier_lmcache.KEY_VAR]
        assert re.fullmatch(r"[0-9a-f]{64}", value)
        return str(value)

    assert key("support", 0) == key("support", 0)
    endpoint = prod.lob("support").endpoints[0]
    other = endpoint.model_copy(update={"name": endpoint.name + "-b"})
    assert lmcache.LMCacheConnector().tag_key(other) != lmcache.LMCacheConnector().tag_key(endpoint)
