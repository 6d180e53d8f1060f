"""Cross-file rules on a whole environment (env file + its LOB files), above config and planner.

`load_checked` is the one entry the app and the CLI use: parse the files (kvtier.config.loader), then run every
rule. Each rule family has its module; errors stop `cdk synth` and `kvtier validate` (exit 2), warnings are printed
(exit 0). Checks of one file's own fields live in its model; here is what needs several files, the catalog or the
planner. The rules and their sources: docs/planning.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from kvtier.config.environment import Environment
from kvtier.config.loader import DEFAULT_ENV, Config, parse_config
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import ConfigError, Problem
from kvtier.rules.access import check_eks_access, check_model_buckets, check_model_keys
from kvtier.rules.autoscaling import check_autoscaling
from kvtier.rules.context import Context, Findings
from kvtier.rules.disk import check_node_disk
from kvtier.rules.disruption import check_drain_room, check_one_replica
from kvtier.rules.fit import check_model_fits, check_node_memory, placement_problems
from kvtier.rules.gpus import check_gpu_groups, check_quota, check_rolling_updates
from kvtier.rules.images import check_image_pins
from kvtier.rules.l2 import check_connector, check_l2_pool, check_shared_model_ids, curvine_problems
from kvtier.rules.models import check_context_length, check_model_kind, check_pinned_weights, endpoint_models
from kvtier.rules.node_fit import check_node_requests
from kvtier.rules.routing import check_routing
from kvtier.rules.tiered_storage import check_tiered_storage, check_tiered_storage_keys

__all__ = ["cross_check", "load_checked"]


def cross_check(
    env: Environment, env_file: str, lobs: Mapping[str, LineOfBusiness], lob_files: Mapping[str, str]
) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) for the environment as a whole."""
    ctx = Context(env, env_file, tuple(lobs[name] for name in env.lobs if name in lobs), lob_files)
    found = Findings()
    found.errors.extend(curvine_problems(env, env_file))
    models = endpoint_models(ctx, found)
    for site in ctx.sites():
        placement = placement_problems(ctx, site)
        found.errors.extend(placement)
        check_connector(site, found)
        check_routing(site, found)
        check_autoscaling(ctx, site, found)
        check_tiered_storage(ctx, site, found)
        check_pinned_weights(site, found)
        check_one_replica(site, found)
        model = models.get((site.lob.name, site.index))
        # A max_model_len the model cannot serve is the one error about it: the fit check would only add a second.
        # Issue 36: a weight format or a connector x model kind that cannot serve comes first, too.
        fits = model is not None and check_context_length(site, model, found) and not placement
        if model is not None and fits and check_model_kind(site, model, found):
            check_model_fits(ctx, site, model, found)
    for lob in ctx.lobs:
        check_quota(ctx, lob, found)
        check_shared_model_ids(ctx, lob, found)
    check_gpu_groups(ctx, found)
    check_node_memory(ctx, found)
    check_l2_pool(ctx, found, models)
    check_node_requests(ctx, found)
    check_rolling_updates(ctx, found)
    check_drain_room(ctx, found)
    check_node_disk(ctx, found, models)
    check_eks_access(ctx, found)
    check_model_buckets(ctx, found)
    check_model_keys(ctx, found)
    check_image_pins(ctx, found)
    check_tiered_storage_keys(ctx, found)
    return found.errors, found.warnings


def load_checked(config_dir: Path, env_name: str = DEFAULT_ENV) -> Config:
    """The environment `env_name` under `config_dir`, parsed and cross-checked; one ConfigError with every problem."""
    config = parse_config(config_dir, env_name)
    errors, warnings = cross_check(
        config.env, config.files["env"], {lob.name: lob for lob in config.lobs}, config.files
    )
    if errors:
        raise ConfigError(errors)
    return dataclasses.replace(config, warnings=tuple(warnings))
