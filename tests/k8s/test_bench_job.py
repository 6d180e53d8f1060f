"""The in-cluster benchmark Job: valid Kubernetes 1.34, on system nodes, settings from config, a target that can be
overridden; and its wrapper script run for real against a local server with a stand-in `vllm`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kvtier.bench.testserver import free_port
from kvtier.config.bench import BenchConfig
from kvtier.config.endpoint import Endpoint, HuggingFaceModel
from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.bench_job import (
    BENCH_IMAGE,
    add_bench_job,
    bench_job,
    default_target_url,
    wrapper_script,
)
from kvtier.k8s.endpoint_names import endpoint_url, router_service_name
from kvtier.k8s.placement import placement
from kvtier.naming import lob_namespace
from kvtier.rules import load_checked
from kvtier.versions import STANDALONE_VLLM_IMAGE
from tests.support import CONFIG_DIR
from tests.validation import validate_k8s

LOB = "support"


@pytest.fixture(scope="module")
def env_and_endpoint() -> tuple[Environment, Endpoint]:
    config = load_checked(CONFIG_DIR, "prod")
    endpoint = config.lobs[0].endpoints[0]
    return config.env, _with(endpoint, bench=BenchConfig(enabled=True), mode="standalone")


def _with(endpoint: Endpoint, **update: Any) -> Endpoint:
    return endpoint.model_copy(update=update)


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def _arg(job: dict[str, Any], flag: str) -> str:
    args: list[str] = _container(job)["args"]
    return args[args.index(flag) + 1]


def _env(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(job)["env"]}


def test_job_is_valid_and_on_system_nodes(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    chart = KvtierChart(chart_app(), "bench", namespace=lob_namespace(LOB))
    assert add_bench_job(chart, env, LOB, endpoint) is not None
    [job] = chart.manifests()
    validate_k8s(job)
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == lob_namespace(LOB)
    pod = job["spec"]["template"]["spec"]
    system = placement(env, "system").pod_spec()
    assert pod["nodeSelector"] == system["nodeSelector"]
    assert pod.get("tolerations") == system.get("tolerations")
    assert pod["restartPolicy"] == "Never"
    assert _container(job)["image"] == BENCH_IMAGE == STANDALONE_VLLM_IMAGE
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["kvtier.io/component"] == "bench" and labels["kvtier.io/endpoint"] == endpoint.name
    # quota-friendly: explicit requests and limits for CPU and memory
    resources = _container(job)["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


def test_settings_come_from_config(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    bench = BenchConfig(
        enabled=True, num_prompts=120, request_rate=2.5, prefix_len=1024, suffix_len=128, num_prefixes=12, output_len=32
    )
    job = bench_job(env, LOB, _with(endpoint, bench=bench))
    assert _arg(job, "--dataset-name") == "prefix_repetition"
    assert _arg(job, "--num-prompts") == "120"
    assert _arg(job, "--request-rate") == "2.5"
    assert _arg(job, "--prefix-repetition-prefix-len") == "1024"
    assert _arg(job, "--prefix-repetition-suffix-len") == "128"
    assert _arg(job, "--prefix-repetition-num-prefixes") == "12"
    assert _arg(job, "--prefix-repetition-output-len") == "32"
    assert _arg(job, "--model") == endpoint.model.id
    infinite = bench_job(env, LOB, _with(endpoint, bench=BenchConfig(enabled=True, request_rate=float("inf"))))
    assert _arg(infinite, "--request-rate") == "inf"


def test_target_defaults_per_mode_and_overrides(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    standalone = bench_job(env, LOB, endpoint)
    expected = f"http://{router_service_name(endpoint.name)}.{lob_namespace(LOB)}.svc.cluster.local:80"
    assert default_target_url(LOB, endpoint) == expected
    assert _arg(standalone, "--base-url") == _env(standalone)["KVTIER_BENCH_TARGET"] == expected
    operator = bench_job(env, LOB, _with(endpoint, mode="operator"))
    assert _arg(operator, "--base-url") == endpoint_url(LOB, endpoint.name, "operator")
    configured = _with(endpoint, bench=BenchConfig(enabled=True, target_url="http://router.example.svc:8081/"))
    assert _arg(bench_job(env, LOB, configured), "--base-url") == "http://router.example.svc:8081"
    assert _arg(bench_job(env, LOB, configured, target_url="http://x:1"), "--base-url") == "http://x:1"


def test_disabled_adds_nothing(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    chart = KvtierChart(chart_app(), "bench", namespace=lob_namespace(LOB))
    assert add_bench_job(chart, env, LOB, _with(endpoint, bench=BenchConfig())) is None
    assert chart.manifests() == []


def test_name_follows_the_spec(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    """The pod template is immutable: a changed setting must make a new Job, an unchanged one the same Job."""
    env, endpoint = env_and_endpoint
    name = bench_job(env, LOB, endpoint)["metadata"]["name"]
    assert name == bench_job(env, LOB, endpoint)["metadata"]["name"]
    changed = _with(endpoint, bench=BenchConfig(enabled=True, num_prompts=400))
    assert bench_job(env, LOB, changed)["metadata"]["name"] != name
    assert name.startswith(f"{endpoint.name}-bench-")
    longest = _with(endpoint, name="e" * 28)
    assert len(bench_job(env, LOB, longest)["metadata"]["name"]) <= 63


def test_token_secret_reaches_the_tokenizer_download(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    model = HuggingFaceModel(source="huggingface", id="meta-llama/Llama-3.1-8B-Instruct", token_secret="hf-token")
    job = bench_job(env, LOB, _with(endpoint, model=model))
    assert _env(job)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    validate_k8s(job)


def test_prompts_longer_than_the_model_fail(env_and_endpoint: tuple[Environment, Endpoint]) -> None:
    env, endpoint = env_and_endpoint
    too_long = _with(endpoint, max_model_len=1024, bench=BenchConfig(enabled=True, prefix_len=1024))
    with pytest.raises(ValueError, match="exceeds max_model_len 1024"):
        bench_job(env, LOB, too_long)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_prompts": 5, "num_prefixes": 10}, "cannot cover 10 prefixes"),
        ({"target_url": "ftp://router"}, "not a base URL"),
        ({"target_url": "http://router/v1"}, "without a path"),
        ({"request_rate": 0.0}, "greater than 0"),
        ({"num_prompts": "200"}, "valid integer"),  # strict: no string coercion
        ({"surprise": 1}, "Extra inputs"),
    ],
)
def test_bench_config_rejects(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BenchConfig.model_validate({"enabled": True, **fields})


# --- the wrapper script, run with this Python and a stand-in `vllm` ---------------------------------------------


def _fake_vllm(tmp_path: Path, exit_code: int) -> Path:
    script = tmp_path / "vllm"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, os\n"
        f"os.makedirs({str(tmp_path / 'results')!r}, exist_ok=True)\n"
        f"json.dump({{'argv': sys.argv[1:]}}, open({str(tmp_path / 'results' / 'r.json')!r}, 'w'))\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _run_wrapper(tmp_path: Path, target: str, wait_s: float, exit_code: int = 0) -> subprocess.CompletedProcess[str]:
    code = wrapper_script(vllm=str(_fake_vllm(tmp_path, exit_code)), result_dir=str(tmp_path / "results"))
    env = {"PATH": os.environ.get("PATH", ""), "KVTIER_BENCH_TARGET": target, "KVTIER_BENCH_WAIT_S": str(wait_s)}
    env["no_proxy"] = env["NO_PROXY"] = "*"  # urllib must not send 127.0.0.1 through a proxy
    return subprocess.run(
        [sys.executable, "-c", code, "--num-prompts", "3"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_wrapper_discovers_the_served_name_and_prints_the_result(tmp_path: Path) -> None:
    from kvtier.bench.testserver import Behaviour, FakeCluster

    with FakeCluster(1, Behaviour(model="served/name")) as c:
        done = _run_wrapper(tmp_path, c.urls[0], wait_s=5, exit_code=3)
    assert done.returncode == 3, done.stderr  # vllm's exit code is the Job's
    line = next(x for x in done.stdout.splitlines() if x.startswith("kvtier-bench-result "))
    argv = json.loads(line.removeprefix("kvtier-bench-result "))["argv"]
    assert argv == ["bench", "serve", "--num-prompts", "3", "--served-model-name", "served/name"]


def test_wrapper_gives_up_loudly_on_a_dead_target(tmp_path: Path) -> None:
    port = free_port()
    done = _run_wrapper(tmp_path, f"http://127.0.0.1:{port}", wait_s=0.2)
    assert done.returncode == 1
    assert f"http://127.0.0.1:{port} was not ready within 0.2 s" in done.stderr
    assert not (tmp_path / "results").exists()  # vllm never ran
