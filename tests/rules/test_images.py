"""Image pins (issue 34, kvtier/rules/images.py): in a `production: true` environment an engine image or an image
with host access on the GPU nodes given by tag is an error naming its field; elsewhere one warning lists them; the
L2 identity names an image by its digest."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvtier.config.base import image_by_tag, image_content, image_digest
from kvtier.connectors import l2_identity, l2_identity_facts
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from kvtier.versions import OPERATOR_VLLM_IMAGE

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def _edit(path: Path, edit: object) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(yaml.safe_dump(data))


def test_image_forms() -> None:
    assert image_digest("registry:5000/team/vllm:1.2@" + DIGEST) == DIGEST
    assert image_digest("vllm/vllm-openai:v0.32.0") is None
    assert image_by_tag("registry:5000/team/vllm:1.2@" + DIGEST) == "registry:5000/team/vllm:1.2"
    assert image_content("registry:5000/team/vllm:1.2@" + DIGEST) == "registry:5000/team/vllm@" + DIGEST
    assert image_content("registry:5000/team/vllm@" + DIGEST) == "registry:5000/team/vllm@" + DIGEST
    assert image_content("registry:5000/team/vllm:1.2") == "registry:5000/team/vllm:1.2"


def test_the_identity_follows_the_digest_not_the_tag(config_copy: Path) -> None:
    config = load_checked(config_copy, "dev")
    endpoint = config.lobs[0].endpoints[0]
    pinned = endpoint.model_copy(update={"image": f"{OPERATOR_VLLM_IMAGE}@{DIGEST}"})
    retagged = endpoint.model_copy(update={"image": f"{OPERATOR_VLLM_IMAGE.rsplit(':', 1)[0]}:renamed@{DIGEST}"})
    repushed = endpoint.model_copy(update={"image": f"{OPERATOR_VLLM_IMAGE}@{OTHER}"})
    assert l2_identity_facts(pinned)["image"].endswith("@" + DIGEST)
    # Another tag on the same bits names the same image (its LMCache version, known by tag, is a fact of its own).
    assert l2_identity_facts(pinned)["image"] == l2_identity_facts(retagged)["image"]
    assert l2_identity(pinned) != l2_identity(repushed) != l2_identity(endpoint)  # other bits: another directory
    assert l2_identity_facts(pinned)["lmcache"] == l2_identity_facts(endpoint)["lmcache"]  # the tag's LMCache


def test_a_production_environment_refuses_each_tag_in_one_line(config_copy: Path) -> None:
    env = config_copy / "environments" / "prod.yaml"
    _edit(env, lambda d: d.update(production=True))
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "prod")
    where = sorted((Path(p.file).name, p.field) for p in err.value.problems)
    assert where == [
        ("prod.yaml", "curvine.images.csi"),
        ("prod.yaml", "curvine.images.curvine"),
        ("prod.yaml", "curvine.images.node_driver_registrar"),
        ("retail.yaml", "endpoints[0].image"),
        ("search.yaml", "endpoints[0].image"),
        ("support.yaml", "endpoints[0].image"),
    ]
    for problem in err.value.problems:
        assert "is a tag, and" in problem.problem and problem.allowed.startswith("pin the digest you pulled")
        assert "\n" not in str(problem)
    # Pinned by digest: accepted.
    _edit(env, lambda d: d.update(curvine={**d["curvine"], "images": {
        "curvine": f"ghcr.io/curvineio/curvine:v0.4.1@{DIGEST}",
        "csi": f"ghcr.io/curvineio/curvine-csi:v0.4.1@{DIGEST}",
        "node_driver_registrar": f"registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0@{DIGEST}",
    }}))  # fmt: skip
    for lob in ("retail", "search"):
        _edit(
            config_copy / "lobs" / f"{lob}.yaml",
            lambda d: d["endpoints"][0].update(image=f"{OPERATOR_VLLM_IMAGE}@{DIGEST}"),
        )
    _edit(
        config_copy / "lobs" / "support.yaml",
        lambda d: d["endpoints"][0].update(image=f"lmcache/vllm-openai:v0.4.3@{DIGEST}"),
    )
    config = load_checked(config_copy, "prod")
    assert [w for w in config.warnings if w.field == "production"] == []


def test_elsewhere_one_warning_lists_the_tags(config_copy: Path) -> None:
    config = load_checked(config_copy, "dev")
    (warning,) = [w for w in config.warnings if w.field == "production"]
    assert warning.problem == (
        "4 image(s) run by a tag, which can be pushed again: retail/qwen3-8b's engine; curvine.images curvine, csi, "
        "node_driver_registrar"
    )
    assert "production: true makes each an error" in warning.allowed
