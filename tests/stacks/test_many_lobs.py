"""Fifty lines of business, synthesized: each LOB stack still touches no other stack, and adding the fifty-first, with
an S3 model bucket no other LOB uses, changes nothing in the platform stack (nor in the network and cluster stacks:
with `model_bucket_access: tagged` the S3 CSI driver reads buckets tagged for the environment and names none,
kvtier.constructs.eks_addons)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support import many_lobs, synthesize

ENV = "many"
NODES = 160  # the same GPU nodes for 50 and 51 LOBs (51 x gpu_quota 3 fits)
NEW_BUCKET = "acme-lob50-models"


def _tagged(config: Path) -> Path:
    env_file = config / "environments" / f"{ENV}.yaml"
    text = env_file.read_text()
    assert "model_bucket_access: named" in text  # prod's, copied
    env_file.write_text(text.replace("model_bucket_access: named", "model_bucket_access: tagged"))
    return config


def test_fifty_lob_stacks_are_independent_and_a_new_one_with_a_new_bucket_leaves_the_others_alone(
    tmp_path: Path,
) -> None:
    fifty = synthesize(
        ENV, tmp_path / "out50", _tagged(many_lobs(tmp_path / "config50", 50, name=ENV, gpu_nodes=NODES))
    )
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
    config51 = _tagged(many_lobs(tmp_path / "config51", 51, name=ENV, gpu_nodes=NODES))
    lob50 = config51 / "lobs" / "lob50.yaml"  # a copy of search (prod's third LOB), whose model is on S3
    assert "bucket: acme-ml-models" in lob50.read_text()
    lob50.write_text(lob50.read_text().replace("bucket: acme-ml-models", f"bucket: {NEW_BUCKET}"))
    fifty_one = synthesize(ENV, tmp_path / "out51", config51)
    assert set(fifty_one.templates) - set(fifty.templates) == {f"kvtier-{ENV}-lob50"}
    assert NEW_BUCKET in json.dumps(fifty_one.templates[f"kvtier-{ENV}-lob50"]), "the new LOB reads its new bucket"
    for stack in ("network", "cluster", "platform"):
        name = f"kvtier-{ENV}-{stack}"
        assert fifty_one.templates[name] == fifty.templates[name], f"adding a LOB changed {name}"
    cluster = json.dumps(fifty.templates[f"kvtier-{ENV}-cluster"])
    assert f"aws:ResourceTag/kvtier:model-reader:{ENV}" in cluster  # the S3 CSI role's only read grant
    assert "acme-ml-models" not in cluster
