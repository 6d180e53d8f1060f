"""Tiered Storage: the L2 backends and modes that need HyperPod's Tiered Storage turned on."""

from __future__ import annotations

from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings, Site


def check_tiered_storage(ctx: Context, site: Site, found: Findings) -> None:
    e = site.endpoint
    if ctx.env.hyperpod.tiered_storage.enabled:
        return
    if e.cache.l2 == "tieredstorage":
        why = "the tieredstorage L2 is HyperPod's Tiered Storage"
    elif e.cache.l2 == "curvine" and e.mode == "operator":
        why = (
            "in operator mode a Curvine L2 is declared with the placeholder backend `tieredstorage`, which the "
            "operator accepts only when Tiered Storage is on (then Kyverno rewires it to Curvine)"
        )
    else:
        return
    found.errors.append(
        Problem(
            site.file,
            site.at("cache.l2"),
            f"{why}, and {ctx.env_file} has hyperpod.tiered_storage.enabled: false",
            f"set hyperpod.tiered_storage.enabled: true in {ctx.env_file}, use mode: standalone, or l2: none",
        )
    )
