"""What every kvtier stack shares: its name, its AWS environment and its tags."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Tags, Validations
from aws_cdk import Environment as CdkEnvironment
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.manifests import StackOutputs
from kvtier.naming import ENV_TAG, stack_name

# `cdk deploy -c established=true`: the environment's first deploy succeeded (docs/deploying.md). Only then are the
# network and cluster stacks termination-protected: a failed first create ends in ROLLBACK_COMPLETE, which `cdk deploy`
# must delete to retry, and protection would refuse that. Persisted per environment as `"established:<env>": true` in
# cdk.context.json (CDK reads that file on every synth), so one deploy without the flag cannot turn protection off;
# `kvtier status` reports an established stack without protection.
ESTABLISHED_CONTEXT = "established"
PROTECTED_KINDS = ("network", "cluster")


def established(scope: Construct, env_name: str | None = None) -> bool:
    keys = [ESTABLISHED_CONTEXT, *([f"{ESTABLISHED_CONTEXT}:{env_name}"] if env_name else [])]
    return any(str(scope.node.try_get_context(key)).lower() == "true" for key in keys)


def cdk_environment(env: Environment) -> CdkEnvironment:
    """Region always; account only when configured (null: environment-agnostic, nothing is looked up)."""
    return CdkEnvironment(account=env.account, region=env.region)


class KvtierStack(Stack):
    def __init__(self, scope: Construct, env: Environment, kind: str, description: str) -> None:
        self.config_env = env  # set first: the base constructor may already ask for availability_zones
        super().__init__(
            scope,
            stack_name(env.name, kind),
            env=cdk_environment(env),
            description=description,
            termination_protection=established(scope, env.name) and kind in PROTECTED_KINDS,
        )
        self.outputs = StackOutputs()  # what dist/ lists for this stack
        # The zones are literals on purpose (availability_zones below: synth never looks them up). CDK acknowledges
        # this rule itself when zones come from its own lookup (aws-cdk-lib 2.275.0 core/lib/stack.js
        # `_silenceLiteralAzWarning`); the override below bypasses that, so it is acknowledged here.
        Validations.of(self).acknowledge(
            Acknowledgment(id="CloudFormation-Validate::W3010", reason="zones come from the environment file")
        )
        Tags.of(self).add(ENV_TAG, env.name)
        for key, value in sorted(env.tags.items()):
            Tags.of(self).add(key, value)

    @property
    def availability_zones(self) -> list[str]:
        """The configured zones: an account-bound stack would otherwise look them up (a context lookup)."""
        return list(self.config_env.availability_zones)
