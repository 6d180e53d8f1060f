"""Cross-checks (kvtier/rules/): each one rejects (or warns about) a bad config and accepts a near miss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import GB, GIB, MODELS, SYSTEM_RESERVE_GIB, VLLM_HOST_BASE_GIB, VLLM_HOST_PER_RANK_GIB
from kvtier.config.curvine import CurvineConfig, memory_bytes
from kvtier.config.loader import Config
from kvtier.errors import ConfigError, Problem
from kvtier.rules import load_checked

Doc = dict[str, Any]
Edit = Callable[[Path], object]  # lambdas may return what their last call returns
TRIGGER = {"type": "cloudwatch", "namespace": "kvtier", "metric_name": "waiting", "target_value": 5.0}


def edit(config_dir: Path, relative: str, change: Callable[[Doc], object]) -> None:
    path = config_dir / relative
    doc: Doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def endpoint(doc: Doc, index: int = 0) -> Doc:
    found: Doc = doc["endpoints"][index]
    return found


def gpu_group(doc: Doc) -> Doc:
    found: Doc = next(g for g in doc["hyperpod"]["instance_groups"] if g["role"] == "gpu")
    return found


def retail(change: Callable[[Doc], object]) -> Edit:
    return lambda d: edit(d, "lobs/retail.yaml", change)


def support(change: Callable[[Doc], object]) -> Edit:
    return lambda d: edit(d, "lobs/support.yaml", change)


def dev_env(change: Callable[[Doc], object]) -> Edit:
    return lambda d: edit(d, "environments/dev.yaml", change)


def prod_env(change: Callable[[Doc], object]) -> Edit:
    return lambda d: edit(d, "environments/prod.yaml", change)


def unchanged(_config_dir: Path) -> None:
    """The example as it is."""


def both(*edits: Edit) -> Edit:
    def run(config_dir: Path) -> None:
        for one in edits:
            one(config_dir)

    return run


R1_14B = {"id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "source": "huggingface", "weights_version": "t1"}


def l0_tokens(model_id: str, utilization: float = 0.9, tp: int = 1, block: int = 16) -> int:
    """Hand calculation: 44.4 GiB visible L40S x utilization - weights / TP - 2.5 GiB reserve, in whole blocks."""
    model = MODELS[model_id]
    kv_gib = 44.4 * utilization - model.params_billion * 1e9 * 2 / tp / GIB - 2.5
    per_token = 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * 2
    return int(kv_gib * GIB // (block * per_token)) * block


def curvine_gib() -> float:
    resources = CurvineConfig().resources
    return (memory_bytes(resources.worker.memory_limit) + memory_bytes(resources.fuse.memory_limit)) / GIB


def l1_room_gib(ram_gib: float = 128, tiered_percent: int = 20, tp: int = 1) -> float:
    """What one TP=1 pod on a node may pin as L1 (README "Node RAM"): RAM minus everything else reserved there."""
    vllm = VLLM_HOST_BASE_GIB.value + VLLM_HOST_PER_RANK_GIB.value * tp
    return ram_gib - ram_gib * tiered_percent / 100 - SYSTEM_RESERVE_GIB.value - curvine_gib() - vllm


def curvine_pool_gb(nodes: int) -> float:
    curvine = CurvineConfig()
    return nodes * (curvine.worker_data_gb - curvine.worker_reserved_gb) * GIB / GB


def add_gpu_group(instance_type: str, count: int) -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        doc["hyperpod"]["instance_groups"].append(
            {"name": "big", "role": "gpu", "instance_type": instance_type, "count": count}
        )

    return change


def custom_model(attention_heads: int, kv_heads: int, tp: int) -> Callable[[Doc], object]:
    """Retail serves `acme/Model-7B`, described in the LOB file, at tensor_parallel `tp` on ml.g6e.12xlarge."""

    def change(doc: Doc) -> None:
        doc["gpu_quota"] = 2 * tp  # one replica and the pod a rolling update adds
        doc["models"] = {
            "acme/Model-7B": {
                "layers": 28,
                "attention_heads": attention_heads,
                "kv_heads": kv_heads,
                "head_dim": 128,
                "params_billion": 7.0,
            }
        }
        endpoint(doc).update(
            model={"id": "acme/Model-7B", "source": "huggingface", "weights_version": "t1"},
            instance_type="ml.g6e.12xlarge",
            tensor_parallel=tp,
            replicas=1,
        )

    return change


@dataclass(frozen=True)
class Case:
    """A cross-check: `bad` must give `field` in `file` (with `words`); `good`, a near miss, must load cleanly."""

    name: str
    env: str
    bad: Edit
    good: Edit
    file: str
    field: str
    words: str


CASES = [
    Case(
        "model neither in catalog nor in the LOB file",
        "dev",
        retail(
            lambda d: endpoint(d).update(
                model={"id": "acme/Unknown-7B", "source": "huggingface", "weights_version": "t1"}
            )
        ),
        retail(
            lambda d: (
                endpoint(d).update(model={"id": "acme/Unknown-7B", "source": "huggingface", "weights_version": "t1"}),
                d.update(
                    models={
                        "acme/Unknown-7B": {
                            "layers": 28,
                            "attention_heads": 28,
                            "kv_heads": 4,
                            "head_dim": 128,
                            "params_billion": 7.6,
                        }
                    }
                ),
            )
        ),
        "lobs/retail.yaml",
        "endpoints[0].model.id",
        "not in kvtier's catalog",
    ),
    Case(
        "weights larger than the GPU at this tensor parallelism",
        "dev",
        retail(
            lambda d: endpoint(d).update(
                model={"id": "Qwen/Qwen3-32B", "source": "huggingface", "weights_version": "t1"}
            )
        ),
        both(
            dev_env(lambda d: gpu_group(d).update(instance_type="ml.g6e.12xlarge", count=1)),
            retail(
                lambda d: (
                    d.update(gpu_quota=4),  # one TP 2 replica and its rolling-update pod
                    endpoint(d).update(
                        model={"id": "Qwen/Qwen3-32B", "source": "huggingface", "weights_version": "t1"},
                        instance_type="ml.g6e.12xlarge",
                        tensor_parallel=2,
                        replicas=1,
                    ),
                )
            ),
        ),
        "lobs/retail.yaml",
        "endpoints[0].tensor_parallel",
        "weights do not fit",
    ),
    Case(
        # A 14B model on one L40S: its KV room (about 54,000 tokens) is below its 131,072-token context.
        "KV room below one max_model_len prompt",
        "dev",
        retail(lambda d: endpoint(d).update(model=R1_14B, max_model_len=l0_tokens(R1_14B["id"]) + 16)),
        retail(lambda d: endpoint(d).update(model=R1_14B, max_model_len=l0_tokens(R1_14B["id"]))),
        "lobs/retail.yaml",
        "endpoints[0].max_model_len",
        f"at most {l0_tokens(R1_14B['id']):,}",
    ),
    Case(
        "tensor parallelism does not divide the attention heads",
        "dev",
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(30, 2, 4))),
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(32, 2, 4))),
        "lobs/retail.yaml",
        "endpoints[0].tensor_parallel",
        "30 attention heads",
    ),
    Case(
        "tensor parallelism neither splits nor replicates the KV heads",
        "dev",
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(24, 6, 4))),
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(24, 8, 4))),
        "lobs/retail.yaml",
        "endpoints[0].tensor_parallel",
        "6 KV heads",
    ),
    Case(
        "tensor parallelism does not divide the instance's GPUs",
        "dev",
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(32, 8, 3))),
        both(dev_env(add_gpu_group("ml.g6e.12xlarge", 1)), retail(custom_model(32, 8, 2))),
        "lobs/retail.yaml",
        "endpoints[0].tensor_parallel",
        "divide",
    ),
    Case(
        "replicas x TP above the LOB's GPU quota",
        "dev",
        retail(lambda d: d.update(gpu_quota=1)),
        retail(lambda d: d.update(gpu_quota=3)),
        "lobs/retail.yaml",
        "gpu_quota",
        "need 3",
    ),
    Case(
        "operator quota with no room for the rolling-update pod",
        "dev",
        retail(lambda d: d.update(gpu_quota=2)),
        unchanged,
        "lobs/retail.yaml",
        "gpu_quota",
        "plus one rolling-update pod each (qwen3-8b 2 + 1 surge x TP 1)",
    ),
    Case(
        "standalone endpoints never surge: their quota is replicas x TP",
        "prod",
        support(lambda d: d.update(gpu_quota=1)),
        support(lambda d: d.update(gpu_quota=2)),
        "lobs/support.yaml",
        "gpu_quota",
        "need 2 at their maximum replicas (",
    ),
    Case(
        "autoscaling maximum above the LOB's GPU quota",
        "dev",
        retail(lambda d: endpoint(d).update(autoscaling={"min_replicas": 1, "max_replicas": 3, "trigger": TRIGGER})),
        retail(lambda d: endpoint(d).update(autoscaling={"min_replicas": 1, "max_replicas": 2, "trigger": TRIGGER})),
        "lobs/retail.yaml",
        "gpu_quota",
        "need 4",
    ),
    Case(
        "all LOBs above the GPU instance groups",
        "dev",
        retail(lambda d: (d.update(gpu_quota=5), endpoint(d).update(replicas=4))),
        both(
            dev_env(lambda d: gpu_group(d).update(count=4)),
            retail(lambda d: (d.update(gpu_quota=5), endpoint(d).update(replicas=4))),
        ),
        "environments/dev.yaml",
        "hyperpod.instance_groups[1].count",
        "need 4",
    ),
    Case(
        "endpoint instance type that no gpu group has",
        "dev",
        retail(lambda d: endpoint(d).update(instance_type="ml.g6e.8xlarge")),
        both(
            dev_env(add_gpu_group("ml.g6e.8xlarge", 2)),
            retail(lambda d: endpoint(d).update(instance_type="ml.g6e.8xlarge")),
        ),
        "lobs/retail.yaml",
        "endpoints[0].instance_type",
        "no gpu instance group",
    ),
    Case(
        "L1 that overflows the node's RAM",
        "dev",
        retail(lambda d: endpoint(d)["cache"].update(l1_gb=round(l1_room_gib(), 1) + 0.2)),
        retail(lambda d: endpoint(d)["cache"].update(l1_gb=round(l1_room_gib(), 1) - 0.1)),
        "lobs/retail.yaml",
        "endpoints[0].cache.l1_gb",
        "fullest packing",
    ),
    Case(
        "Tiered Storage reservation that leaves no room for L1",
        "dev",
        both(
            dev_env(lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=40)),
            retail(lambda d: endpoint(d)["cache"].update(l1_gb=round(l1_room_gib(tiered_percent=40), 1) + 0.2)),
        ),
        retail(lambda d: endpoint(d)["cache"].update(l1_gb=round(l1_room_gib(tiered_percent=40), 1) + 0.2)),
        "lobs/retail.yaml",
        "endpoints[0].cache.l1_gb",
        "Tiered Storage 51.2",
    ),
    Case(
        "endpoint instance type not offered in the region (an existing cluster's groups)",
        "byoc",
        lambda d: (d / "environments" / "byoc.yaml").write_text(
            (d / "environments" / "byoc.yaml").read_text().replace("us-west-2", "ap-south-1")
        ),
        unchanged,
        "lobs/retail.yaml",
        "endpoints[0].instance_type",
        "not offered by HyperPod in ap-south-1",
    ),
    Case(
        "LOB L2 budgets above the Curvine pool",
        "dev",
        retail(lambda d: d["l2"].update(budget_gb=int(curvine_pool_gb(3)) + 1)),
        retail(lambda d: d["l2"].update(budget_gb=int(curvine_pool_gb(3)))),
        "environments/dev.yaml",
        "curvine.worker_data_gb",
        "L2 budgets add up to",
    ),
    Case(
        "LMCache chunk not a multiple of the vLLM block",
        "dev",
        retail(lambda d: endpoint(d)["cache"].update(chunk_size=200)),
        retail(lambda d: endpoint(d)["cache"].update(chunk_size=208)),
        "lobs/retail.yaml",
        "endpoints[0].cache.chunk_size",
        "multiple of the vLLM block size 16",
    ),
    Case(
        "kvaware in standalone mode (no policy in the standalone router)",
        "prod",
        support(lambda d: endpoint(d).update(routing="kvaware", api="completions")),
        support(lambda d: endpoint(d).update(routing="prefixaware", api="completions")),
        "lobs/support.yaml",
        "endpoints[0].routing",
        "no policy in the standalone router",
    ),
    Case(
        "poolaware in operator mode (its router takes no thresholds)",
        "dev",
        retail(lambda d: endpoint(d).update(routing="poolaware")),
        retail(lambda d: endpoint(d).update(routing="prefixaware")),
        "lobs/retail.yaml",
        "endpoints[0].routing",
        "poolaware balances onto replicas",
    ),
    Case(
        "poolaware without a shared L2",
        "prod",
        support(lambda d: endpoint(d).update(routing="poolaware", cache={"l1_gb": 8, "l2": "none"})),
        support(lambda d: endpoint(d).update(routing="poolaware")),
        "lobs/support.yaml",
        "endpoints[0].routing",
        "no shared L2",
    ),
    Case(
        "kvaware on a chat endpoint (operator mode)",
        "dev",
        retail(lambda d: endpoint(d).update(routing="kvaware")),
        retail(lambda d: endpoint(d).update(routing="kvaware", api="completions")),
        "lobs/retail.yaml",
        "endpoints[0].routing",
        "`prompt` field only",
    ),
    Case(
        "operator-mode Curvine L2 without Tiered Storage",
        "dev",
        dev_env(lambda d: d["hyperpod"]["tiered_storage"].update(enabled=False)),
        both(
            dev_env(lambda d: d["hyperpod"]["tiered_storage"].update(enabled=False)),
            retail(lambda d: endpoint(d).update(mode="standalone")),
        ),
        "lobs/retail.yaml",
        "endpoints[0].cache.l2",
        "placeholder backend",
    ),
    Case(
        "tieredstorage L2 without Tiered Storage",
        "dev",
        both(
            dev_env(lambda d: d["hyperpod"]["tiered_storage"].update(enabled=False)),
            retail(lambda d: endpoint(d)["cache"].update(l2="tieredstorage")),
        ),
        retail(lambda d: endpoint(d)["cache"].update(l2="tieredstorage")),
        "lobs/retail.yaml",
        "endpoints[0].cache.l2",
        "HyperPod's Tiered Storage",
    ),
]


def _problems(config_dir: Path, env: str) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        load_checked(config_dir, env)
    return caught.value.problems


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_rejects_bad_config(case: Case, config_copy: Path) -> None:
    case.bad(config_copy)
    problems = _problems(config_copy, case.env)
    matching = [p for p in problems if p.file.endswith(case.file) and p.field == case.field]
    assert matching, f"no problem at {case.file}: {case.field} in {[str(p) for p in problems]}"
    assert any(case.words in str(p) for p in matching), [str(p) for p in matching]
    for problem in matching:
        assert problem.problem and problem.allowed  # the message says what is wrong and what to do


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_accepts_near_miss(case: Case, config_copy: Path) -> None:
    case.good(config_copy)
    config = load_checked(config_copy, case.env)
    assert not [w for w in config.warnings if w.field == case.field and case.words in str(w)]


def test_every_example_environment_passes_the_checks() -> None:
    from kvtier.config.loader import available_envs
    from tests.support import CONFIG_DIR

    envs = available_envs(CONFIG_DIR)
    assert {"dev", "prod"} <= set(envs)
    for env in envs:
        config = load_checked(CONFIG_DIR, env)  # raises ConfigError with every problem if a check rejects an example
        # Examples are what users copy: not even a warning (a rollout that stalls, kvaware on chat, ...), except the
        # one that their images are tags: kvtier cannot ship digests nobody here pulled (issue 34, rules/images.py).
        others = [str(w) for w in config.warnings if w.field != "production"]
        assert others == [], (env, others)
        pins = [w for w in config.warnings if w.field == "production"]
        assert len(pins) <= 1 and all("pin each to the digest you pulled" in str(w) for w in pins), env


# --- Warnings: exit 0, printed -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarningCase:
    name: str
    env: str
    bad: Edit
    good: Edit
    file: str
    field: str
    words: str


WARNINGS = [
    WarningCase(
        "operator endpoint holding every GPU of its group",
        "dev",
        dev_env(lambda d: gpu_group(d).update(count=2)),
        unchanged,
        "lobs/retail.yaml",
        "endpoints[0].replicas",
        "rolling update stalls",
    ),
    WarningCase(
        "operator endpoint whose group the other LOBs fill",
        "dev",
        both(dev_env(lambda d: (gpu_group(d).update(count=4), d.update(lobs=["retail", "support"])))),
        both(dev_env(lambda d: (gpu_group(d).update(count=5), d.update(lobs=["retail", "support"])))),
        "lobs/retail.yaml",
        "endpoints[0].replicas",
        "other endpoints hold",
    ),
    WarningCase(
        "L2 slower than recomputing at every allowed prompt length",
        "dev",
        dev_env(lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"l2_read_gbps": 0.2}})),
        dev_env(lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"l2_read_gbps": 1.84}})),
        "lobs/retail.yaml",
        "endpoints[0].cache.l2",
        "beats recomputing",
    ),
    WarningCase(
        "an L2 hit's fixed cost above recomputing the longest allowed prompt (the bytes alone are fast)",
        "dev",
        dev_env(lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"l2_hit_fixed_s": 5.0}})),
        dev_env(lambda d: d.update(catalog_overrides={"ml.g6e.4xlarge": {"l2_hit_fixed_s": 0.12}})),
        "lobs/retail.yaml",
        "endpoints[0].cache.l2",
        "a hit costs 5000 ms plus its bytes",
    ),
    WarningCase(
        "GPU quotas above the GPUs of the environment",
        "dev",
        retail(lambda d: d.update(gpu_quota=4)),
        retail(lambda d: d.update(gpu_quota=3)),
        "environments/dev.yaml",
        "lobs",
        "starve",
    ),
    WarningCase(
        "two endpoints of one LOB serving the same model",
        "prod",
        support(
            lambda d: (d.update(gpu_quota=3), d["endpoints"].append(dict(endpoint(d), name="llama31-8b-b", replicas=1)))
        ),
        support(
            lambda d: (
                d.update(gpu_quota=3),
                d["endpoints"].append(
                    dict(
                        endpoint(d),
                        name="mistral-7b",
                        replicas=1,
                        model={
                            "id": "mistralai/Mistral-7B-Instruct-v0.3",
                            "source": "huggingface",
                            "weights_version": "t1",
                        },
                    )
                ),
            )
        ),
        "lobs/support.yaml",
        "endpoints[1].model.id",
        "own L2 directory",
    ),
    WarningCase(
        "LOB description of a catalog model that differs from the catalog",
        "dev",
        retail(
            lambda d: d.update(
                models={
                    "Qwen/Qwen3-8B": {
                        "layers": 40,
                        "attention_heads": 32,
                        "kv_heads": 8,
                        "head_dim": 128,
                        "params_billion": 8.2,
                    }
                }
            )
        ),
        retail(
            lambda d: d.update(
                models={
                    "Qwen/Qwen3-8B": {
                        "layers": 36,
                        "attention_heads": 32,
                        "kv_heads": 8,
                        "head_dim": 128,
                        "params_billion": 8.2,
                    }
                }
            )
        ),
        "lobs/retail.yaml",
        "models.Qwen/Qwen3-8B",
        "differs from kvtier's catalog",
    ),
]


def _warned(config: Config, case: WarningCase) -> bool:
    return any(w.file.endswith(case.file) and w.field == case.field and case.words in str(w) for w in config.warnings)


@pytest.mark.parametrize("case", WARNINGS, ids=[c.name for c in WARNINGS])
def test_warning_is_given(case: WarningCase, config_copy: Path) -> None:
    case.bad(config_copy)
    config = load_checked(config_copy, case.env)  # a warning never stops the load
    assert _warned(config, case), [str(w) for w in config.warnings]


@pytest.mark.parametrize("case", WARNINGS, ids=[c.name for c in WARNINGS])
def test_warning_is_not_given_on_near_miss(case: WarningCase, config_copy: Path) -> None:
    case.good(config_copy)
    assert not _warned(load_checked(config_copy, case.env), case)


def test_lob_description_is_what_the_planner_uses(config_copy: Path) -> None:
    from kvtier.planner import tier_model

    WARNINGS[-1].bad(config_copy)
    config = load_checked(config_copy, "dev")
    assert tier_model(config, "retail", "qwen3-8b").kv_bytes_per_token == 2 * 40 * 8 * 128 * 2
