"""Routing strategies and modes: what each router can actually route on."""

from __future__ import annotations

from kvtier.errors import Problem
from kvtier.rules.context import Findings, Site
from kvtier.versions import ROUTER_POLICY, VLLM_ROUTER_VERSION


def check_routing(site: Site, found: Findings) -> None:
    e = site.endpoint
    if e.mode == "standalone" and e.routing not in ROUTER_POLICY:
        # vllm-router's kv_aware needs each engine's KV-event publisher wired as a static --kv-event-source with the
        # model and block size, which pod discovery does not give; it is not run in CI either (docs/references.md
        # "Issue 25"). production-stack's kvaware embedded an LMCache 0.3.11 controller that 0.4 engines cannot join.
        found.errors.append(
            Problem(
                site.file,
                site.at("routing"),
                f"{e.routing} has no policy in the standalone router (vllm-router {VLLM_ROUTER_VERSION}): its KV-aware "
                "mode needs every engine's KV-event socket listed by hand, which pod discovery cannot give",
                f"use routing: prefixaware (token-level prefix routing) or one of {', '.join(ROUTER_POLICY)}, "
                "or mode: operator",
            )
        )
        return
    if e.routing == "poolaware" and (e.mode != "standalone" or e.cache.l2 != "curvine"):
        # Pool-aware routing is the standalone router's cache_aware with knobs from the plan's L2 hit cost
        # (kvtier/planner/pool_routing.py): the operator's router takes no such knobs, and without a shared L2
        # there is no pool to balance onto.
        where = "mode: operator (its router takes no thresholds)" if e.mode != "standalone" else "no shared L2"
        found.errors.append(
            Problem(
                site.file,
                site.at("routing"),
                f"poolaware balances onto replicas that read the prefix from the shared L2, and this endpoint has {where}",
                "use routing: prefixaware, or mode: standalone with cache.l2: curvine",
            )
        )
        return
    if e.routing == "kvaware" and e.api == "chat":
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
