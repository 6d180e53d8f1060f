"""Issue 26 (reviews-2026-12-b S3 13): `established` persisted per environment, not only a CLI flag."""

from __future__ import annotations

from pathlib import Path

from kvtier.rules import load_checked
from tests.support import CONFIG_DIR


def _protected(tmp_path: Path, context: dict[str, str]) -> dict[str, bool]:
    from kvtier.app.main import build, new_app

    app = new_app(str(tmp_path))
    for key, value in context.items():
        app.node.set_context(key, value)
    stacks = build(app, load_checked(CONFIG_DIR, "prod"))
    return {s.stack_name: s.termination_protection for s in stacks.all}


def test_established_per_environment_key_protects_that_environment_only(tmp_path: Path) -> None:
    """`"established:prod": true` in cdk.context.json (CDK reads it on every synth) keeps protection on even when a
    deploy forgets `-c established=true`; another environment's key does nothing."""
    protected = _protected(tmp_path / "a", {"established:prod": "true"})
    assert protected["kvtier-prod-network"] and protected["kvtier-prod-cluster"]
    assert not protected["kvtier-prod-platform"]
    other = _protected(tmp_path / "b", {"established:dev": "true"})
    assert not any(other.values())
