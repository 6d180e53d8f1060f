"""Tiered Storage: the L2 backends and modes that need HyperPod's Tiered Storage turned on, and its one key space."""

from __future__ import annotations

from kvtier.connectors import connector_for
from kvtier.errors import Problem
from kvtier.naming import lob_namespace
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


def check_tiered_storage_keys(ctx: Context, found: Findings) -> None:
    """Tiered Storage is one key space for the whole cluster: each `l2: tieredstorage` endpoint's keys start from a
    hash seed of its own (its LOB, name and L2 identity: kvtier/connectors/lmcache.py `hash_seed`). Two endpoints
    whose seeds meet (one chance in 2^32) would read each other's KV, so that is refused."""
    seen: dict[str, Site] = {}
    for site in ctx.sites():
        e = site.endpoint
        if e.cache.l2 != "tieredstorage":
            continue
        seed = connector_for(e).hash_seed(e, lob_namespace(site.lob.name))
        other = seen.setdefault(seed, site)
        if other is not site:
            found.errors.append(
                Problem(
                    site.file,
                    site.at("cache.l2"),
                    f"its Tiered Storage keys would start from the same hash seed ({seed}) as {other.label}'s, so "
                    "each would read the other's KV",
                    "rename this endpoint (its seed follows its name), or use l2: curvine for one of them",
                )
            )
