"""`kvtier verify`: the pure checks on stored objects (healthy and broken), agreement with the charts, the CLI's exit
codes, and the reading layer's failures (exit 3)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from kvtier.cli import main as cli
from kvtier.config.loader import Config
from kvtier.connectors import l2_subdir
from kvtier.connectors.lmcache import LMCACHE, rewire_env
from kvtier.errors import UnavailableError
from kvtier.k8s.operator_endpoint import worker_env
from kvtier.k8s.placement import node_selector
from kvtier.k8s.standalone import engine_deployment
from kvtier.ops import kube
from kvtier.ops.verify import Finding, Snapshot, pod_problems, verify
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, lmcache_config_map

FIXTURES = Path(__file__).parent / "fixtures" / "verify"


def _snapshot(name: str) -> Snapshot:
    return Snapshot.from_json(json.loads((FIXTURES / f"{name}.json").read_text()))


@pytest.fixture(scope="module")
def dev() -> Config:
    return load_checked(CONFIG_DIR, "dev")


def _problems(findings: tuple[Finding, ...]) -> dict[str, str]:
    return {f.subject: f.message for f in findings if not f.ok}


def test_healthy_cluster_passes_every_check(dev: Config) -> None:
    report = verify(dev, _snapshot("healthy"))
    assert report.ok, _problems(report.findings)
    assert int(report.exit_code) == 0
    checks = {f.check for f in report.findings}
    assert checks == {"endpoint", "curvine", "l2-volume", "kyverno"}
    # Both live endpoint pods checked; the evicted pod and the janitor's finished pod are not endpoint pods.
    assert len([f for f in report.findings if f.check == "endpoint"]) == 2
    assert len([f for f in report.findings if f.subject.startswith("worker on ")]) == 2
    assert len([f for f in report.findings if f.subject.startswith("L2 mounts on ") and f.ok]) == 2


def test_broken_cluster_reports_each_silent_failure(dev: Config) -> None:
    report = verify(dev, _snapshot("broken"))
    assert not report.ok
    assert int(report.exit_code) == 1
    problems = _problems(report.findings)
    first = problems["retail/qwen3-8b pod qwen3-8b-7d9f8c6b5-k2x9p"]
    assert "2 LMCACHE_REMOTE_URL entries" in first and "sagemaker-hyperpod://" in first
    second = problems["retail/qwen3-8b pod qwen3-8b-7d9f8c6b5-m4q7z"]
    assert f"not this endpoint's L2 directory '{LMCACHE.l2_url(dev.lobs[0].endpoints[0])}'" in second
    assert "not mounted once at /mnt/kvtier/l2" in second
    assert "PYTHONHASHSEED is not set" in second
    assert "LMCACHE_REMOTE_SERDE is 'cachegen'" in second
    assert problems["masters"] == "0 of 1 masters ready"
    assert problems["worker on hyperpod-i-0a1b2c3d4e5f60004"].startswith("0 workers")
    assert problems["kvtier-retail/l2-cache"] == "Pending"
    assert "matchConditions require" in problems["kvtier-retail/kvtier-l2-curvine"]
    # The healer on ...0003 is not Ready: a mount there did not answer; ...0004 has no healer at all.
    assert problems["L2 mounts on hyperpod-i-0a1b2c3d4e5f60003"].startswith("an L2 mount is on a dead FUSE")
    assert "kubectl -n curvine logs kvtier-l2-healer-a0x7k" in problems["L2 mounts on hyperpod-i-0a1b2c3d4e5f60003"]
    assert problems["L2 mounts on hyperpod-i-0a1b2c3d4e5f60004"].startswith("no kvtier-l2-healer pod")
    assert len(problems) == 8


def test_missing_objects_are_problems_not_passes(dev: Config) -> None:
    empty = verify(dev, Snapshot())
    problems = _problems(empty.findings)
    assert "retail/qwen3-8b" in problems  # no endpoint pod at all
    assert "no node matches the GPU selector kvtier.io/role=gpu" in problems["workers"]
    assert problems["kvtier-retail/l2-cache"] == "the claim does not exist"
    assert problems["kvtier-retail/kvtier-l2-curvine"].startswith("missing")


def test_a_worker_outside_the_gpu_nodes_is_reported(dev: Config) -> None:
    data = json.loads((FIXTURES / "healthy.json").read_text())
    stray = copy.deepcopy(next(p for p in data["pods"] if p["metadata"]["name"] == "curvine-worker-5xk2d"))
    stray["metadata"]["name"] = "curvine-worker-zzzzz"
    stray["spec"]["nodeName"] = "hyperpod-i-0a1b2c3d4e5f60001"
    data["pods"].append(stray)
    assert "outside the GPU selector" in _problems(verify(dev, Snapshot.from_json(data)).findings)["stray workers"]


def test_an_existing_cluster_is_checked_with_the_owners_selector() -> None:
    byoc = load_checked(CONFIG_DIR, "byoc")
    data = json.loads((FIXTURES / "healthy.json").read_text())
    gpu = node_selector(byoc.env, "gpu")
    for node in data["nodes"]:
        labels = node["metadata"]["labels"]
        del labels["kvtier.io/role"]  # an owner's nodes carry no kvtier label
        if labels["sagemaker.amazonaws.com/instance-group-name"] == "gpu":
            labels.update(gpu)
    report = verify(byoc, Snapshot.from_json(data))
    assert report.ok, _problems(report.findings)
    dev_view = verify(load_checked(CONFIG_DIR, "dev"), Snapshot.from_json(data))
    assert "no node matches the GPU selector" in _problems(dev_view.findings)["workers"]


# ---- the checks agree with the charts ------------------------------------------------------------------------------


def _pod(containers: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "kvtier-retail"},
        "spec": {"containers": containers, "volumes": volumes},
    }


def test_an_operator_pod_as_the_kyverno_policy_leaves_it_passes(dev: Config) -> None:
    endpoint = dev.lobs[0].endpoints[0]
    env = {e["name"]: e for e in worker_env("retail", endpoint)}
    env["LMCACHE_REMOTE_URL"] = {"name": "LMCACHE_REMOTE_URL", "value": "sagemaker-hyperpod://$(NODE_IP):9200"}
    env.update({e["name"]: e for e in rewire_env(l2_subdir(endpoint))})  # strategic merge: env entries by name
    container = {
        "name": endpoint.name,
        "env": list(env.values()),
        "volumeMounts": [{"name": "kvtier-l2", "mountPath": "/mnt/kvtier/l2"}],
    }
    volumes = [{"name": "kvtier-l2", "persistentVolumeClaim": {"claimName": "l2-cache"}}]
    assert pod_problems(endpoint, _pod([container], volumes)) == []
    # Before the policy ran: the operator's URL, no mount.
    operator_url = {"name": "LMCACHE_REMOTE_URL", "value": "sagemaker-hyperpod://$(NODE_IP):9200"}
    before = dict(container, env=[*worker_env("retail", endpoint), operator_url], volumeMounts=[])
    problems = pod_problems(endpoint, _pod([before], []))
    assert len(problems) == 2 and "not this endpoint's L2 directory" in problems[0]


def test_a_pod_left_on_an_old_identity_is_reported(dev: Config) -> None:
    """After a model change, a pod still writing the old model's directory is not this endpoint's L2 any more."""
    endpoint = dev.lobs[0].endpoints[0]
    old = endpoint.model_copy(update={"model": endpoint.model.model_copy(update={"revision": "b" * 40})})
    env = {e["name"]: e for e in [*worker_env("retail", old), *rewire_env(l2_subdir(old))]}  # as the Policy left it
    container = {
        "name": endpoint.name,
        "env": list(env.values()),
        "volumeMounts": [{"name": "kvtier-l2", "mountPath": "/mnt/kvtier/l2"}],
    }
    volumes = [{"name": "kvtier-l2", "persistentVolumeClaim": {"claimName": "l2-cache"}}]
    assert pod_problems(old, _pod([container], volumes)) == []
    (problem,) = pod_problems(endpoint, _pod([container], volumes))
    assert LMCACHE.l2_url(old) in problem and LMCACHE.l2_url(endpoint) in problem and "current identity" in problem


def test_a_standalone_pod_as_the_chart_renders_it_passes(dev: Config) -> None:
    endpoint = dev.lobs[0].endpoints[0].model_copy(update={"mode": "standalone"})
    pod = engine_deployment(dev.env, "retail", endpoint)["spec"]["template"]
    assert pod_problems(endpoint, pod, [lmcache_config_map("retail", endpoint)]) == []
    serde = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "LMCACHE_REMOTE_SERDE")
    serde["value"] = "cachegen"
    assert pod_problems(endpoint, pod, []) == [
        "LMCACHE_REMOTE_SERDE is 'cachegen', not 'naive' (other serdes do not store through remote connectors)"
    ]


def test_a_pod_rendered_before_issue_34_is_read_through_its_file(dev: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod from before the settings moved into the pod template reads them from its ConfigMap file."""
    monkeypatch.setenv("KVTIER_ROLLOUT_BREAK", "1")  # the old rendering
    endpoint = dev.lobs[0].endpoints[0].model_copy(update={"mode": "standalone"})
    pod = engine_deployment(dev.env, "retail", endpoint)["spec"]["template"]
    configmap = lmcache_config_map("retail", endpoint)
    assert pod_problems(endpoint, pod, [configmap]) == []
    # The file says another endpoint's directory: caught through LMCACHE_CONFIG_FILE.
    wrong = copy.deepcopy(configmap)
    key = next(iter(wrong["data"]))
    wrong["data"][key] = wrong["data"][key].replace("/qwen3-8b/", "/other/")
    assert "not this endpoint's L2 directory" in pod_problems(endpoint, pod, [wrong])[0]
    # A variable overrides the file (LMCache's precedence): a wrong serde there is caught.
    container = pod["spec"]["containers"][0]
    container["env"].append({"name": "LMCACHE_REMOTE_SERDE", "value": "cachegen"})
    assert pod_problems(endpoint, pod, [configmap]) == [
        "LMCACHE_REMOTE_SERDE is 'cachegen', not 'naive' (other serdes do not store through remote connectors)"
    ]
    assert "ConfigMap qwen3-8b-lmcache" in pod_problems(endpoint, pod, [])[0]


# ---- the CLI and the reading layer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("fixture", "code"), [("healthy", 0), ("broken", 1)])
def test_cli_exit_codes_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fixture: str, code: int
) -> None:
    monkeypatch.setattr(kube, "read_snapshot", lambda _config, _context=None: _snapshot(fixture))
    assert cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR), "--json"]) == code
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is (code == 0)
    assert all({"check", "subject", "ok", "message"} <= set(f) for f in out["findings"])


def test_cli_table_names_the_problems(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kube, "read_snapshot", lambda _config, _context=None: _snapshot("broken"))
    assert cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR)]) == 1
    assert "8 problem(s)" in capsys.readouterr().out


def test_no_kubeconfig_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR)]) == 3
    assert "no usable kubeconfig" in capsys.readouterr().err


class _Response:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = json.dumps(data).encode()


def _raise(err: Exception) -> Any:
    def call() -> Any:
        raise err

    return call


def test_reading_maps_api_failures() -> None:
    assert kube.list_items(lambda: _Response({"items": [{"kind": "Pod"}]}), "pods") == [{"kind": "Pod"}]
    assert kube.list_items(_raise(ApiException(status=404, reason="Not Found")), "policies", missing_ok=True) == []
    with pytest.raises(UnavailableError, match="refused to list pods"):
        kube.list_items(_raise(ApiException(status=403, reason="Forbidden")), "pods")
    with pytest.raises(UnavailableError, match="does not answer"):
        kube.list_items(_raise(MaxRetryError(None, "https://api.example", "connection refused")), "pods")  # type: ignore[arg-type]
    with pytest.raises(UnavailableError, match="failed"):
        kube.list_items(_raise(ApiException(status=404, reason="Not Found")), "pods")


def test_a_pod_of_vllms_own_connector_as_the_chart_renders_it_passes(dev: Config) -> None:
    """`cache.connector: vllm`: no LMCache URL to check; the fs tier's directory, hash algorithm and seed instead."""
    lmcache = dev.lobs[0].endpoints[0].model_copy(update={"mode": "standalone"})
    endpoint = lmcache.model_copy(update={"cache": lmcache.cache.model_copy(update={"connector": "vllm"})})
    pod = engine_deployment(dev.env, "retail", endpoint)["spec"]["template"]
    assert pod_problems(endpoint, pod) == []
    # A pod of the LMCache build of the same endpoint (before the connector change) is on another directory.
    old_pod = engine_deployment(dev.env, "retail", lmcache)["spec"]["template"]
    problems = pod_problems(endpoint, old_pod)
    assert any("--kv-transfer-config is" in p and "current identity directory" in p for p in problems), problems
    assert any("LMCache settings on a pod of vLLM's connector" in p for p in problems), problems
    container = pod["spec"]["containers"][0]
    container["args"] = [a for a in container["args"] if a not in ("--prefix-caching-hash-algo", "sha256")]
    container["env"] = [e for e in container["env"] if e["name"] != "PYTHONHASHSEED"]
    problems = pod_problems(endpoint, pod)
    assert len(problems) == 2 and "--prefix-caching-hash-algo is unset" in problems[0], problems
    assert "PYTHONHASHSEED" in problems[1], problems
