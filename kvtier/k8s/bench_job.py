"""The in-cluster benchmark of an endpoint: a Job running `vllm bench serve` (dataset `prefix_repetition`) against
the endpoint's router, on system nodes, with settings from the endpoint's `bench` section.

Target: `bench.target_url` if set, else the endpoint's router as kvtier names it (kvtier.k8s.endpoint_names):
- standalone: our router Service, named after the endpoint (`router_service_name`):
  `http://<endpoint>.kvtier-<lob>.svc.cluster.local:80`;
- operator: kvtier's Service in front of the operator's router pods (label `app=<endpoint>-kvtier-<lob>-router`,
  port 8081). UNVERIFIED: the operator's own router Service name is not public (docs/references.md "Router target of the Job");
  if the URL is wrong, the Job fails loudly after waiting READY_WAIT_S for it, naming the URL.

A Job's pod template is immutable, so the Job's name carries a hash of its spec: changing a setting creates a new
Job (the old one is pruned with the chart) instead of failing the apply. A finished Job is kept (no TTL), so
re-applying an unchanged chart does not run it again; its log holds vLLM's summary and the result JSON.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import cdk8s

from kvtier.config.endpoint import Endpoint, HuggingFaceModel
from kvtier.config.environment import Environment
from kvtier.k8s.base import api_object
from kvtier.k8s.endpoint_names import COMPONENT_LABEL, ENDPOINT_LABEL, endpoint_url
from kvtier.k8s.placement import placement
from kvtier.k8s.security import container_security_context, pod_security_context, tmp_volume
from kvtier.naming import lob_namespace
from kvtier.versions import STANDALONE_VLLM_IMAGE

# The image only runs the client (`vllm bench serve`, vLLM 0.19.0 in lmcache/vllm-openai:v0.4.3,
# docs/references.md "`vllm bench serve`"); its entrypoint is `vllm serve`, so the command is replaced.
BENCH_IMAGE = STANDALONE_VLLM_IMAGE
PYTHON = "/opt/venv/bin/python"  # the image's uv venv (ENTRYPOINT /opt/venv/bin/vllm, same section)
VLLM = "/opt/venv/bin/vllm"
WORK_DIR = "/work"
RESULT_DIR = f"{WORK_DIR}/results"
READY_WAIT_S = 3600  # engines may take long to download and load a model after a deploy
ACTIVE_DEADLINE_S = READY_WAIT_S + 2 * 3600
COMPONENT = "bench"


def wrapper_script(vllm: str = VLLM, result_dir: str = RESULT_DIR) -> str:
    """Python run as the container command: wait for <target>/v1/models to list a model (5xx, no answer or an empty
    list: keep waiting up to KVTIER_BENCH_WAIT_S; 4xx: go on with the model id as the name), run `vllm bench serve`
    with the container args plus the served name, then print each result file so `kubectl logs` has it."""
    return f"""\
import glob, json, os, subprocess, sys, time, urllib.error, urllib.request
target = os.environ["KVTIER_BENCH_TARGET"]
wait_s = float(os.environ["KVTIER_BENCH_WAIT_S"])
deadline = time.monotonic() + wait_s
served = []
while True:
    try:
        with urllib.request.urlopen(target + "/v1/models", timeout=10) as resp:
            served = [m["id"] for m in json.load(resp).get("data", [])][:1]
        if served:
            break
        why = "no model listed yet"
    except urllib.error.HTTPError as err:
        if err.code < 500:
            print(f"kvtier bench: {{target}}/v1/models answered {{err.code}}; sending the model id", flush=True)
            break
        why = f"HTTP {{err.code}}"
    except Exception as err:
        why = str(err)
    if time.monotonic() > deadline:
        sys.exit(f"kvtier bench: {{target}} was not ready within {{wait_s:g}} s ({{why}}); check bench.target_url")
    print(f"kvtier bench: waiting for {{target}}: {{why}}", flush=True)
    time.sleep(min(15.0, max(deadline - time.monotonic(), 0.1)))
extra = ["--served-model-name", served[0]] if served else []
print("kvtier bench: running vllm bench serve against " + target + (" as " + served[0] if served else ""), flush=True)
code = subprocess.call([{vllm!r}, "bench", "serve", *sys.argv[1:], *extra])
for path in sorted(glob.glob(os.path.join({result_dir!r}, "*.json"))):
    with open(path) as f:
        print("kvtier-bench-result " + json.dumps(json.load(f)), flush=True)
sys.exit(code)
"""


def default_target_url(lob: str, endpoint: Endpoint) -> str:
    """The endpoint's router in its mode (standalone: our Service; operator: UNVERIFIED, see the module doc)."""
    return endpoint_url(lob, endpoint.name, endpoint.mode)


def bench_job_name(endpoint: str, spec: dict[str, Any]) -> str:
    """`<endpoint>-bench-<8 hex of the spec>` (28 + 15 characters, within 63)."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    return f"{endpoint}-bench-{digest}"


def bench_labels(endpoint: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kvtier-bench", ENDPOINT_LABEL: endpoint, COMPONENT_LABEL: COMPONENT}


def bench_args(lob: str, endpoint: Endpoint, target: str) -> list[str]:
    """Arguments of `vllm bench serve` (vLLM 0.19.0 flags, notes section 5)."""
    b = endpoint.bench
    return [
        "--backend", "openai",
        "--base-url", target,
        "--endpoint", "/v1/completions",
        "--model", endpoint.model.id,  # the tokenizer (from the Hugging Face Hub) and the default request name
        "--dataset-name", "prefix_repetition",
        "--prefix-repetition-prefix-len", str(b.prefix_len),
        "--prefix-repetition-suffix-len", str(b.suffix_len),
        "--prefix-repetition-num-prefixes", str(b.num_prefixes),
        "--prefix-repetition-output-len", str(b.output_len),
        "--num-prompts", str(b.num_prompts),
        "--request-rate", "inf" if b.request_rate == float("inf") else f"{b.request_rate:g}",
        "--ignore-eos",
        "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--ready-check-timeout-sec", "600",
        "--save-result",
        "--result-dir", RESULT_DIR,
        "--result-filename", f"{endpoint.name}.json",
        "--label", f"kvtier-{lob}-{endpoint.name}",
    ]  # fmt: skip


def bench_job(env: Environment, lob: str, endpoint: Endpoint, *, target_url: str | None = None) -> dict[str, Any]:
    """The Job body. `target_url` overrides `bench.target_url`, which overrides the default router URL."""
    b = endpoint.bench
    needed = b.prefix_len + b.suffix_len + b.output_len
    if needed > endpoint.max_model_len:
        raise ValueError(
            f"endpoint {endpoint.name}: bench prefix_len + suffix_len + output_len = {needed} exceeds max_model_len "
            f"{endpoint.max_model_len}; shorten the bench prompts"
        )
    target = (target_url or b.target_url or default_target_url(lob, endpoint)).rstrip("/")
    env_vars: list[dict[str, Any]] = [
        {"name": "KVTIER_BENCH_TARGET", "value": target},
        {"name": "KVTIER_BENCH_WAIT_S", "value": str(READY_WAIT_S)},
        {"name": "HOME", "value": WORK_DIR},
        {"name": "HF_HOME", "value": f"{WORK_DIR}/hf"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    model = endpoint.model
    if isinstance(model, HuggingFaceModel) and model.token_secret:  # gated tokenizers need the token
        env_vars.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": model.token_secret, "key": "token"}}}
        )
    labels = bench_labels(endpoint.name)
    tmp = tmp_volume()
    spec: dict[str, Any] = {
        "backoffLimit": 1,
        "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                **placement(env, "system").pod_spec(),
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                # The client writes only to its work volume and /tmp (HOME points at the work volume).
                "securityContext": pod_security_context(non_root=True),
                "containers": [
                    {
                        "name": "bench",
                        "image": BENCH_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [PYTHON, "-c", wrapper_script()],
                        "args": bench_args(lob, endpoint, target),
                        "env": env_vars,
                        "resources": {
                            # Counted in the LOB quota's system allowance (isolation.SYSTEM_ALLOWANCE_*).
                            "requests": {"cpu": "500m", "memory": "2Gi"},
                            "limits": {"cpu": "1", "memory": "4Gi"},
                        },
                        "securityContext": container_security_context(read_only_root=True),
                        "volumeMounts": [{"name": "work", "mountPath": WORK_DIR}, tmp[1]],
                    }
                ],
                "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "2Gi"}}, tmp[0]],
            },
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": bench_job_name(endpoint.name, spec),
            "namespace": lob_namespace(lob),
            "labels": labels,
        },
        "spec": spec,
    }


def add_bench_job(
    chart: cdk8s.Chart, env: Environment, lob: str, endpoint: Endpoint, *, target_url: str | None = None
) -> cdk8s.ApiObject | None:
    """Add the endpoint's benchmark Job to `chart` when `bench.enabled`; None (nothing added) otherwise."""
    if not endpoint.bench.enabled:
        return None
    return api_object(chart, f"bench-{endpoint.name}", bench_job(env, lob, endpoint, target_url=target_url))
