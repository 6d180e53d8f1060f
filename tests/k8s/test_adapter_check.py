"""The adapter check an engine pod runs before vLLM (issue 35; kvtier/k8s/scripts/adapter_check.py), run exactly as
shipped (`python3 -c <script>`) over adapter folders: one line per problem and exit 1, never a silent start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtier.config.loader import Config
from kvtier.k8s.adapters import CHECK_CONTAINER, check_spec
from kvtier.k8s.scripts import ADAPTER_CHECK, script_text
from kvtier.k8s.scripts.adapter_check import SPEC_VAR
from kvtier.k8s.standalone import engine_deployment
from kvtier.rules import load_checked
from tests.config.test_adapters import with_adapters

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _adapter(root: Path, name: str, **config: Any) -> dict[str, Any]:
    path = root / name
    path.mkdir(parents=True)
    settings = {"peft_type": "LORA", "r": 8, "base_model_name_or_path": MODEL} | config
    (path / "adapter_config.json").write_text(json.dumps({k: v for k, v in settings.items() if v is not None}))
    (path / "adapter_model.safetensors").write_bytes(b"weights")
    return {"name": name, "path": str(path), "source": f"s3://acme/{name}/ (weights_version v1)", "rank": 8,
            "base_model": MODEL}  # fmt: skip


def _run(spec: list[dict[str, Any]] | str) -> subprocess.CompletedProcess[str]:
    env = {SPEC_VAR: spec if isinstance(spec, str) else json.dumps(spec)}
    return subprocess.run(
        [sys.executable, "-c", script_text(ADAPTER_CHECK)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_good_adapters_pass(tmp_path: Path) -> None:
    done = _run([_adapter(tmp_path, "faq"), _adapter(tmp_path, "local", base_model_name_or_path="/models/base")])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "kvtier: adapters ready: faq, local"


def _missing(root: Path) -> dict[str, Any]:
    spec = _adapter(root, "faq")
    (Path(spec["path"]) / "adapter_config.json").unlink()
    return spec


def _no_weights(root: Path) -> dict[str, Any]:
    spec = _adapter(root, "faq")
    (Path(spec["path"]) / "adapter_model.safetensors").unlink()
    return spec


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_missing, "kvtier: adapter faq: no adapter_config.json in "),
        (_no_weights, "kvtier: adapter faq: s3://acme/faq/ (weights_version v1) has adapter_config.json but no"),
        (lambda root: _adapter(root, "faq", r=32), "kvtier: adapter faq: its rank is 32 (adapter_config.json r"),
        (
            lambda root: _adapter(root, "faq", rank_pattern={"q_proj": 16}),
            "kvtier: adapter faq: its rank is 16 (adapter_config.json r and rank_pattern), the config says 8",
        ),
        (
            lambda root: _adapter(root, "faq", base_model_name_or_path="Qwen/Qwen3-8B"),
            f"kvtier: adapter faq was trained on Qwen/Qwen3-8B (adapter_config.json base_model_name_or_path), not "
            f"the endpoint's model {MODEL}",
        ),
        (lambda root: _adapter(root, "faq", peft_type="IA3"), "kvtier: adapter faq: s3://acme/faq/ (weights_version"),
    ],
)
def test_each_bad_adapter_is_one_line_and_stops_the_pod(tmp_path: Path, make: Any, expected: str) -> None:
    done = _run([make(tmp_path)])
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
    assert "Traceback" not in done.stderr


def test_a_base_model_named_in_the_config_is_trusted(tmp_path: Path) -> None:
    spec = _adapter(tmp_path, "faq", base_model_name_or_path="unsloth/llama-3.1-8b-instruct") | {"base_model": None}
    assert _run([spec]).returncode == 0


def test_a_pod_rendered_without_kvtier_stops_with_one_line() -> None:
    done = _run("not json")
    assert done.returncode == 1 and done.stderr.startswith(f"kvtier: {SPEC_VAR} is missing or not JSON")


def test_the_rendered_check_compares_what_the_config_says(config_copy: Path) -> None:
    with_adapters(config_copy)
    config: Config = load_checked(config_copy, "prod")
    endpoint = config.lob("support").endpoints[0]
    pod = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["spec"]
    check = pod["initContainers"][-1]
    assert check["name"] == CHECK_CONTAINER and check["command"][:2] == ["python3", "-c"]
    spec = json.loads(next(e["value"] for e in check["env"] if e["name"] == SPEC_VAR))
    assert spec == check_spec(endpoint)
    # faq names no base model: compared with the endpoint's; billing names it in the config: trusted
    assert [(a["name"], a["rank"], a["base_model"]) for a in spec] == [("faq", 8, MODEL), ("billing", 16, None)]
