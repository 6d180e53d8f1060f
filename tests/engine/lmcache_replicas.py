"""Three engines of the example's standalone LMCache endpoint that several scenarios share (issue 40): the real-engine
scenario (scenario.py), client cache tags (client_tags.py), the real router (routing_scenario.py) and the signals
(signals.py) each run as a phase on them instead of starting the same rendering again.

- A and B: two replicas of `prod/support/llama31-8b` as kvtier renders it (`render.standalone`), plus the router's
  `--enable-scale-out` (routers.ENGINE_EXTRA_ARGS: it only adds the HTTP routes cache_aware calls, no cache setting);
- C: A's rendering with another PYTHONHASHSEED.
One tiny model and one L2 folder (standing in for the LOB's Curvine volume) serve them all. The break switches that
change this rendering are read once, here, so every phase runs on the engines they give: `KVTIER_ENGINE_BREAK`
(scenario.BREAKS) and `KVTIER_TAGS_BREAK` (client_tags.BREAKS).

Phases keep to their own KV: each takes its token ids from the seed `phase(name)` returns (a name is taken once per
group, so no two phases draw the same prompts), after the L2 folder has settled from the phase before. A phase may
start engines of its own next to the group (`launch`, `start`): the group's harness stops them with the rest.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvtier import serving
from kvtier.bench.testserver import free_port
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.rules import load_checked
from tests.engine import client_tags, render
from tests.engine.engines import Engine, Engines
from tests.engine.routers import ENGINE_EXTRA_ARGS
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    LOB,
    REPO,
    STARTUP_TIMEOUT_S,
    Renderings,
    build_model,
    l2_files,
    renderings,
)

ENGINE_BREAK = "KVTIER_ENGINE_BREAK"
SETTLE_S, SETTLE_TIMEOUT_S = 2.0, 60.0


@dataclass
class Replicas:
    """The running group: its engines by name, what they were rendered from, and where their files are."""

    python: str
    workdir: Path
    config: Config
    endpoint: Endpoint
    renderings: Renderings  # replica (as kvtier renders it), operator pod, other identity: under the same breaks
    replica: render.Rendered  # what A, B and C run: the replica rendering plus the router's engine flag
    other_seed: str  # C's PYTHONHASHSEED
    model_dir: Path
    l2_root: Path
    harness: Engines
    engines: dict[str, Engine] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    spoiled: str | None = None

    def phase(self, name: str) -> str:
        """Start phase `name`: wait until the L2 folder is quiet (the phase before may still be storing), then the
        seed its prompts are drawn from (`scenario.prompt_ids(f"{seed}:...")`), unique in this group."""
        if name in self.phases:
            raise ValueError(f"phase {name!r} already ran on this group: its prompts would be another phase's KV")
        if self.spoiled is not None:
            raise RuntimeError(f"the group is spoiled ({self.spoiled}): get it again from its SharedGroup")
        self.phases.append(name)
        settle(self.l2_root)
        return f"{ENDPOINT}/{name}"

    def launch(self, key: str, rendered: render.Rendered, **env: str) -> tuple[str, render.Launch]:
        """`rendered` localized onto this group's model and L2 folder, in a private folder of its own."""
        return key, render.localize(
            rendered,
            l2_root=self.l2_root,
            private_root=self.workdir / f"root-{key}",
            model_dir=self.model_dir,
            port=free_port(),
            adapter_dir=ADAPTER_DIR,
            env_overrides=env,
        )

    def start(self, launches: list[tuple[str, render.Launch]]) -> list[Engine]:
        """Engines of one phase next to the group's (stopped with the group at the latest)."""
        return self.harness.start(launches)

    def spoil(self, why: str) -> None:
        """The engines cannot serve another phase: the next `SharedGroup.get()` starts new ones."""
        self.spoiled = why

    def stop(self) -> None:
        self.harness.stop_all()


def settle(root: Path) -> None:
    """Until no file under `root` appeared, vanished or changed size for SETTLE_S (at most SETTLE_TIMEOUT_S)."""

    def listing() -> set[tuple[str, int]]:
        return {(name, (root / name).stat().st_size) for name in l2_files(root) if (root / name).exists()}

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = listing()
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S)
        now = listing()
        if now == last:
            return
        last = now


def rendering(config: Config) -> tuple[Renderings, render.Rendered]:
    """The scenario's renderings under this run's break switches, and what A, B and C run."""
    renders = renderings(config, os.environ.get(ENGINE_BREAK) or None)
    tags_break = os.environ.get(client_tags.BREAK_ENV) or None
    if tags_break not in (None, *client_tags.BREAKS):
        raise ValueError(f"{client_tags.BREAK_ENV}={tags_break!r}: use one of {', '.join(client_tags.BREAKS)}")
    replica = renders.replica
    if tags_break:
        replica = client_tags.unprotected(replica)
    return renders, dataclasses.replace(replica, args=(*replica.args, *ENGINE_EXTRA_ARGS))


def start_replicas(python: str, workdir: Path) -> Replicas:
    """Build the model, render, start A, B and C and wait until all three serve; stops them if that fails."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    renders, replica = rendering(config)
    model_build = build_model(python, workdir / "model")
    l2_root = workdir / "l2"
    l2_root.mkdir(exist_ok=False)
    other_seed = str(int(serving.HASH_SEED) + 1) if serving.HASH_SEED.isdigit() else "1"
    group = Replicas(
        python=python,
        workdir=workdir,
        config=config,
        endpoint=endpoint,
        renderings=renders,
        replica=replica,
        other_seed=other_seed,
        model_dir=workdir / "model",
        l2_root=l2_root,
        harness=Engines(python, workdir, endpoint.model.id, STARTUP_TIMEOUT_S),
        timings_s={"model_build": model_build},
    )
    started = time.monotonic()
    try:
        a, b, c = group.start(
            [
                group.launch("A", replica),
                group.launch("B", replica),
                group.launch("C", replica, PYTHONHASHSEED=other_seed),
            ]
        )
    except BaseException:
        group.stop()
        raise
    group.engines = {"A": a, "B": b, "C": c}
    group.timings_s["start"] = time.monotonic() - started
    return group
