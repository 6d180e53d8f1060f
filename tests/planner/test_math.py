"""Planner numbers against hand calculations from the sources (reference curvine-lmcache.md 3, 4; the AWS/Curvine blog)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from kvtier.catalog import (
    GB,
    GIB,
    INSTANCE_TYPES,
    MODELS,
    PLANNING_FACTS,
    Fact,
    UnknownModelError,
    resolve_model,
)
from kvtier.config.endpoint import ModelShape
from kvtier.planner import TierModel, tier_model
from kvtier.planner.gpu import gpu_budget, kv_bytes_per_token_per_gpu
from kvtier.planner.host import PodMemory, worst_packing
from kvtier.planner.speed import speeds
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

G6E_4XL = INSTANCE_TYPES["ml.g6e.4xlarge"]
L40S = G6E_4XL.gpu_spec


def test_blog_prompt_is_about_0_103_gib_of_kv() -> None:
    """1,925 tokens of a Qwen2-7B-class model: the blog's logged 0.1028 (reference 3)."""
    model = MODELS["Qwen/Qwen2-7B-Instruct"]
    assert model.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 56 * 1024
    assert 1925 * model.kv_bytes_per_token / GIB == pytest.approx(0.1028, abs=0.0005)


@pytest.mark.parametrize(
    ("model_id", "per_token", "chunk_mib"),
    [
        ("Qwen/Qwen3-8B", 147_456, 36),
        ("Qwen/Qwen2.5-7B-Instruct", 57_344, 14),
        ("Qwen/Qwen3-32B", 256 * 1024, 64),
        ("meta-llama/Llama-3.1-8B-Instruct", 128 * 1024, 32),
        ("meta-llama/Llama-3.3-70B-Instruct", 320 * 1024, 80),
    ],
)
def test_kv_bytes_per_token_and_chunk(model_id: str, per_token: int, chunk_mib: int) -> None:
    model = MODELS[model_id]
    assert model.kv_bytes_per_token == per_token
    assert 256 * model.kv_bytes_per_token == chunk_mib * 1024**2


@pytest.mark.parametrize(
    ("model_id", "low", "high"),
    [  # reference 3: estimates of KV tokens on one L40S at gpu_memory_utilization 0.9
        ("Qwen/Qwen2.5-7B-Instruct", 430_000, 470_000),
        ("meta-llama/Llama-3.1-8B-Instruct", 180_000, 195_000),
        ("Qwen/Qwen3-8B", 155_000, 170_000),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", 45_000, 55_000),
    ],
)
def test_l0_tokens_within_the_references_estimates(model_id: str, low: int, high: int) -> None:
    budget = gpu_budget(L40S, 0.9, MODELS[model_id], 1, 16)
    assert low <= budget.tokens <= high
    assert budget.tokens % 16 == 0


def test_l0_hand_calculation_for_qwen3_8b() -> None:
    model = MODELS["Qwen/Qwen3-8B"]
    kv_bytes = 44.4 * 0.9 * GIB - 8.2e9 * 2 - 2.5 * GIB
    assert gpu_budget(L40S, 0.9, model, 1, 16).tokens == int(kv_bytes // (16 * 147_456)) * 16


def test_32b_needs_two_l40s() -> None:
    model = MODELS["Qwen/Qwen3-32B"]
    assert gpu_budget(L40S, 0.9, model, 1, 16).kv_gib < 0
    two = gpu_budget(L40S, 0.9, model, 2, 16)
    assert two.weights_gib == pytest.approx(32.75e9 * 2 / 2 / GIB)
    assert two.tokens > 16384


def test_kv_heads_split_over_ranks_and_replicate_beyond() -> None:
    model = MODELS["Qwen/Qwen3-8B"]  # 8 KV heads
    assert kv_bytes_per_token_per_gpu(model, 2) == model.kv_bytes_per_token // 2
    assert kv_bytes_per_token_per_gpu(model, 8) == model.kv_bytes_per_token // 8
    qwen2 = MODELS["Qwen/Qwen2-7B-Instruct"]  # 4 KV heads: at TP 8 each rank still keeps one whole head
    assert kv_bytes_per_token_per_gpu(qwen2, 8) == qwen2.kv_bytes_per_token // 4


def test_chunk_load_times_match_the_reference() -> None:
    """Reference 4.2: a 36 MiB Qwen3-8B chunk loads from L1 in about 1.5 ms at 25 GB/s; from L2 in about 19 ms at the
    blog's 1.98 GB/s (the reference's "20 ms at 1.8 GB/s" read LMCache's GiB/s as GB/s)."""
    s = speeds(MODELS["Qwen/Qwen3-8B"], G6E_4XL, 1)
    assert 256 * s.l1_s_per_token == pytest.approx(36 * 1024**2 / 25e9)
    assert 256 * s.l1_s_per_token == pytest.approx(0.0015, abs=0.0001)
    assert 256 * s.l2_s_per_token == pytest.approx(36 * 1024**2 / 1.98e9, rel=0.01)
    assert 256 * s.l2_single_flow_s_per_token == pytest.approx(36 * 1024**2 / (5e9 / 8))


def test_l2_model_reproduces_the_blogs_cross_node_read() -> None:
    """The blog's LMCache log: 1,925 tokens, "size: 0.1028 GB", retrieved in 55.75 ms, "throughput: 1.84 GB/s" on
    ml.g6e.4xlarge (20 Gbps). 1,925 x 57,344 B = 110.4e6 B = 0.1028 GiB: LMCache's GB are GiB, so the read ran at
    1.98 decimal GB/s, the unit of every rate in the catalog."""
    size = 1925 * MODELS["Qwen/Qwen2-7B-Instruct"].kv_bytes_per_token
    assert size / GIB == pytest.approx(0.1028, abs=0.00005)  # LMCache's "GB" is GiB
    assert size / 0.05575 / GIB == pytest.approx(1.84, abs=0.005)  # its throughput too
    assert G6E_4XL.l2_read_gbps == pytest.approx(size / 0.05575 / GB, rel=0.005)  # 1.98 GB/s
    s = speeds(MODELS["Qwen/Qwen2-7B-Instruct"], G6E_4XL, 1)
    assert 1925 * s.l2_s_per_token == pytest.approx(0.05575, rel=0.005)


def test_l2_read_is_network_bound_on_small_sizes_and_capped_on_large() -> None:
    efficiency = PLANNING_FACTS["l2_network_efficiency"].value
    xlarge = INSTANCE_TYPES["ml.g6e.xlarge"]
    assert xlarge.l2_read_gbps == pytest.approx(efficiency * 2.5 / 8)
    assert INSTANCE_TYPES["ml.g6e.48xlarge"].l2_read_gbps == PLANNING_FACTS["l2_fuse_cap_gbps"].value


def test_prefill_flops_hand_calculation() -> None:
    model = MODELS["Qwen/Qwen3-8B"]
    n = 4096
    # 8.2 B less the embedding and the LM head (151,936 x 4,096 each): 6.955 B computed (issue 36)
    assert model.computed_params == pytest.approx(8.2e9 - 2 * 151936 * 4096)
    assert model.prefill_flops(n) == pytest.approx(2 * 6.955e9 * n + 2 * 36 * 32 * 128 * n * n, rel=1e-4)
    s = speeds(model, G6E_4XL, 1)
    seconds = s.prefill_s_per_token * n + s.prefill_s_per_token_squared * n * n
    assert seconds == pytest.approx(model.prefill_flops(n) / (362.05e12 * 0.5))
    tp2 = speeds(model, INSTANCE_TYPES["ml.g6e.12xlarge"], 2)
    assert tp2.prefill_s_per_token == pytest.approx(s.prefill_s_per_token / 2)


def _tiers(load: float, linear: float, squared: float, chunk: int = 256, l2_tokens: int = 10**6) -> TierModel:
    return TierModel(
        kv_bytes_per_token=1,
        chunk_tokens=chunk,
        block_tokens=16,
        replicas=1,
        l0_tokens=1,
        l1_tokens=1,
        l2_tokens=l2_tokens,
        l1_load_s_per_token=0.0,
        l2_load_s_per_token=load,
        prefill_s_per_token=linear,
        prefill_s_per_token_squared=squared,
        max_model_len=32768,
    )


def test_break_even_is_one_chunk_when_l2_is_faster_per_token() -> None:
    assert _tiers(1e-5, 2e-5, 1e-9).l2_break_even_tokens() == 256


def test_break_even_where_attention_catches_up() -> None:
    # a - b = 1e-5 s, q = 1e-9 s: recompute loses above N = 10,000 tokens -> the next whole chunk.
    tiers = _tiers(3e-5, 2e-5, 1e-9)
    n = tiers.l2_break_even_tokens()
    assert n == math.ceil(10_000 / 256) * 256
    assert tiers.l2_load_seconds(n) < tiers.prefill_seconds(n)
    assert tiers.l2_load_seconds(n - 256) >= tiers.prefill_seconds(n - 256)


def test_break_even_never_without_attention_term_or_without_l2() -> None:
    assert _tiers(3e-5, 2e-5, 0.0).l2_break_even_tokens() is None
    assert _tiers(math.inf, 2e-5, 1e-9).l2_break_even_tokens() is None
    assert _tiers(1e-5, 2e-5, 1e-9, l2_tokens=0).l2_break_even_tokens() is None


def test_worst_packing_picks_the_pods_that_pin_most() -> None:
    small = PodMemory("a", "small", 1, 10.0, 8.0)
    wide = PodMemory("b", "wide", 2, 50.0, 12.0)
    # 4 GPUs: two wide pods (124 GiB) beat four small ones (72) and one wide + two small (98).
    assert worst_packing(4, [(small, 4), (wide, 2)]) == (wide, wide)
    # Only one wide pod may exist: it and two small ones.
    assert sorted(p.endpoint for p in worst_packing(4, [(small, 4), (wide, 1)])) == ["small", "small", "wide"]
    assert worst_packing(1, [(wide, 3)]) == ()


def test_tier_model_of_the_dev_example_by_hand() -> None:
    config = load_checked(CONFIG_DIR, "dev")
    tiers = tier_model(config, "retail", "qwen3-8b")
    kv = 147_456
    assert tiers.kv_bytes_per_token == kv
    assert tiers.l1_tokens == 20 * GIB // kv
    # retail's whole budget (its only curvine endpoint), in whole 256-token files with LMCache's 28-byte header
    assert tiers.l2_tokens == 200 * GB // (256 * kv + 28) * 256
    assert (tiers.chunk_tokens, tiers.block_tokens, tiers.replicas, tiers.max_model_len) == (256, 16, 2, 16384)
    assert tiers.l0_tokens == gpu_budget(L40S, 0.9, MODELS["Qwen/Qwen3-8B"], 1, 16).tokens


def test_tier_model_overrides() -> None:
    config = load_checked(CONFIG_DIR, "dev")
    tiers = tier_model(config, "retail", "qwen3-8b", replicas=5, l1_gib=0, l2_gb=36)
    assert tiers.replicas == 5
    assert tiers.l1_tokens == 0
    assert tiers.l2_tokens == 36 * GB // (256 * 147_456 + 28) * 256


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("l1_gib", math.inf),
        ("l1_gib", math.nan),
        ("l2_gb", math.nan),
        ("l2_gb", -math.inf),
        ("l1_gib", 1e300),
        ("l2_gb", -1),
    ],
)
def test_tier_model_refuses_sizes_that_are_not_finite_or_beyond_any_deployment(name: str, value: float) -> None:
    from kvtier.errors import UsageError

    config = load_checked(CONFIG_DIR, "dev")
    with pytest.raises(UsageError, match=re.escape(f"{name} override {value} is out of range")):
        if name == "l1_gib":
            tier_model(config, "retail", "qwen3-8b", l1_gib=value)
        else:
            tier_model(config, "retail", "qwen3-8b", l2_gb=value)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("nope", "qwen3-8b"), "no line of business 'nope'"),
        (("retail", "nope"), "no endpoint 'nope'"),
    ],
)
def test_tier_model_names_what_exists(args: tuple[str, str], words: str) -> None:
    from kvtier.errors import UsageError

    config = load_checked(CONFIG_DIR, "dev")
    with pytest.raises(UsageError, match=words):
        tier_model(config, *args)


def test_l2_shares_split_the_lob_budget(config_copy: Path) -> None:
    import yaml

    path = config_copy / "lobs" / "support.yaml"
    doc = yaml.safe_load(path.read_text())
    second = dict(doc["endpoints"][0], name="mistral-7b", replicas=1)
    second["model"] = {"id": "mistralai/Mistral-7B-Instruct-v0.3", "source": "huggingface", "weights_version": "t1"}
    doc["endpoints"].append(second)
    doc["gpu_quota"] = 3
    path.write_text(yaml.safe_dump(doc))
    config = load_checked(config_copy, "prod")
    for name in ("llama31-8b", "mistral-7b"):
        assert tier_model(config, "support", name).l2_tokens == 200 * GB // (256 * 128 * 1024 + 28) * 256


def test_lob_model_description_resolves_and_unknown_raises() -> None:
    shape = ModelShape(layers=2, attention_heads=4, kv_heads=2, head_dim=64, params_billion=0.1)
    model = resolve_model("acme/Tiny", {"acme/Tiny": shape})
    assert model.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert "models.acme/Tiny" in model.source
    assert resolve_model("Qwen/Qwen3-8B", {}) is MODELS["Qwen/Qwen3-8B"]
    with pytest.raises(UnknownModelError):
        resolve_model("acme/Tiny", {})


def test_every_planning_fact_has_a_source_and_a_date() -> None:
    for name, fact in PLANNING_FACTS.items():
        assert isinstance(fact, Fact)
        assert fact.value > 0 and fact.unit and len(fact.source) > 20, name
        assert fact.as_of == "2026-11", name


def test_every_gpu_instance_has_dated_planning_facts_and_prices() -> None:
    for instance in INSTANCE_TYPES.values():
        if instance.price_per_hour is not None:
            assert instance.price_as_of, instance.name
            assert "price_per_hour" in instance.sources
        if instance.is_gpu:
            assert instance.prefill_mfu and instance.l2_read_gbps, instance.name
            assert {"prefill_mfu", "l2_read_gbps"} <= instance.unverified  # overridable once measured
            assert instance.gpu_spec.bf16_dense_tflops > 0 and instance.gpu_spec.host_to_gpu_gbps > 0


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_pinned_l1_matches_what_the_endpoint_charts_emit(tp: int) -> None:
    """The node-RAM check counts what the charts tell LMCache to pin: `max_local_cpu_size` once per TP rank (LMCache
    starts one engine per rank), staging when L1 is off; and the pod's memory request holds it."""
    from kvtier.config.endpoint import CacheConfig
    from kvtier.connectors.lmcache import env_name
    from kvtier.k8s.operator_endpoint import worker_env
    from kvtier.k8s.standalone import engine_deployment
    from kvtier.planner.host import pod_memory
    from kvtier.sizing import worker_size

    config = load_checked(CONFIG_DIR, "dev")
    endpoint = config.lobs[0].endpoints[0]
    instance = "ml.g6e.12xlarge"  # 4 GPUs
    for cache in (CacheConfig(l1_gb=20), CacheConfig(l1_gb=0), CacheConfig(l1_gb=0, l2="none")):
        for mode, routing in (("standalone", "prefixaware"), ("standalone", "kvaware"), ("operator", "prefixaware")):
            update = {
                "cache": cache,
                "tensor_parallel": tp,
                "instance_type": instance,
                "mode": mode,
                "routing": routing,
            }
            changed = endpoint.model_copy(update=update)
            if mode == "standalone":
                container = engine_deployment(config.env, "retail", changed)["spec"]["template"]["spec"]["containers"][
                    0
                ]
                variables = {v["name"]: v.get("value") for v in container["env"]}
            else:
                variables = {v["name"]: v["value"] for v in worker_env("retail", changed)}
            per_rank = float(variables.get(env_name("max_local_cpu_size")) or 0.0)
            pinned = pod_memory("retail", changed).l1_gib
            assert per_rank * tp == pytest.approx(pinned), (mode, routing, cache)
            assert pinned == (20.0 if cache.l1_gb else 2.0 if cache.l2 != "none" else 0.0)  # per replica, any TP
            assert worker_size(INSTANCE_TYPES[instance], tp, cache).memory_gib >= pinned + 4 + 4 * tp


@pytest.mark.parametrize(
    ("model_id", "tp", "copies"),
    [
        ("Qwen/Qwen3-8B", 1, 1),
        ("Qwen/Qwen3-8B", 2, 1),  # 8 KV heads: 4 a rank, so the replica's L1 holds l1 / kv tokens at any TP
        ("Qwen/Qwen3-8B", 8, 1),
        ("Qwen/Qwen2.5-7B-Instruct", 8, 2),  # 4 KV heads on 8 ranks: every head is kept twice
    ],
)
def test_l1_tokens_follow_the_shards_each_rank_keeps(model_id: str, tp: int, copies: int) -> None:
    from kvtier.planner.tiers import endpoint_tiers

    config = load_checked(CONFIG_DIR, "dev")
    lob = config.lobs[0]
    endpoint = lob.endpoints[0].model_copy(update={"tensor_parallel": tp, "instance_type": "ml.g6e.48xlarge"})
    model = MODELS[model_id]
    tiers = endpoint_tiers(config.env, config.lobs, lob, endpoint, model)
    l1_bytes = endpoint.cache.l1_gb * GIB
    assert tiers.l1_tokens == int(l1_bytes // (model.kv_bytes_per_token * copies))
    # The same count seen from one rank: its share of L1 over its share of a token.
    assert tiers.l1_tokens == int(l1_bytes / tp // kv_bytes_per_token_per_gpu(model, tp))


def test_the_planner_and_the_simulator_load_without_cdk8s() -> None:
    """They import LMCache sizing and the router's defaults from light modules: `kvtier plan`, `validate` and
    `simulate` must not start a Node process."""
    import subprocess
    import sys

    code = (
        "import sys, kvtier.planner.host, kvtier.planner.tiers, kvtier.sizing, kvtier.simulate.engine, "
        "kvtier.cli.bench, kvtier.cli.simulate, kvtier.bench.workloads\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'cdk8s', 'jsii', 'aws_cdk', 'constructs'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_l2_hits_are_whole_files_of_each_connector() -> None:
    """LMCache stores whole chunks (256 tokens in the example), vLLM's fs tier whole blocks (16): the planner's L2 hit
    of a 1,000-token prompt is 768 tokens on LMCache and 992 on vLLM's connector (issue 24)."""
    from kvtier.planner.tiers import endpoint_tiers
    from kvtier.planner.ttft import stored_tokens

    config = load_checked(CONFIG_DIR, "prod")
    lob = config.lob("support")
    lmcache = lob.endpoints[0]
    vllm = lmcache.model_copy(update={"cache": lmcache.cache.model_copy(update={"connector": "vllm"})})
    model = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    from kvtier.simulate.report import header

    hits = {}
    for endpoint in (lmcache, vllm):
        tiers = endpoint_tiers(config.env, config.lobs, lob, endpoint, model)
        hits[endpoint.cache.connector] = (
            tiers.chunk_tokens,
            stored_tokens(1000, tiers.chunk_tokens, tiers.save_unfull_chunk),
            header(tiers, "t", 512).splitlines()[2].split(";")[0],  # what simulate says one L2 file is
        )
    assert hits == {
        "lmcache": (256, 768, "unit 512 tokens (LMCache chunk 256)"),
        "vllm": (16, 992, "unit 512 tokens (vLLM block 16)"),
    }
