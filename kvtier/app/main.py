"""The CDK app: load and validate the configuration, build the stacks of one environment, synthesize."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk

from kvtier.app.dist import write_dist
from kvtier.app.feature_flags import FEATURE_FLAGS
from kvtier.config.loader import DEFAULT_ENV, Config, resolve_config_dir
from kvtier.errors import ConfigError, ExitCode
from kvtier.rules import load_checked
from kvtier.stacks import EnvironmentStacks, build_environment


def new_app(outdir: str, *, nag: bool = False, context: dict[str, str] | None = None) -> cdk.App:
    """The CDK app; with `nag` (or `-c nag=true`) cdk-nag's AwsSolutions pack validates the synth.

    aws-cdk-lib's built-in CloudFormation validation plugin is off: it starts a WASM engine per process (most of a
    synth's time), and its only findings on kvtier's templates are W3010, which cfn-lint checks in the tests anyway.
    `-c cfn_validation=true` turns it back on."""
    # The reviewed feature flags, strong cross-stack references among them (kvtier/app/feature_flags.py).
    context = {**FEATURE_FLAGS, **(context or {})}
    # The plugin is fixed when the App is built, and `-c` values reach the app only through the App (the CDK CLI
    # passes them in its environment), so a first App over the same folder reads the flag.
    validate = _flag(cdk.App(outdir=outdir, context=context), "cfn_validation")
    app = cdk.App(outdir=outdir, context=context, builtin_cloud_formation_validation=validate)
    if nag or _flag(app, "nag"):
        from cdk_nag import AwsSolutionsChecks

        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def _flag(app: cdk.App, name: str) -> bool:
    return str(app.node.try_get_context(name)).lower() == "true"


def load_from_context(app: cdk.App) -> Config:
    """`-c env=<name>` (default dev) and `-c config_dir=<dir>` (else $KVTIER_CONFIG_DIR, else ./config)."""
    env_name = app.node.try_get_context("env") or DEFAULT_ENV
    return load_checked(resolve_config_dir(app.node.try_get_context("config_dir")), str(env_name))


def build(app: cdk.App, config: Config) -> EnvironmentStacks:
    return build_environment(app, config)


def main() -> int:
    app = new_app(os.environ.get("CDK_OUTDIR", "cdk.out"))
    try:
        config = load_from_context(app)
    except ConfigError as err:
        print(f"kvtier synth: {err}", file=sys.stderr)
        return int(ExitCode.USAGE)
    for warning in config.warnings:
        print(f"kvtier synth: warning: {warning}", file=sys.stderr)
    try:
        stacks = build(app, config)
    except ConfigError as err:  # a check that needs the built objects; still before anything is written
        print(f"kvtier synth: {err}", file=sys.stderr)
        return int(ExitCode.USAGE)
    app.synth()
    write_dist(Path("dist"), config.env.name, {s.stack_name: s.outputs for s in stacks.all})
    return int(ExitCode.OK)
