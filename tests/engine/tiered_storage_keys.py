"""HyperPod Tiered Storage keys from LMCache's own code, fed kvtier's rendered operator settings (issue 34).

Tiered Storage is one key space for the whole cluster, and every operator pod runs `--model /opt/ml/model`, so what
keeps two endpoints apart is what kvtier renders into the worker's environment. For each rendering below, one process
of the engine venv's python runs lmcache_keys.py with exactly that environment (plus the `LMCACHE_REMOTE_URL` the
operator injects) and LMCache `OPERATOR_LMCACHE_VERSION` first on its path, installed from PyPI with pip --no-deps
into a cached folder (requirements-operator-lmcache.txt, router_install.ensure). Not a venv of its own: LMCache's key
code imports torch and transformers, and takes its chain's seed NONE_HASH from vLLM's `init_none_hash` (without vLLM
it is 0 and no seed reaches the key), which the engine venv has. Its vLLM is 0.32.0, not the operator image's 0.11.1:
both derive NONE_HASH from the PYTHONHASHSEED string and neither offers LMCache's default "builtin" hash by name, so
LMCache hashes with Python's `hash` under both (docs/references.md "Issue 34").

LMCache 0.3.9.post2's chunk hash is `hash((prefix_hash, tokens, None))`, and CPython before 3.12 hashes None by its
address: on the engine venv's 3.11 every process would get other keys. The operator image runs 3.12 (its tag says
py312), where hash(None) is a constant; each process here runs with address randomisation off (`setarch -R`), which
makes it one value too, and the test checks that first.

The renderings: the example's retail endpoint moved to `l2: tieredstorage` (A), A again (a second replica), A with
another revision (other weights), A's facts in another LOB (another tenant) and search's own endpoint on Tiered
Storage. `KVTIER_TIERED_KEYS_BREAK=1` renders the shared seed of before issue 34: the disjointness checks then fail.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors.lmcache import TIERED_KEYS_BREAK, TIERED_STORAGE_SCHEME
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.rules import load_checked
from kvtier.versions import OPERATOR_LMCACHE_VERSION
from tests.engine import router_install
from tests.engine.scenario import REPO

LOCK = Path(__file__).resolve().parent / "requirements-operator-lmcache.txt"
SCRIPT = Path(__file__).resolve().parent / "lmcache_keys.py"
SMOKE = "import lmcache.v1.token_database, lmcache.v1.storage_backend.connector.sagemaker_hyperpod_adapter"
OPERATOR_URL = f"{TIERED_STORAGE_SCHEME}127.0.0.1:9200"  # what the operator injects: the node's daemon
KV_DTYPE = "bfloat16"  # the example models' own dtype (`dtype: auto`): the same for every rendering here
PROMPT_TOKENS = 1000
TIMEOUT_S = 300
BREAKS = ("1",)


@dataclass(frozen=True)
class Keys:
    """What LMCache built for one rendering."""

    name: str
    seed: str  # the PYTHONHASHSEED kvtier rendered
    lmcache: str
    lmcache_file: str
    none_hash: int
    hash_of_none: int
    hash_func: str
    chunk_size: int
    bucket: str
    paths: tuple[str, ...]  # the daemon's `/v1/kv/<bucket>/<quoted key>` of each chunk


@dataclass
class KeysObserved:
    keys: dict[str, Keys] = field(default_factory=dict)
    full_chunks: int = 0
    timings_s: dict[str, float] = field(default_factory=dict)


def _tiered(endpoint: Endpoint) -> Endpoint:
    return endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update={"l2": "tieredstorage"})})


def renderings(config: Config) -> dict[str, tuple[str, Endpoint]]:
    """name -> (LOB, endpoint), each rendered as an operator endpoint on Tiered Storage."""
    a = _tiered(config.lob("retail").endpoints[0])
    revised = a.model_copy(update={"model": a.model.model_copy(update={"revision": "c" * 40})})
    return {
        "A": ("retail", a),
        "A (second replica)": ("retail", a),
        "A, new revision": ("retail", revised),
        "A's facts, another LOB": ("search", a),
        "search's endpoint": ("search", _tiered(config.lob("search").endpoints[0])),
    }


def worker(config: Config, lob: str, endpoint: Endpoint) -> tuple[list[str], dict[str, str]]:
    """The worker's argv and environment as the operator starts it: kvtier's IEC, plus the operator's L2 URL."""
    spec = inference_endpoint_config(config.env, lob, endpoint)["spec"]["worker"]
    env = {v["name"]: str(v["value"]) for v in spec["environmentVariables"] if "value" in v}
    return list(spec["args"]), env | {"LMCACHE_REMOTE_URL": OPERATOR_URL}


def run_keys(python: str, site: Path, name: str, args: list[str], env: dict[str, str], tokens: list[int]) -> Keys:
    base = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
    request = json.dumps({"args": args, "tokens": tokens, "rank": 0, "kv_dtype": KV_DTYPE})
    done = subprocess.run(
        ["setarch", platform.machine(), "-R", python, str(SCRIPT)],
        input=request,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=base | env | {"PYTHONPATH": str(site), "LMCACHE_TRACK_USAGE": "false"},
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"{name}: LMCache's key code exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return Keys(
        name,
        env["PYTHONHASHSEED"],
        out["lmcache"],
        out["lmcache_file"],
        out["none_hash"],
        out["hash_of_none"],
        out["hash_func"],
        out["chunk_size"],
        out["bucket"],
        tuple(out["paths"]),
    )


@contextmanager
def broken(what: str | None) -> Any:
    if what is None:
        yield
        return
    if what not in BREAKS:
        raise ValueError(f"{TIERED_KEYS_BREAK}={what!r}: use one of {', '.join(BREAKS)}")
    saved = os.environ.get(TIERED_KEYS_BREAK)
    os.environ[TIERED_KEYS_BREAK] = what
    try:
        yield
    finally:
        if saved is None:
            del os.environ[TIERED_KEYS_BREAK]
        else:
            os.environ[TIERED_KEYS_BREAK] = saved


def tiered_storage_keys(python: str, break_what: str | None) -> KeysObserved:
    import time

    observed = KeysObserved()
    started = time.monotonic()
    site = router_install.ensure(python, LOCK, name="operator-lmcache", smoke_code=SMOKE)
    observed.timings_s["install"] = time.monotonic() - started
    config = load_checked(REPO / "config", "prod")
    rng = random.Random("kvtier-tiered-storage-keys")
    tokens = [rng.randrange(3, 150_000) for _ in range(PROMPT_TOKENS)]
    started = time.monotonic()
    with broken(break_what):
        rendered = {name: worker(config, lob, e) for name, (lob, e) in renderings(config).items()}
    for name, (args, env) in rendered.items():
        observed.keys[name] = run_keys(python, site, name, args, env, tokens)
    observed.timings_s["keys"] = time.monotonic() - started
    chunk = next(iter(observed.keys.values())).chunk_size
    observed.full_chunks = PROMPT_TOKENS // chunk
    return observed


# ---- checks (each can fail: test_tiered_storage_keys.py shows them on keys that collide) -------------------------


def ran_the_assumed_lmcache(observed: KeysObserved, site_marker: str = "operator-lmcache-") -> None:
    for keys in observed.keys.values():
        assert keys.lmcache == OPERATOR_LMCACHE_VERSION, f"{keys.name}: LMCache {keys.lmcache} ran"
        assert site_marker in keys.lmcache_file, f"{keys.name}: LMCache came from {keys.lmcache_file}"
        assert keys.hash_func == "hash", f"{keys.name}: LMCache hashed with {keys.hash_func}, not Python's hash"
        assert keys.none_hash != 0, f"{keys.name}: NONE_HASH is 0: vLLM's init_none_hash did not seed the chain"
        assert keys.bucket == "lmcache", f"{keys.name}: bucket {keys.bucket!r}, not LMCache's default"


def processes_hash_none_alike(observed: KeysObserved) -> None:
    """The precondition that stands in for CPython 3.12 (see the module docstring)."""
    values = {keys.hash_of_none for keys in observed.keys.values()}
    assert len(values) == 1, f"hash(None) differs between processes ({sorted(values)}): setarch -R did not take"


def every_full_chunk_has_a_key(observed: KeysObserved) -> None:
    for keys in observed.keys.values():
        assert len(keys.paths) == observed.full_chunks, f"{keys.name}: {len(keys.paths)} keys"


def replicas_share_their_keys(observed: KeysObserved) -> None:
    a, b = observed.keys["A"], observed.keys["A (second replica)"]
    assert a.seed == b.seed and a.paths == b.paths, (
        f"two replicas of one endpoint built different keys (seeds {a.seed}, {b.seed}): no cross-replica L2 hit"
    )


def identities_never_share_a_key(observed: KeysObserved) -> None:
    a = set(observed.keys["A"].paths)
    for name, keys in observed.keys.items():
        if name in ("A", "A (second replica)"):
            continue
        shared = a & set(keys.paths)
        assert not shared, (
            f"{name} builds {len(shared)} of A's {len(a)} keys for the same tokens (seeds {observed.keys['A'].seed} and "
            f"{keys.seed}): it would be served A's KV"
        )
