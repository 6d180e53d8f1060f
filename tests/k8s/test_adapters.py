"""LoRA adapters in standalone mode (issue 35): vLLM's LoRA flags, one fetch init container per adapter writing to a
path that is the same on every replica and carries the pinned version, the model-reader service account and IAM for
S3 adapters, on both connectors; the path break switch makes the path per replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvtier.config.adapters import ADAPTER_ROOT, Adapter
from kvtier.config.loader import Config
from kvtier.constructs.model_access import s3_models
from kvtier.k8s.adapters import CHECK_CONTAINER, PATH_BREAK, lora_args
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.standalone import add_standalone_engine, engine_deployment
from kvtier.naming import MODEL_READER_SA
from kvtier.rules import load_checked
from tests.config.test_adapters import COMMIT, with_adapters
from tests.validation import validate_k8s


@pytest.fixture
def config(config_copy: Path) -> Config:
    with_adapters(config_copy)
    return load_checked(config_copy, "prod")


def _endpoint(config: Config, connector: str = "lmcache") -> Any:
    endpoint = config.lob("support").endpoints[0]
    return endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update={"connector": connector})})


@pytest.mark.parametrize("connector", ["lmcache", "vllm"])
def test_adapters_render_flags_fetchers_and_one_path_per_version(config: Config, connector: str) -> None:
    endpoint = _endpoint(config, connector)
    deployment = engine_deployment(config.env, "support", endpoint)
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    faq, billing = f"{ADAPTER_ROOT}/faq/{COMMIT}", f"{ADAPTER_ROOT}/billing/v3"
    assert args[args.index("--enable-lora") :] == [
        "--enable-lora",
        "--max-loras",
        "2",
        "--max-lora-rank",
        "16",
        "--max-cpu-loras",
        "2",
        "--lora-modules",
        f"faq={faq}",
        f"billing={billing}",
    ]
    init = {c["name"]: c for c in pod["initContainers"]}
    assert list(init) == ["adapter-faq", "adapter-billing", CHECK_CONTAINER]  # the check runs after every fetch
    assert all(c["terminationMessagePolicy"] == "FallbackToLogsOnError" for c in init.values())
    assert COMMIT in init["adapter-faq"]["command"][-1] and "acme/faq-lora" in init["adapter-faq"]["command"][-1]
    assert init["adapter-billing"]["command"][:3] == ["aws", "s3", "sync"]
    assert "s3://acme-adapters/billing/" in init["adapter-billing"]["command"]
    assert {e["value"] for c in init.values() for e in c["env"] if e["name"] == "ADAPTER_PATH"} == {faq, billing}
    engine_mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert engine_mounts[ADAPTER_ROOT]["readOnly"] is True
    assert pod["serviceAccountName"] == MODEL_READER_SA  # the S3 adapter is read with the LOB's Pod Identity role
    chart = KvtierChart(chart_app(), "endpoint-adapters", namespace="kvtier-support")
    add_standalone_engine(chart, config.env, "support", endpoint)
    for manifest in chart.manifests():
        validate_k8s(manifest)


def test_an_endpoint_without_adapters_renders_no_lora_flag(config: Config) -> None:
    endpoint = _endpoint(config).model_copy(update={"adapters": ()})
    pod = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["spec"]
    assert "--enable-lora" not in pod["containers"][0]["args"]
    assert "initContainers" not in pod


def test_adapter_buckets_get_the_model_readers_access(config: Config) -> None:
    sources = s3_models(config.lob("support"))
    assert [(s.bucket, s.prefix) for s in sources] == [("acme-adapters", "billing/")]
    assert "acme-adapters" in config.model_buckets()


def test_the_path_break_switch_makes_the_path_per_replica(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = _endpoint(config, "vllm")
    monkeypatch.setenv(PATH_BREAK, "1")
    modules = lora_args(endpoint)[lora_args(endpoint).index("--lora-modules") + 1 :]
    assert modules[0] == f"faq={ADAPTER_ROOT}/$(KVTIER_POD_NAME)/faq/{COMMIT}"
    adapter: Adapter = endpoint.adapters[0]
    assert adapter.path == f"{ADAPTER_ROOT}/faq/{COMMIT}"
