"""The L2 connector seam (issue 41): one module per connector behind `Connector`, found by `connector_for`; what each
refuses reaches `kvtier validate` through the rules; the janitor script treats each connector's temporary files as
temporary; every connector answers the whole interface."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import (
    CONNECTORS,
    DEFAULT_CONNECTOR,
    Connector,
    connector_for,
    connector_named,
    identity_connector,
    l2_identity_facts,
)
from kvtier.connectors.base import L2Layout
from kvtier.connectors.lmcache import LMCACHE
from kvtier.connectors.vllm import VLLM
from kvtier.k8s.curvine import janitor
from kvtier.k8s.curvine.scripts import JANITOR
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

SCRIPT = Path(janitor.__file__).parent / "scripts" / JANITOR


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _with(endpoint: Endpoint, **cache: object) -> Endpoint:
    return endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update=cache)})


def _script() -> ModuleType:
    """The janitor script as the pod runs it (the shipped file, not a kvtier import)."""
    spec = importlib.util.spec_from_file_location("l2_janitor_as_shipped", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_every_connector_value_has_its_module() -> None:
    names = set(Endpoint.model_fields["cache"].annotation.model_fields["connector"].annotation.__args__)  # type: ignore[union-attr]
    assert {c.name for c in CONNECTORS} == names
    assert DEFAULT_CONNECTOR is connector_for(CacheConfig()) is LMCACHE
    assert [connector_named(c.name) for c in CONNECTORS] == list(CONNECTORS)


def test_an_unknown_connector_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^no L2 connector 'nixl'; kvtier knows lmcache, vllm$"):
        connector_named("nixl")


def test_each_connector_answers_the_whole_interface() -> None:
    """Nothing abstract is left, and the class-level facts are set (a new connector that forgets one fails here)."""
    for connector in CONNECTORS:
        assert not inspect.isabstract(type(connector)), connector
        for attribute in ("name", "title", "layout", "hits", "series_prefix"):
            assert getattr(connector, attribute), (connector, attribute)
        assert isinstance(connector.layout, L2Layout)


def test_connector_for_follows_the_endpoint(prod: Config) -> None:
    endpoint = prod.lob("support").endpoints[0]
    assert connector_for(endpoint) is LMCACHE
    assert connector_for(_with(endpoint, connector="vllm")) is VLLM
    assert connector_for(_with(endpoint, connector="vllm").cache) is VLLM


def test_the_identity_names_its_connector(prod: Config) -> None:
    """`validate --previous` reads the connector of a stored identity: LMCache's carry no fact (they predate the
    second connector), the others name themselves."""
    endpoint = prod.lob("support").endpoints[0]
    for connector, configured in ((LMCACHE, endpoint), (VLLM, _with(endpoint, connector="vllm"))):
        assert identity_connector(l2_identity_facts(configured)) == connector.name


def test_refusals_are_the_connectors_and_reach_validate(prod: Config) -> None:
    retail, support = prod.lob("retail").endpoints[0], prod.lob("support").endpoints[0]
    assert all(c.supports(e) for c, e in ((LMCACHE, retail), (LMCACHE, support), (VLLM, support)))
    (operator,) = VLLM.refusals(_with(retail, connector="vllm"))
    assert (operator.field, "operator mode" in operator.problem) == ("cache.connector", True)
    (no_l1,) = VLLM.refusals(_with(support, connector="vllm", l1_gb=0))
    assert no_l1.field == "cache.l1_gb"
    (misaligned,) = LMCACHE.refusals(_with(support, chunk_size=200))
    assert misaligned.field == "cache.chunk_size" and "multiple of the vLLM block size 16" in misaligned.problem
    assert VLLM.refusals(_with(support, connector="vllm", chunk_size=200)) == []  # its unit is the vLLM block


@pytest.mark.parametrize("connector", CONNECTORS, ids=lambda c: c.name)
def test_the_janitor_script_treats_each_connectors_temporary_files_as_temporary(connector: Connector) -> None:
    """The script ships alone into the janitor pod (its rules arrive as arguments): its own `Entry.is_tmp` must say
    a connector's in-progress write is temporary and its data file is not."""
    script = _script()
    layout = connector.layout
    assert layout.temp_example.endswith(layout.temp_suffix)
    assert script.Entry(f"/l2/ep/id/{layout.temp_example}", 1, 0.0).is_tmp
    assert not script.Entry(f"/l2/ep/id/{layout.data_example}", 1, 0.0).is_tmp


def test_the_janitor_allows_the_longest_write_of_any_connector_and_refuses_a_suffix_it_cannot_see(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert janitor.temp_max_age_minutes() == max(c.layout.temp_max_age_minutes for c in CONNECTORS) == 60

    class Partial(type(VLLM)):  # type: ignore[misc]
        layout = L2Layout("a.bin", "a.bin.part", ".part", 90, "a connector that writes `.part` files")

    monkeypatch.setattr(janitor, "CONNECTORS", (*CONNECTORS, Partial()))
    with pytest.raises(ValueError, match=r"writes temporary files ending in '\.part'; the janitor script knows only"):
        janitor.temp_max_age_minutes()


def test_the_connectors_bytes_per_token_size_the_plans_l2(prod: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """The L2 file's bytes and the tokens the L2 holds follow the connector's bytes per token (the seam the KV dtype
    work changes per connector), not the model's alone: doubling it doubles a chunk and halves the L2's tokens."""
    from kvtier.planner.report import build_plan
    from kvtier.planner.tiers import endpoint_tiers

    support = prod.lob("support").endpoints[0]
    model = next(e for e in build_plan(prod)["endpoints"] if e["endpoint"] == support.name)
    assert model["chunk"] == {
        "tokens": support.cache.chunk_size,
        "bytes": support.cache.chunk_size * model["kv_bytes_per_token"] + 28,  # LMCache's chunk header (issue 36)
        "unit": "LMCache chunk",
    }
    from kvtier.planner.shapes import endpoint_model

    catalog_model = endpoint_model(prod.lob("support"), support, "support.yaml")
    before = endpoint_tiers(prod.env, prod.lobs, prod.lob("support"), support, catalog_model).l2_tokens
    doubled = LMCACHE.l2_bytes_per_token(support, catalog_model) * 2
    monkeypatch.setattr(type(LMCACHE), "l2_bytes_per_token", lambda self, endpoint, model: doubled)
    after = next(e for e in build_plan(prod)["endpoints"] if e["endpoint"] == support.name)
    assert after["chunk"]["bytes"] - 28 == 2 * (model["chunk"]["bytes"] - 28)
    tiers = endpoint_tiers(prod.env, prod.lobs, prod.lob("support"), support, catalog_model)
    assert tiers.l2_tokens == pytest.approx(before / 2, abs=1)
