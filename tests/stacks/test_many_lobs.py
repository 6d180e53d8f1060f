"""Fifty lines of business, synthesized: each LOB stack still touches no other stack, and adding the fifty-first
changes nothing in the platform stack (nor in the network and cluster stacks)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support import many_lobs, synthesize

ENV = "many"
NODES = 160  # the same GPU nodes for 50 and 51 LOBs (51 x gpu_quota 3 fits)


def test_fifty_lob_stacks_are_independent_and_a_new_one_leaves_the_platform_alone(tmp_path: Path) -> None:
    fifty = synthesize(ENV, tmp_path / "out50", many_lobs(tmp_path / "config50", 50, name=ENV, gpu_nodes=NODES))
    lobs = [f"lob{i:02d}" for i in range(50)]
    artifacts = json.loads((fifty.outdir / "manifest.json").read_text())["artifacts"]
    for lob in lobs:
        text = json.dumps(fifty.templates[f"kvtier-{ENV}-{lob}"])
        assert re.search(re.escape(f"/kvtier/{ENV}/{lob}") + r"(?![0-9])", text), "the check sees names"
        neighbours = {lobs[(lobs.index(lob) + 1) % 50], lobs[lobs.index(lob) - 1]}
        for other in neighbours:  # names share prefixes (lob01, lob010 would not): no digit may follow
            for name in (f"kvtier-{ENV}-{other}", f"kvtier-{other}", f"/kvtier/{ENV}/{other}"):
                assert not re.search(re.escape(name) + r"(?![0-9])", text), f"{lob} names {name}"
        deps = {d for d in artifacts[f"kvtier-{ENV}-{lob}"].get("dependencies", []) if not d.endswith(".assets")}
        assert deps == {f"kvtier-{ENV}-cluster", f"kvtier-{ENV}-platform"}, deps
    fifty_one = synthesize(ENV, tmp_path / "out51", many_lobs(tmp_path / "config51", 51, name=ENV, gpu_nodes=NODES))
    assert set(fifty_one.templates) - set(fifty.templates) == {f"kvtier-{ENV}-lob50"}
    for stack in ("network", "cluster", "platform"):
        name = f"kvtier-{ENV}-{stack}"
        assert fifty_one.templates[name] == fifty.templates[name], f"adding a LOB changed {name}"
