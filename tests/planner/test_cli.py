"""`kvtier plan` on the example environments: the table and the JSON carry the planner's numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import GB, GIB, INSTANCE_TYPES, MODELS, PLANNING_FACTS
from kvtier.cli import main as cli
from tests.support import CONFIG_DIR


def _yaml(relative: str) -> Any:
    return yaml.safe_load((CONFIG_DIR / relative).read_text())


def _endpoints(env: str) -> list[tuple[str, str, str]]:
    """(LOB, endpoint, model id) of an example environment, read from its YAML files."""
    return [
        (lob, e["name"], e["model"]["id"])
        for lob in _yaml(f"environments/{env}.yaml")["lobs"]
        for e in _yaml(f"lobs/{lob}.yaml")["endpoints"]
    ]


def _price(instance_type: str) -> float:
    price = INSTANCE_TYPES[instance_type].price_per_hour
    assert price is not None
    return price


def _plan(env: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert cli(["plan", "-e", env, "--config-dir", str(CONFIG_DIR), "--json", *extra]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_plan_json_per_endpoint(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every example endpoint runs on ml.g6e.4xlarge (one L40S: 44.4 GiB visible, 362.05 TFLOPS, 25 GB/s from host,
    20 Gbps network): its numbers by hand from the reference, with the YAML's own settings."""
    plan = _plan(env, capsys, "--tokens", "1925")
    assert [(e["lob"], e["endpoint"], e["model"]["id"]) for e in plan["endpoints"]] == _endpoints(env)
    for e in plan["endpoints"]:
        written = next(x for x in _yaml(f"lobs/{e['lob']}.yaml")["endpoints"] if x["name"] == e["endpoint"])
        assert written["instance_type"] == "ml.g6e.4xlarge" and written.get("tensor_parallel", 1) == 1
        utilization = written.get("gpu_memory_utilization", 0.9)
        chunk = written.get("cache", {}).get("chunk_size", 256)
        model = MODELS[e["model"]["id"]]
        kv = 2 * model.layers * model.kv_heads * model.head_dim * 2
        assert e["kv_bytes_per_token"] == kv
        assert e["weights"]["gib"] == pytest.approx(model.params_billion * 2e9 / GIB)
        floor = model.params_billion * 2e9 / 864e9  # a forward pass reads every weight once (L40S: 864 GB/s)
        # Each LMCache file carries its 28-byte chunk header (save_chunk_meta, issue 36).
        assert e["chunk"] == {"tokens": chunk, "bytes": chunk * kv + 28, "unit": "LMCache chunk"}
        assert e["l1"]["tokens_per_replica"] == int(written["cache"]["l1_gb"] * GIB // kv)
        kv_gib = 44.4 * utilization - model.params_billion * 2e9 / GIB - 2.5
        assert e["l0"]["kv_gib_per_gpu"] == pytest.approx(kv_gib)
        assert e["l0"]["tokens_per_replica"] == int(kv_gib * GIB // (16 * kv)) * 16
        # L2 holds whole files, each with its header (the janitor deletes whole files).
        assert (
            e["l2"]["backend"] == "curvine"
            and e["l2"]["tokens"] == int(e["l2"]["gb"] * GB // (chunk * kv + 28)) * chunk
        )
        assert e["load"]["l1_chunk_s"] == pytest.approx(chunk * kv / 25e9)
        # An L2 hit: 0.102 s per hit + the bytes at the blog's 1.98 GB/s (110.4e6 B in 55.75 ms).
        read = 1925 * 57_344 / 0.05575
        assert e["load"]["l2_hit_fixed_s"] == 0.102
        assert e["load"]["l2_chunk_s"] == pytest.approx(0.102 + chunk * kv / read, rel=0.01)
        assert e["load"]["l2_chunk_s_single_flow"] == pytest.approx(chunk * kv / (5e9 / 8))
        assert e["recompute"]["tokens"] == 1925
        # Computed parameters (issue 36): the embedding and the LM head are no matmuls of a prefill.
        flops_linear = 2 * (model.params_billion * 1e9 - 2 * (model.vocab_size or 0) * (model.hidden_size or 0))
        flops_squared = 2 * model.layers * model.attention_heads * model.head_dim
        peak = 362.05e12 * 0.5
        recompute = (flops_linear * 1925 + flops_squared * 1925**2) / peak + floor
        assert e["recompute"]["seconds"] == pytest.approx(recompute)
        # Break-even by hand: the first whole chunk N with 0.102 s + N x kv / 1.98 GB/s < recompute(N) (the floor is
        # on both sides: an L2 hit still runs the last token's forward pass).
        # The rate is the catalog's 0.794 x 20 Gbps = 1.985 GB/s (the blog's 1.98 rounded): Qwen3-8B's break-even
        # sits 46 us inside 7,168 tokens.
        n = chunk
        while 0.102 + n * kv / (0.794 * 20 / 8 * 1e9) >= (flops_linear * n + flops_squared * n * n) / peak:
            n += chunk
        assert e["break_even_tokens"] == n


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_plan_json_costs(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(env, capsys)
    groups = _yaml(f"environments/{env}.yaml")["hyperpod"]["instance_groups"]
    environment = plan["environment"]
    fixed = sum(f["count"] * f["price_per_unit_hour"] for f in environment["fixed"])  # issue 26: EKS, endpoints, NAT
    assert fixed > 0
    total = sum(g["count"] * _price(g["instance_type"]) for g in groups) + fixed
    assert environment["total_price"]["per_hour"] == pytest.approx(total, abs=1e-3)
    assert environment["total_price"]["per_month"] == pytest.approx(total * 730, abs=0.01)
    l40s = sum(g["count"] * INSTANCE_TYPES[g["instance_type"]].gpus for g in groups if g["role"] == "gpu")
    h100 = l40s * 362.05 / 989.4
    assert environment["p5"]["h100_gpus"] == pytest.approx(h100)
    assert environment["p5"]["instances"] == -(-h100 // 8)
    lob_names = _yaml(f"environments/{env}.yaml")["lobs"]
    assert [lob["name"] for lob in plan["lobs"]] == lob_names
    for lob in plan["lobs"]:
        endpoints = _yaml(f"lobs/{lob['name']}.yaml")["endpoints"]
        gpus = sum(e.get("replicas", 1) * e.get("tensor_parallel", 1) for e in endpoints)
        assert lob["gpus"] == gpus
        per_gpu = {
            e["instance_type"]: _price(e["instance_type"]) / INSTANCE_TYPES[e["instance_type"]].gpus for e in endpoints
        }
        assert lob["price"]["per_hour"] == pytest.approx(
            sum(e.get("replicas", 1) * e.get("tensor_parallel", 1) * per_gpu[e["instance_type"]] for e in endpoints),
            abs=1e-3,
        )
        whole = math.ceil(gpus * 362.05 / 989.4 / 8 - 1e-9)  # whole ml.p5.48xlarge instances (issue 29)
        assert lob["p5"]["price"]["per_hour"] == pytest.approx(whole * _price("ml.p5.48xlarge"), abs=1e-3)
    assert set(plan["assumptions"]) == set(PLANNING_FACTS)
    assert all(fact["source"] and fact["as_of"] for fact in plan["assumptions"].values())
    assert {"l0", "l1", "l2", "l1_load", "l2_load", "recompute", "break_even", "lob_share", "p5"} <= set(plan["rules"])


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_plan_json_warnings_are_the_validators(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtier.rules import load_checked

    assert _plan(env, capsys)["warnings"] == [str(w) for w in load_checked(CONFIG_DIR, env).warnings]


@pytest.mark.parametrize("env", ["dev", "prod"])
@pytest.mark.parametrize("wide", [False, True])
def test_plan_table(env: str, wide: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "-e", env, "--config-dir", str(CONFIG_DIR), *(["--wide"] if wide else [])]) == 0
    out = capsys.readouterr().out
    for lob, endpoint, model_id in _endpoints(env):
        assert f"{lob}/{endpoint}" in out
        assert model_id in out
        assert f"{MODELS[model_id].kv_bytes_per_token:,} B" in out
    for title in (
        "Endpoint",
        "Lines of business",
        f"Environment {env}",
        "GPU capacity on P5",
        "KV cache one replica reaches",
        "Not priced:",
    ):
        assert title in out
    assert "by the GPU-hour" not in out  # issue 29: a buyer rents whole P5 instances
    assert f"${2 * _price('ml.g6e.4xlarge') * 730:,.2f}" in out  # retail's two GPUs, a month
    # issue 39: README promises cost per hour and per month; the default view showed only the month
    assert f"${2 * _price('ml.g6e.4xlarge'):,.2f}" in out  # retail's two GPUs, an hour
    assert out.count("$/hour") >= 2  # the LOB and environment tables
    assert "caveat: " in out and "ml.p5.48xlarge price_per_hour" in out
    if wide:
        assert "break_even" in out  # the rules
    else:
        widest = max(len(line) for line in out.splitlines())
        assert widest <= 80, f"a line of {widest} columns"
        assert "…" not in out  # nothing cut: long cells fold


def test_plan_compares_p5_as_a_buyer_rents_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A buyer cannot rent part of an ml.p5.48xlarge (issue 29): whole instances only, each LOB's own price per
    H100-equivalent hour next to P5's per GPU, and the KV each replica reaches with the tiers vs on a P5 GPU."""
    plan = _plan("dev", capsys)
    p5 = plan["environment"]["p5"]
    per_gpu = _price("ml.p5.48xlarge") / 8
    assert p5["price_per_gpu_hour"] == pytest.approx(per_gpu)
    assert "price_by_gpu_hour" not in p5
    assert p5["price"]["per_hour"] == pytest.approx(p5["instances"] * _price("ml.p5.48xlarge"))
    (retail,) = plan["lobs"]
    h100 = 2 * 362.05 / 989.4
    assert retail["p5"]["h100_gpus"] == pytest.approx(h100)
    assert retail["p5"]["price_per_h100_equivalent_hour"] == pytest.approx(
        2 * _price("ml.g6e.4xlarge") / h100, abs=1e-3
    )
    [kv] = p5["kv"]
    (endpoint,) = plan["endpoints"]
    reach = endpoint["l0"]["tokens_per_replica"] + endpoint["l1"]["tokens_per_replica"] + endpoint["l2"]["tokens"]
    assert kv["tokens"] == reach and 0 < kv["tokens_on_p5"] < reach
    assert any("ml.p5.48xlarge price_per_hour" in line for line in plan["caveats"])


def test_plan_rejects_a_bad_token_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "--config-dir", str(CONFIG_DIR), "--tokens", "0"]) == 2
    assert "--tokens 0 is out of range" in capsys.readouterr().err


def test_plan_of_an_invalid_config_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "-e", "nope", "--config-dir", str(CONFIG_DIR)]) == 2
    err = capsys.readouterr().err
    assert "environment 'nope' has no file" in err and "Traceback" not in err


def test_plan_says_unknown_prices(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_path = config_copy / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["hyperpod"]["instance_groups"][0]["instance_type"] = "ml.m5.8xlarge"  # no price in the sources
    env_path.write_text(yaml.safe_dump(env))
    assert cli(["plan", "--config-dir", str(config_copy), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["environment"]["total_price"]
    known = 3 * _price("ml.g6e.4xlarge") + 0.345  # the dev GPU group, and the fixed EKS, endpoints, NAT (issue 26)
    assert total["per_hour"] is None and total["unknown"] == ["ml.m5.8xlarge"]
    assert total["known_part_per_hour"] == pytest.approx(known)
    assert total["known_part_per_month"] == pytest.approx(known * 730)
    assert cli(["plan", "--config-dir", str(config_copy)]) == 0
    out = capsys.readouterr().out
    assert f">= ${known * 730:,.2f}+" in out and "+: a lower bound; no price for ml.m5.8xlarge." in out
    assert f">= ${known:,.2f}+" in out  # the hour's lower bound too (issue 39)
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out


def test_plan_of_an_endpoint_without_l2(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_copy / "lobs" / "retail.yaml"
    lob = yaml.safe_load(path.read_text())
    lob["endpoints"][0]["cache"]["l2"] = "none"
    path.write_text(yaml.safe_dump(lob))
    assert cli(["plan", "--config-dir", str(config_copy), "--json"]) == 0
    (endpoint,) = json.loads(capsys.readouterr().out)["endpoints"]
    assert endpoint["l2"]["tokens"] == 0 and endpoint["load"]["l2_chunk_s"] is None
    assert endpoint["break_even_tokens"] is None and endpoint["break_even_note"] == "no L2 for this endpoint"
    assert endpoint["l2_hit"] is None
    assert cli(["plan", "--config-dir", str(config_copy)]) == 0
    assert "never" in capsys.readouterr().out


def test_plan_shows_the_read_the_overhead_and_the_ttft_of_an_l2_hit_apart(capsys: pytest.CaptureFixture[str]) -> None:
    """Three labelled rows (one label once held read + overhead), each the TTFT model's part, summing to the TTFT."""
    assert cli(["plan", "-e", "dev", "--config-dir", str(CONFIG_DIR), "--tokens", "1925"]) == 0
    rows = {line.strip().split("  ")[0]: line for line in capsys.readouterr().out.splitlines() if "  " in line}
    for label in ("L2 read of 1,925 tokens", "L2 hit overhead", "TTFT of an L2 hit", "TTFT, 1,925 tokens cold"):
        assert label in rows, sorted(rows)
    assert cli(["plan", "-e", "dev", "--config-dir", str(CONFIG_DIR), "--tokens", "1925", "--json"]) == 0
    (endpoint,) = json.loads(capsys.readouterr().out)["endpoints"]
    hit = endpoint["l2_hit"]
    assert hit["read_tokens"] == 1792  # whole 256-token chunks only: kvtier renders save_unfull_chunk false
    assert hit["overhead_seconds"] == endpoint["load"]["l2_hit_fixed_s"]
    parts = hit["read_seconds"] + hit["overhead_seconds"] + hit["prefill_seconds"]
    assert hit["ttft_seconds"] == pytest.approx(parts)
    assert hit["speedup"] == pytest.approx(endpoint["recompute"]["seconds"] / hit["ttft_seconds"])
    assert f"{hit['read_seconds'] * 1000:.1f} ms ({hit['read_tokens']:,} tokens)" in rows["L2 read of 1,925 tokens"]
