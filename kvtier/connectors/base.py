"""The L2 connector seam: what every connector module answers (design "L2 connectors").

A connector is the component that moves KV between vLLM and the tiers below the GPU: LMCache's `fs://` connector
(lmcache.py) or vLLM's own OffloadingConnector with an `fs` tier (vllm.py). Each module owns everything that differs
between them; charts, planner, simulator, rules, ops and bench ask `kvtier.connectors.connector_for(endpoint)` and
never compare the connector's name (tests/test_layers.py). Plain Python over the typed config: no cdk8s, no I/O.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvtier import serving
from kvtier.catalog import Model
from kvtier.config.endpoint import Endpoint, HuggingFaceModel
from kvtier.serving import L2_IDENTITY_CHARS

# vLLM's count of the prompt tokens its KV connector supplied, whichever connector it runs (every generation kvtier
# runs, docs/references.md "Signals per engine generation (issue 23)"): labels model_name, engine.
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
Env = list[dict[str, Any]]  # container env entries, as Kubernetes takes them
Obj = Mapping[str, Any]  # a Kubernetes object as the API returns it (JSON)


class UnsupportedError(ValueError):
    """Asked of a connector for something it refuses (its `refusals` say so first, in `kvtier validate`)."""


@dataclass(frozen=True)
class Refusal:
    """Why a connector cannot serve an endpoint as configured: one line for `kvtier validate` (kvtier/rules/l2.py
    turns it into a Problem at `endpoints[i].<field>`)."""

    field: str  # below the endpoint, e.g. "cache.connector"
    problem: str
    fix: str


@dataclass(frozen=True)
class FileUnit:
    """One L2 file: how many tokens it holds (the granularity of an L2 hit: either connector stores whole units only,
    so the reader of a prompt recomputes the last partial one) and what it is called in reports."""

    tokens: int
    title: str  # "LMCache chunk", "vLLM block"


@dataclass(frozen=True)
class L2Layout:
    """What a connector writes below `<endpoint>/<identity>/`, for the janitor (kvtier/k8s/curvine/janitor.py) and its
    tests: a data file and the temporary file of a write in progress, as the pinned version names them."""

    data_example: str  # a path below the identity directory
    temp_example: str
    temp_suffix: str  # every temporary file ends so; the janitor deletes one only when it is stale
    temp_max_age_minutes: int  # a temporary file untouched this long was interrupted
    source: str  # where the names come from (docs/references.md)


@dataclass(frozen=True)
class Series:
    """One Prometheus series a connector exposes: a name and the labels that pick it out."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """How `verify --probe` reports it: the name, with its labels when it has any."""
        if not self.labels:
            return self.name
        return f"{self.name}{{{','.join(f'{k}={v!r}' for k, v in self.labels)}}}"

    @property
    def matchers(self) -> str:
        """Its labels as PromQL matchers (`tier="1:fs"`), empty without labels."""
        return ",".join(f'{k}="{v}"' for k, v in self.labels)


@dataclass(frozen=True)
class HitMetrics:
    """The counters that show an L2 hit on this connector (rules, dashboards, `verify --probe`, `bench`)."""

    l2_write_bytes: Series  # what pod A wrote to L2
    l2_read_bytes: Series  # what pod B read from L2
    lookup_tokens: Series  # tokens the connector was asked for (a miss included)
    lookup_hits: Series  # tokens it held
    hit_tokens: tuple[Series, ...]  # tokens B took from outside its GPU cache: the first series present counts
    loaded: Series  # present once the connector served a lookup: absent, it is not loaded at all
    reported: tuple[Series, ...]  # the probe's counters, in its report's order
    l2_io: tuple[tuple[str, Series], ...]  # `kvtier bench`'s L2 traffic: (column, series)
    l2_name: str  # where a hit came from, in the probe's message ("L2", "vLLM's fs tier")
    # Loads from L2 that failed after the lookup found the blocks (each then computed again); None: not counted.
    load_failures: Series | None = None


@dataclass(frozen=True)
class MountedFiles:
    """Files a standalone engine reads from a ConfigMap of its own, mounted read-only."""

    config_map: str  # the ConfigMap's name
    volume: str  # the pod volume's name (also the chart object's id)
    mount_path: str
    data: Mapping[str, str]  # file name -> text


@dataclass(frozen=True)
class EngineWiring:
    """What a connector adds to a standalone engine container, after the flags and env both connectors share."""

    args: tuple[str, ...] = ()
    env: tuple[dict[str, Any], ...] = ()  # after the model's variables
    files: MountedFiles | None = None
    shm_gib: int = 0  # /dev/shm beyond NCCL's share
    rollout: Any = field(default_factory=dict)  # what the pod template's digest covers: a change rolls the pods


@dataclass(frozen=True)
class ReadEfficiency:
    """The share of a plain reader's rate that an L2 hit reaches through a connector's own storage code, by the size
    of its files: `make bench-l2` (tools/benchl2.py) measured it on tmpfs, where the medium is fastest and the
    connector's own costs per file (opens, thread hops, headers) weigh most. A connector's costs per file only
    shrink against larger files, so the curve never falls with size (a measured dip is the shared machine's noise:
    the best share at or below a size holds); between the measured sizes it is interpolated on log(size), beyond
    them the nearest holds, and it never exceeds 1 (a connector reading its files in parallel outruns one plain
    reader on memory, not a network)."""

    points: tuple[tuple[int, float], ...]  # (file bytes, efficiency), ascending sizes
    source: str

    def at(self, file_bytes: int) -> float:
        sizes = [size for size, _ in self.points]
        shares = list(itertools.accumulate((share for _, share in self.points), max))
        if file_bytes <= sizes[0]:
            return min(shares[0], 1.0)
        for index in range(1, len(sizes)):
            if file_bytes <= sizes[index]:
                low, high = sizes[index - 1], sizes[index]
                weight = math.log(file_bytes / low) / math.log(high / low)
                return min(shares[index - 1] + (shares[index] - shares[index - 1]) * weight, 1.0)
        return min(shares[-1], 1.0)


class Connector(ABC):
    """One L2 connector. Issues that add per-connector behaviour add it here, in each connector's module:
    - what it supports: `refusals` (modes today; KV dtypes, attention kinds, LoRA adapters, cache salts next);
    - what keys its KV: `identity_facts` (and `fact_meanings` for `validate --previous`);
    - how it is rendered: `standalone`, `operator_env`, `image`;
    - what it stores: `layout`, `file_unit`, `l2_bytes_per_token`; how fast it reads it: `read_efficiency`;
    - how a hit shows: `hits`, `probe_miss_cause`, `isolation_leak_cause`; how a live pod is checked:
      `pod_problems`, `wiring_summary`.
    """

    name: ClassVar[str]  # the `cache.connector` value (kvtier/config/endpoint.py `Connector`)
    title: ClassVar[str]  # in messages
    layout: ClassVar[L2Layout]
    hits: ClassVar[HitMetrics]
    read_efficiency: ClassVar[ReadEfficiency]
    # What a changed identity fact means, for the notice of `kvtier validate --previous` (kvtier/rules/day2.py).
    fact_meanings: ClassVar[Mapping[str, str]] = {}
    env_prefixes: ClassVar[tuple[str, ...]] = ()  # its own settings' variables (how `verify` finds its container)
    series_prefix: ClassVar[
        str
    ]  # every series of its own starts so (an autoscaling query on them: rules/autoscaling.py)

    def __repr__(self) -> str:
        return f"<connector {self.name}>"

    # ---- what it supports --------------------------------------------------------------------------------------

    @abstractmethod
    def refusals(self, endpoint: Endpoint) -> list[Refusal]:
        """Every reason it cannot serve `endpoint` as configured (empty: it can)."""

    def supports(self, endpoint: Endpoint) -> bool:
        return not self.refusals(endpoint)

    # ---- identity ----------------------------------------------------------------------------------------------

    @abstractmethod
    def identity_facts(self, endpoint: Endpoint) -> dict[str, Any]:
        """Everything that makes the endpoint's KV incompatible with what it wrote before, and only what is set
        (unset facts are left out, so a new optional fact leaves every existing identity as it is)."""

    def l2_identity(self, endpoint: Endpoint) -> str:
        """A short digest of `identity_facts`: a changed identity starts cold in a new directory."""
        facts = json.dumps(self.identity_facts(endpoint), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(facts.encode()).hexdigest()[:L2_IDENTITY_CHARS]

    def l2_subdir(self, endpoint: Endpoint) -> str:
        """`<endpoint>/<identity>`: where the endpoint writes, relative to its LOB's L2 volume (design "L2 layout")."""
        return f"{endpoint.name}/{self.l2_identity(endpoint)}"

    def hash_seed(self, endpoint: Endpoint, namespace: str) -> str:  # noqa: ARG002
        """The PYTHONHASHSEED the endpoint's pods (in `namespace`) run with: the same on every replica, since both
        connectors seed their cache keys with it (kvtier/serving.py); read when asked (the engine tests break it)."""
        return serving.HASH_SEED

    # ---- what it stores ----------------------------------------------------------------------------------------

    @abstractmethod
    def file_unit(self, endpoint: Endpoint) -> FileUnit:
        """One L2 file of this endpoint."""

    def l2_bytes_per_token(self, endpoint: Endpoint, model: Model) -> int:  # noqa: ARG002
        """Bytes one token takes in an L2 file: the model's KV bytes per token for its attention kind, at the
        endpoint's KV cache dtype (`model` is as served: kvtier.catalog.as_served). Both connectors copy the cache's
        bytes as vLLM holds them, so this is the same for both."""
        return model.kv_bytes_per_token

    # ---- model kinds (issue 36: attention kind x KV cache dtype) --------------------------------------------------

    def model_refusals(self, endpoint: Endpoint, model: Model) -> list[Refusal]:  # noqa: ARG002
        """Every reason it cannot serve `model` (as `endpoint` serves it: KV cache dtype) correctly; empty: it can."""
        return []

    def l2_file_overhead_bytes(self, endpoint: Endpoint) -> int:  # noqa: ARG002
        """Bytes an L2 file holds beyond its tokens' KV (a header), as the pinned version writes it."""
        return 0

    def l2_file_bytes(self, endpoint: Endpoint, model: Model) -> int:
        """One full L2 file: its tokens' KV plus the file format's header (measured against real engines:
        tests/engine/test_model_kinds.py)."""
        tokens = self.file_unit(endpoint).tokens
        return tokens * self.l2_bytes_per_token(endpoint, model) + self.l2_file_overhead_bytes(endpoint)

    def l2_read_efficiency(self, endpoint: Endpoint, model: Model) -> float:
        """The share of the storage's read rate an L2 hit of this endpoint reaches (`read_efficiency` at its files'
        size)."""
        return self.read_efficiency.at(self.l2_file_bytes(endpoint, model))

    # ---- rendering ---------------------------------------------------------------------------------------------

    @abstractmethod
    def image(self, endpoint: Endpoint) -> str:
        """The vLLM image the endpoint runs: its own `image` if set, else this connector's default for its mode."""

    @abstractmethod
    def standalone(self, endpoint: Endpoint) -> EngineWiring:
        """What the standalone Deployment's engine container gets from this connector."""

    def operator_env(self, endpoint: Endpoint, namespace: str) -> Env:  # noqa: ARG002
        """The worker env of an operator-mode endpoint in `namespace` (its LOB's; the Inference Operator renders
        the rest)."""
        raise UnsupportedError(f"{self.title} cannot run in operator mode ({endpoint.name})")

    def no_series_reason(self, endpoint: Endpoint) -> str | None:  # noqa: ARG002
        """Why the endpoint's pods export none of its own series (None: they do)."""
        return None

    # ---- live checks (`kvtier verify`) -------------------------------------------------------------------------

    @abstractmethod
    def wiring_summary(self, endpoint: Endpoint) -> str:
        """The one line `kvtier verify` prints for a pod wired as rendered."""

    @abstractmethod
    def pod_problems(self, endpoint: Endpoint, pod: Obj, container: Obj, configmaps: Sequence[Obj]) -> list[str]:
        """What is wrong with one live pod's cache wiring (`container`: its vLLM container); empty when nothing."""

    @abstractmethod
    def isolation_leak_cause(self, endpoint: Endpoint, key: str) -> str:
        """Why `verify --probe --isolation` (or `--adapter`) saw a request of another `key` ("cache_salt" or "LoRA
        adapter") take cached tokens of a prompt the probe sent under its own: what keys this connector's tiers on
        that, and what broke it."""

    @abstractmethod
    def probe_miss_cause(self, a_written: float, b_looked_up: float | None, loaded: bool) -> str:
        """Why `verify --probe` saw no hit: A's L2 write bytes, B's looked-up tokens, and whether `hits.loaded`
        showed on B at all."""

    def probe_load_failure_cause(self, failures: float) -> str:
        """Why `verify --probe` saw no hit when B found the blocks but `hits.load_failures` counted failed loads."""
        return (
            f"pod B found the prompt in {self.hits.l2_name} but {failures:g} load(s) from it failed, so it computed "
            "the prompt again; the pod's log names the error"
        )


def weights_fact(endpoint: Endpoint) -> str | None:
    """The identity's `weights` fact: the Hugging Face commit, or the S3 prefix."""
    model = endpoint.model
    return model.revision if isinstance(model, HuggingFaceModel) else f"s3://{model.bucket}/{model.prefix}"


def model_kind_facts(endpoint: Endpoint) -> dict[str, Any]:
    """Issue 36's identity facts, left out at their defaults (so no existing identity moves): the KV cache dtype
    (another dtype is other bytes under the same keys) and the weight format vLLM is told (`--quantization`)."""
    return {
        "kv_cache_dtype": None if endpoint.kv_cache_dtype == "auto" else endpoint.kv_cache_dtype,
        "weight_format": endpoint.weight_format,
    }


def set_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """`facts` without the unset ones (no null placeholders in an identity)."""
    return {key: value for key, value in facts.items() if value is not None}
