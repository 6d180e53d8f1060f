"""The engine test's launch settings, taken from what kvtier renders for a real endpoint of the example config.

Two renderings of one endpoint:
- `standalone`: the Deployment's vLLM container (args, env: LMCache's settings are `LMCACHE_*` variables) and the
  files of the ConfigMap it mounts (kvtier's connector module; kvtier/k8s/standalone.py);
- `operator`: the worker env kvtier gives the operator (kvtier/k8s/operator_endpoint.py::worker_env, kvtier/connectors/lmcache.py) with the
  per-LOB Kyverno Policy's mutation applied, merged by name as Kyverno's strategic merge does (kyverno_policy.py).

`localize` then turns a rendering into a process on this machine, changing only what cannot exist here, each change
listed in `MACHINE_FIT`: the L2 mount root becomes a shared temp folder (standing in for the Curvine mount), every
other absolute path a folder private to the engine (its container filesystem), the model a local tiny model, ports
free ones on 127.0.0.1, L1 1 GiB instead of a GPU node's, plus CPU-only vLLM flags. Anything else kvtier renders
(chunk size, serde, remote URL below the mount, hash seed, save_unfull_chunk, vLLM flags) is passed through as is.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvtier import serving
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import lmcache
from kvtier.sizing import EngineDisk

URL_PREFIX = "fs://localhost:0"
L1_GIB = 1  # pinned host memory per engine; the example's 24 GiB would not fit this machine next to other engines
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of vLLM paged KV on CPU
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "LMCACHE_TRACK_USAGE": "false",
}
CPU_BLOCK_MULTIPLE = 32  # vLLM-CPU's attention kernels take block sizes that are multiples of 32 (cpu_attn.py)
CPU_ARGS = ["--host", "127.0.0.1", "--enforce-eager", "--enable-prompt-tokens-details"]
MACHINE_FIT = (
    "--model: the local tiny model folder (the same string on every engine, as on every replica)",
    "--port/--host: a free port on 127.0.0.1",
    f"L2 mount root {serving.L2_MOUNT_PATH}: a shared temp folder standing in for the Curvine mount",
    "other absolute paths (config file, metrics and model caches): a folder private to each engine",
    f"max_local_cpu_size: {L1_GIB} GiB (the example's GPU-node L1 does not fit here)",
    f"--block-size: rounded up to a multiple of {CPU_BLOCK_MULTIPLE} (vLLM-CPU refuses 16; LMCache chunks by tokens)",
    "CPU-only: --enforce-eager, VLLM_CPU_KVCACHE_SPACE, offline Hugging Face, the test-only CPU copy adapter",
)


@dataclass(frozen=True)
class Rendered:
    """One engine container as kvtier renders it: args, plain env values and mounted files (container paths)."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)

    @property
    def lmcache(self) -> dict[str, Any]:
        """The LMCache settings the engine ends up with: the mounted file, then `LMCACHE_*` variables over it."""
        settings: dict[str, Any] = {}
        config_file = self.env.get("LMCACHE_CONFIG_FILE")
        if config_file is not None:
            settings |= yaml.safe_load(self.files[config_file]) or {}
        for name, value in self.env.items():
            if name.startswith(lmcache.ENV_PREFIX) and name not in ("LMCACHE_CONFIG_FILE", "LMCACHE_TRACK_USAGE"):
                settings[name.removeprefix(lmcache.ENV_PREFIX).lower()] = value
        return settings

    @property
    def l2_url(self) -> str:
        url = self.lmcache.get("remote_url")
        if not isinstance(url, str):
            raise AssertionError(f"{self.name}: kvtier rendered no LMCache remote_url")
        return url


def _plain_env(env: list[dict[str, Any]]) -> dict[str, str]:
    """Name -> value; `valueFrom` entries (secrets, pod name) have no value outside Kubernetes and are left out."""
    return {item["name"]: str(item["value"]) for item in env if "value" in item}


def endpoint_of(config: Config, lob: str, name: str) -> Endpoint:
    return next(e for e in config.lob(lob).endpoints if e.name == name)


def standalone(config: Config, lob: str, endpoint: Endpoint, disk: EngineDisk | None = None) -> Rendered:
    """`disk`: the engine's disk, for a model the catalog does not know (the LOB stack passes it the same way)."""
    from kvtier.k8s.standalone import engine_config_map, engine_deployment

    pod = engine_deployment(config.env, lob, endpoint, disk)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    files: dict[str, str] = {}
    config_maps = {v["configMap"]["name"]: v["name"] for v in pod["volumes"] if "configMap" in v}
    config_map = engine_config_map(lob, endpoint)  # none with vLLM's own connector
    volume = config_maps.get(config_map["metadata"]["name"]) if config_map is not None else None
    if config_map is not None and volume is not None:
        mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)
        for key, text in config_map["data"].items():
            files[f"{mount}/{key}"] = text
    return Rendered(f"standalone {lob}/{endpoint.name}", tuple(container["args"]), _plain_env(container["env"]), files)


def operator_pod(config: Config, lob: str, endpoint: Endpoint) -> Rendered:
    """The operator pod's vLLM container after the LOB's Kyverno Policy mutated it (the `app` label names the
    endpoint); args are the flags kvtier shares with the operator (`vllm_args`) after `--model`."""
    from kvtier.k8s.kyverno_policy import ENDPOINT_VAR, IDENTITY_VAR, l2_policy
    from kvtier.k8s.operator_endpoint import vllm_args, worker_env
    from kvtier.serving import L2_IDENTITY_VAR

    env = _plain_env(worker_env(lob, endpoint))
    # The policy's variables, as Kyverno resolves them: the pod's `app` label, and the container's identity variable.
    variables = {ENDPOINT_VAR: endpoint.name, IDENTITY_VAR: env.get(L2_IDENTITY_VAR, "")}
    policy = l2_policy(lob)
    mutate = next(r for r in policy["spec"]["rules"] if "mutate" in r)["mutate"]["foreach"][0]
    patch = mutate["patchStrategicMerge"]["spec"]["containers"][0]["env"]
    for item in patch:  # strategic merge of env: by name, replacing an existing entry
        value = str(item["value"])
        for variable, resolved in variables.items():
            value = value.replace(variable, resolved)
        env[item["name"]] = value
    args = ("--model", "/opt/ml/model", *vllm_args(endpoint))
    return Rendered(f"operator {lob}/{endpoint.name} (Kyverno-rewired)", args, env)


@dataclass(frozen=True)
class Launch:
    """One engine process: argv after `python -m vllm.entrypoints.openai.api_server`, its env and files to write."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    files: dict[Path, str]
    l2_dir: Path | None  # where its L2 files land on this machine (None: outside the shared mount)


class PathMap:
    """Container paths -> this machine: below the L2 mount -> the shared folder, anything else -> the engine's own."""

    def __init__(self, l2_root: Path, private_root: Path) -> None:
        self.l2_root = l2_root
        self.private_root = private_root

    def shared(self, path: str) -> bool:
        return path == serving.L2_MOUNT_PATH or path.startswith(serving.L2_MOUNT_PATH.rstrip("/") + "/")

    def __call__(self, path: str) -> Path:
        if self.shared(path):
            return self.l2_root / path[len(serving.L2_MOUNT_PATH) :].strip("/")
        return self.private_root / path.lstrip("/")

    def url(self, url: str) -> tuple[str, Path | None]:
        if not url.startswith(URL_PREFIX + "/"):
            raise AssertionError(f"kvtier rendered remote_url {url!r}, not an fs:// URL with host and port")
        path = url[len(URL_PREFIX) :]
        local = self(path)
        suffix = "/" if path.endswith("/") else ""
        return f"{URL_PREFIX}{local}{suffix}", (local if self.shared(path) else None)


def _replace_flag(args: list[str], flag: str, value: str) -> None:
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]


def localize(
    rendered: Rendered,
    *,
    l2_root: Path,
    private_root: Path,
    model_dir: Path,
    port: int,
    adapter_dir: Path,
    env_overrides: dict[str, str] | None = None,
    block_multiple: int = CPU_BLOCK_MULTIPLE,
    tiers: bool = True,
) -> Launch:
    """`rendered` as a process on this machine; only the `MACHINE_FIT` changes (plus `env_overrides`, which the
    test uses for the engine started with another PYTHONHASHSEED). `block_multiple`: the block sizes vLLM-CPU runs
    for the model's attention backend (its MLA backend: 16 only); `tiers=False`: no KV connector at all (the
    tiers-off reference of tests/engine/model_kinds.py), where an operator rendering would get LMCache's."""
    paths = PathMap(l2_root, private_root)
    args = list(rendered.args)
    _replace_flag(args, "--model", str(model_dir))
    _replace_flag(args, "--port", str(port))
    for flag in ("--revision", "--load-format"):  # hub revision / S3 streamer: the local folder has neither
        if flag in args:
            del args[args.index(flag) : args.index(flag) + 2]
    if "--block-size" in args:
        block = int(args[args.index("--block-size") + 1])
        _replace_flag(args, "--block-size", str(-(-block // block_multiple) * block_multiple))
    args += CPU_ARGS
    if tiers and "--kv-transfer-config" not in args:  # the operator adds LMCache's connector (operator-rendered pods)
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]

    env = dict(rendered.env)
    l2_dir: Path | None = None
    files: dict[Path, str] = {}
    url_key = lmcache.env_name("remote_url")
    for name, value in list(env.items()):
        if name == url_key:
            env[name], l2_dir = paths.url(value)
        elif value.startswith("/"):
            env[name] = str(paths(value))
    for path, text in rendered.files.items():
        if not path.endswith((".yaml", ".yml")):  # a shipped module (the LMCache connector): as rendered
            files[paths(path)] = text
            continue
        settings = yaml.safe_load(text) or {}
        if "remote_url" in settings:
            settings["remote_url"], l2_dir = paths.url(settings["remote_url"])
        if "max_local_cpu_size" in settings:
            settings["max_local_cpu_size"] = L1_GIB
        files[paths(path)] = yaml.safe_dump(settings, sort_keys=True)
    if lmcache.env_name("max_local_cpu_size") in env:
        env[lmcache.env_name("max_local_cpu_size")] = str(L1_GIB)
    # The test-only adapter first, then what kvtier puts on the path (the folder of its connector module).
    env |= CPU_ENV | {"PYTHONPATH": os.pathsep.join([str(adapter_dir), *filter(None, [env.get("PYTHONPATH")])])}
    env |= env_overrides or {}
    return Launch(rendered.name, tuple(args), env, files, l2_dir)


def with_env(rendered: Rendered, **values: str) -> Rendered:
    return Rendered(rendered.name, rendered.args, rendered.env | values, copy.deepcopy(rendered.files))
