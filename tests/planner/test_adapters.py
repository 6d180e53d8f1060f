"""`kvtier plan` for an endpoint with LoRA adapters (issue 35): the adapter slots in the GPU fit, and what L1 and L2
each adapter's share gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main as cli
from tests.config.test_adapters import with_adapters


def test_plan_shows_each_adapters_share_and_the_slots(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "-e", "prod", "--config-dir", str(config_copy), "--json"]) == 0
    before = {e["endpoint"]: e for e in json.loads(capsys.readouterr().out)["endpoints"]}
    with_adapters(config_copy)
    assert cli(["plan", "-e", "prod", "--config-dir", str(config_copy), "--json"]) == 0
    after = {e["endpoint"]: e for e in json.loads(capsys.readouterr().out)["endpoints"]}
    plain, lora = before["llama31-8b"], after["llama31-8b"]
    assert "adapters" not in plain
    shares = lora["adapters"]
    assert shares["names"] == ["faq", "billing"] and shares["key_spaces"] == 3
    assert shares["l1_tokens_per_share"] == lora["l1"]["tokens_per_replica"] // 3
    assert shares["l2_gb_per_share"] == pytest.approx(lora["l2"]["gb"] / 3)
    # vLLM's slots for max_loras 2 at rank 16 come out of the KV room on the GPU
    assert 0 < shares["lora_gib_per_gpu"] < 1
    assert lora["l0"]["kv_gib_per_gpu"] == pytest.approx(plain["l0"]["kv_gib_per_gpu"] - shares["lora_gib_per_gpu"])
