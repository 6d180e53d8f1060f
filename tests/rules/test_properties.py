"""Property: every config broken in a way the cross-checks (or the models) must catch ends in the promised message
(`<file>: <field>: <problem>; <allowed>`) and exit code 2 from `kvtier validate`, never a traceback."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.catalog import MODELS
from kvtier.cli import main as cli
from tests.support import CONFIG_DIR

LINE = re.compile(r"^(?:kvtier validate: )?\S+\.yaml: \S+: .+; .+$")
Doc = dict[str, Any]
Mutation = tuple[str, Callable[[Path], None]]
KNOWN_ENDPOINT_KEYS = {
    "name",
    "model",
    "instance_type",
    "replicas",
    "tensor_parallel",
    "max_model_len",
    "gpu_memory_utilization",
    "block_size",
    "image",
    "cache",
    "routing",
    "mode",
    "autoscaling",
    "bench",
}


def _edit(relative: str, change: Callable[[Doc], None]) -> Callable[[Path], None]:
    def run(config_dir: Path) -> None:
        path = config_dir / relative
        doc: Doc = yaml.safe_load(path.read_text())
        change(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    return run


def _retail_endpoint(change: Callable[[Doc], None]) -> Callable[[Path], None]:
    return _edit("lobs/retail.yaml", lambda d: change(d["endpoints"][0]))


def _dev(change: Callable[[Doc], None]) -> Callable[[Path], None]:
    return _edit("environments/dev.yaml", change)


# Each strategy yields a change that dev (2 x ml.g6e.4xlarge, retail: Qwen3-8B, 2 replicas, quota 2) must reject.
MODEL_IDS = st.from_regex(r"[A-Za-z][a-z0-9]{0,8}/[A-Za-z][a-z0-9-]{0,8}", fullmatch=True).filter(
    lambda m: m not in MODELS
)
MUTATIONS: st.SearchStrategy[Mutation] = st.one_of(
    st.integers(2, 64).map(
        lambda tp: (f"tensor_parallel {tp}", _retail_endpoint(lambda e: e.update(tensor_parallel=tp)))
    ),
    st.integers(3, 10_000).map(lambda n: (f"replicas {n}", _retail_endpoint(lambda e: e.update(replicas=n)))),
    st.integers(-3, 1).map(lambda q: (f"gpu_quota {q}", _edit("lobs/retail.yaml", lambda d: d.update(gpu_quota=q)))),
    st.floats(80, 1e7, allow_nan=False).map(
        lambda gb: (f"l1_gb {gb}", _retail_endpoint(lambda e: e["cache"].update(l1_gb=gb)))
    ),
    st.floats(1500, 1e9, allow_nan=False).map(  # dev's pool: 3 workers x 400 GiB, about 1,290 GB
        lambda gb: (f"budget_gb {gb}", _edit("lobs/retail.yaml", lambda d: d["l2"].update(budget_gb=gb)))
    ),
    st.integers(16, 4096)
    .filter(lambda n: n % 16)
    .map(lambda n: (f"chunk_size {n}", _retail_endpoint(lambda e: e["cache"].update(chunk_size=n)))),
    st.integers(170_000, 10**7).map(
        lambda n: (f"max_model_len {n}", _retail_endpoint(lambda e: e.update(max_model_len=n)))
    ),
    st.floats(0.15, 0.44, allow_nan=False).map(
        lambda u: (f"gpu_memory_utilization {u}", _retail_endpoint(lambda e: e.update(gpu_memory_utilization=u)))
    ),
    MODEL_IDS.map(
        lambda m: (
            f"model {m}",
            _retail_endpoint(lambda e: e.update(model={"id": m, "source": "huggingface", "weights_version": "t1"})),
        )
    ),
    st.sampled_from(["ml.g6e.8xlarge", "ml.g6e.12xlarge", "ml.p5.48xlarge", "ml.m5.xlarge"]).map(
        lambda t: (f"instance_type {t}", _retail_endpoint(lambda e: e.update(instance_type=t)))
    ),
    st.just(("kvaware standalone", _retail_endpoint(lambda e: e.update(routing="kvaware", mode="standalone")))),
    st.just(
        (
            "tiered storage off",
            _dev(lambda d: d["hyperpod"]["tiered_storage"].update(enabled=False)),
        )
    ),
    st.integers(41, 100).map(
        lambda p: (
            f"memory_percent {p} with l1 60",
            lambda c: (
                _dev(lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=p))(c),
                _retail_endpoint(lambda e: e["cache"].update(l1_gb=60))(c),
            ),
        )
    ),
    st.from_regex(r"[a-z][a-z_]{2,11}", fullmatch=True)
    .filter(lambda k: k not in KNOWN_ENDPOINT_KEYS)
    .map(lambda k: (f"unknown key {k}", _retail_endpoint(lambda e: e.update({k: 1})))),
)


@settings(deadline=None, max_examples=60)
@given(st.lists(MUTATIONS, min_size=1, max_size=3))
def test_invalid_configs_end_in_the_promised_message(mutations: list[Mutation]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config_dir = Path(tmp) / "config"
        shutil.copytree(CONFIG_DIR, config_dir)
        for _, mutate in mutations:
            mutate(config_dir)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli(["validate", "-e", "dev", "--config-dir", str(config_dir)])
    names = [name for name, _ in mutations]
    assert code == 2, (names, err.getvalue())
    assert out.getvalue() == ""
    text = err.getvalue()
    assert "Traceback" not in text
    lines = text.strip().splitlines()
    assert lines, names
    assert lines[0].startswith("kvtier validate: ")
    bad = [line for line in lines if not LINE.match(line)]
    assert not bad, (names, bad)
