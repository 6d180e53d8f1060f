"""Routing strategies and modes: what each router can actually route on."""

from __future__ import annotations

from kvtier.errors import Problem
from kvtier.rules.context import Findings, Site
from kvtier.versions import ROUTER_LMCACHE_VERSION, STANDALONE_LMCACHE_VERSION


def minor_version(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_routing(site: Site, found: Findings) -> None:
    e = site.endpoint
    if e.routing != "kvaware":
        return
    if e.api == "chat":
        found.errors.append(
            Problem(
                site.file,
                site.at("routing"),
                "kvaware matches cached tokens of the `prompt` field only (production-stack's kvaware router; "
                "third-party reports say the same of the operator's), and api: chat clients send messages, so every "
                "request would fall back to session or load routing",
                "use routing: prefixaware (it reads chat messages), or set api: completions if the clients call "
                "/v1/completions",
            )
        )
        return
    if e.mode != "standalone":
        return
    reason = (
        "the production-stack router embeds the LMCache controller of lmcache "
        f"{ROUTER_LMCACHE_VERSION}, whose protocol changed in 0.4 (registration of a newer engine is expected to "
        'fail, docs/references.md "Routing and modes")'
    )
    if e.image is None and minor_version(STANDALONE_LMCACHE_VERSION) != minor_version(ROUTER_LMCACHE_VERSION):
        found.errors.append(
            Problem(
                site.file,
                site.at("routing"),
                f"kvaware with the default standalone image (LMCache {STANDALONE_LMCACHE_VERSION}) would not "
                f"route by cache: {reason}",
                "use prefixaware or session in standalone mode, mode: operator, or an `image` whose LMCache is "
                f"{minor_version(ROUTER_LMCACHE_VERSION)}.x",
            )
        )
    else:
        found.warnings.append(
            Problem(
                site.file,
                site.at("routing"),
                f"kvaware works only if the image's LMCache is {minor_version(ROUTER_LMCACHE_VERSION)}.x: {reason}",
                "check `pip show lmcache` in the image, or use prefixaware",
            )
        )
