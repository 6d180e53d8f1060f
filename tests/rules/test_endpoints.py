"""Endpoint fields of the LOB file: the examples load with the reference defaults; bad values name their field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.connectors import engine_image
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from kvtier.versions import OPERATOR_VLLM_IMAGE, STANDALONE_VLLM_IMAGE
from tests.support import CONFIG_DIR

Edit = Callable[[dict[str, Any]], None]
AMP = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567"
PROMETHEUS = {"type": "prometheus", "server_address": AMP, "query": "sum(vllm:num_requests_waiting)", "target_value": 5}


def test_examples_load_with_reference_defaults() -> None:
    config = load_checked(CONFIG_DIR, "prod")
    retail = config.lob("retail").endpoints[0]
    support = config.lob("support").endpoints[0]
    assert (retail.mode, retail.routing, retail.cache.l2) == ("operator", "prefixaware", "curvine")
    assert engine_image(retail) == OPERATOR_VLLM_IMAGE
    assert (support.mode, support.routing) == ("standalone", "session")
    assert engine_image(support) == STANDALONE_VLLM_IMAGE


def _edit(config_dir: Path, lob: str, edit: Edit) -> None:
    path = config_dir / "lobs" / f"{lob}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    edit(data["endpoints"][0])
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


BAD: list[tuple[str, str, Edit, str, str]] = [
    ("image without tag", "retail", lambda e: e.update(image="lmcache/vllm-openai"), "image", "tag"),
    ("image latest", "retail", lambda e: e.update(image="lmcache/vllm-openai:latest"), "image", "latest"),
    ("tp above GPUs", "retail", lambda e: e.update(tensor_parallel=2), "tensor_parallel", "divide"),
    ("tiered L2 standalone", "support", lambda e: e["cache"].update(l2="tieredstorage"), "cache.l2", "operator"),
    ("autoscaling without trigger", "retail", lambda e: e.update(autoscaling={"max_replicas": 3}), "trigger", ""),
    (
        "replicas outside autoscaling",
        "retail",
        lambda e: e.update(replicas=5, autoscaling={"min_replicas": 1, "max_replicas": 3, "trigger": PROMETHEUS}),
        "replicas",
        "1..3",
    ),
    (
        "prometheus outside AMP",
        "retail",
        lambda e: e.update(autoscaling={"trigger": {**PROMETHEUS, "server_address": "http://prometheus:9090"}}),
        "server_address",
        "",
    ),
    (
        "vllm connector in operator mode",
        "retail",
        lambda e: e["cache"].update(connector="vllm"),
        "cache.connector",
        "operator image",
    ),
    (
        "vllm connector without L1",
        "support",
        lambda e: e["cache"].update(connector="vllm", l1_gb=0),
        "cache.l1_gb",
        "CPU tier",
    ),
    ("unknown connector", "support", lambda e: e["cache"].update(connector="nixl"), "cache.connector", "lmcache"),
    ("unknown routing", "retail", lambda e: e.update(routing="leastload"), "routing", "prefixaware"),
    ("unknown api", "retail", lambda e: e.update(api="responses"), "api", "completions"),
    ("unknown dtype", "retail", lambda e: e.update(dtype="fp8"), "dtype", "bfloat16"),
    (
        "weights version with a slash",
        "retail",
        lambda e: e["model"].update(weights_version="v2/final"),
        "model.weights_version",
        "like 2026-12-01",
    ),
    (
        "weights version of an S3 model not a string",
        "search",
        lambda e: e["model"].update(weights_version=3),
        "model.weights_version",
        "quote it",
    ),
]


@pytest.mark.parametrize(("case", "lob", "edit", "field", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_endpoint_values_name_their_field(
    config_copy: Path, case: str, lob: str, edit: Edit, field: str, words: str
) -> None:
    _edit(config_copy, lob, edit)
    with pytest.raises(ConfigError) as caught:
        load_checked(config_copy, "prod")
    problems = [p for p in caught.value.problems if p.file.endswith(f"{lob}.yaml")]
    assert problems, f"{case}: no problem in {lob}.yaml: {caught.value}"
    assert any(p.field.startswith("endpoints[0].") and field in p.field for p in problems), problems
    assert any(words in f"{p.problem}; {p.allowed}" for p in problems), problems


def test_new_endpoint_fields_load(config_copy: Path) -> None:
    """`api`, `dtype` and `model.weights_version` (the L2 identity's inputs) load; defaults keep today's behaviour."""
    default = load_checked(CONFIG_DIR, "prod").lob("retail").endpoints[0]
    assert (default.api, default.dtype, default.model.weights_version) == ("chat", "auto", None)

    def change(endpoint: dict[str, Any]) -> None:
        endpoint.update(api="completions", dtype="float16")
        endpoint["model"].update(weights_version="2026-12-01")

    _edit(config_copy, "retail", change)
    endpoint = load_checked(config_copy, "prod").lob("retail").endpoints[0]
    assert (endpoint.api, endpoint.dtype, endpoint.model.weights_version) == ("completions", "float16", "2026-12-01")


def test_valid_autoscaling_loads(config_copy: Path) -> None:
    _edit(
        config_copy,
        "retail",
        lambda e: e.update(autoscaling={"min_replicas": 1, "max_replicas": 2, "trigger": PROMETHEUS}),
    )
    endpoint = load_checked(config_copy, "prod").lob("retail").endpoints[0]
    assert endpoint.autoscaling is not None and endpoint.max_replicas == 2


def test_chunk_alignment_is_lmcaches_alone(config_copy: Path) -> None:
    """A chunk size that does not line up with vLLM's blocks is refused for LMCache and ignored on vLLM's own
    connector, which stores whole blocks (issue 24)."""
    _edit(config_copy, "support", lambda e: e["cache"].update(chunk_size=100))
    with pytest.raises(ConfigError) as caught:
        load_checked(config_copy, "prod")
    assert any(p.field.endswith("cache.chunk_size") for p in caught.value.problems), caught.value
    _edit(config_copy, "support", lambda e: e["cache"].update(connector="vllm"))
    assert load_checked(config_copy, "prod").lob("support").endpoints[0].cache.connector == "vllm"
