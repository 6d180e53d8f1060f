"""Autoscaling that cannot work: no KEDA for a standalone endpoint, a signal nobody records or no Prometheus KEDA
can ask, and a trigger on a metric the endpoint's engine does not export (docs/endpoints.md "Autoscaling")."""

from __future__ import annotations

from kvtier.config.endpoint import PrometheusTrigger, SignalTrigger
from kvtier.config.keda import signal_server
from kvtier.connectors import CONNECTORS, connector_for
from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings, Site
from kvtier.versions import KEDA_VERSION


def _empty_query(site: Site, at: str, query: str) -> Problem | None:
    """A query on a connector's own series that this endpoint's pods never export: another connector's, or its own
    connector's when it does not run (LMCache without L1 and L2)."""
    runs = connector_for(site.endpoint)
    for connector in CONNECTORS:
        if connector.series_prefix not in query:
            continue
        if connector is not runs:
            why = f"this endpoint runs {runs.title}, not {connector.title}"
        elif (reason := connector.no_series_reason(site.endpoint)) is not None:
            why = reason
        else:
            continue
        return Problem(
            site.file,
            site.at(f"{at}.query"),
            f"the query reads {connector.title} series and {why}, so the query stays empty",
            "query vLLM's own series (vllm:*) or a kvtier signal, or give the endpoint an L1 or L2",
        )
    return None


def _keda_problem(ctx: Context, site: Site) -> Problem | None:
    source = ctx.env.keda.source
    if source == "existing" or (source == "inference-operator" and ctx.env.hyperpod.installs("inference_operator")):
        return None
    scaled = "a standalone endpoint scales through a KEDA ScaledObject and"
    if source == "none":
        return Problem(
            site.file,
            site.at("autoscaling"),
            f"{scaled} keda.source is none in {ctx.env_file}",
            "set keda.source there to existing (the cluster runs KEDA) or inference-operator (the add-on kvtier "
            f"installs brings KEDA {KEDA_VERSION}), or remove autoscaling and set replicas",
        )
    return Problem(
        site.file,
        site.at("autoscaling"),
        f"{scaled} keda.source is inference-operator, whose add-on {ctx.env_file} does not install",
        "set hyperpod.existing.install.inference_operator: true there, or keda.source: existing if the cluster "
        "runs KEDA, or remove autoscaling and set replicas",
    )


def _signal_problem(ctx: Context, site: Site, at: str, trigger: SignalTrigger) -> Problem | None:
    e = site.endpoint
    obs = ctx.env.observability
    if trigger.signal == "l2_hit_tokens_per_replica" and e.cache.l2 == "none":
        return Problem(
            site.file,
            site.at(f"{at}.signal"),
            "l2_hit_tokens_per_replica counts LMCache's L2 reads and this endpoint has "
            "cache.l2: none, so the signal stays empty",
            "use queue_per_replica, ttft_p90_over_slo or computed_tokens_per_replica, or give the endpoint an L2",
        )
    if obs.mode == "none":
        return Problem(
            site.file,
            site.at(f"{at}.signal"),
            f"signals are kvtier's recording rules and observability.mode is none in {ctx.env_file}: no Prometheus "
            "records them",
            f"set observability.mode: hyperpod-addon or prometheus-operator in {ctx.env_file}, or use a raw "
            "cloudwatch or prometheus trigger",
        )
    if signal_server(obs, ctx.env.keda, e.mode) is not None:
        return None
    if e.mode == "operator":
        return Problem(
            site.file,
            site.at(f"{at}.signal"),
            "the operator's KEDA queries only Amazon Managed Prometheus (the CRD's serverAddress) and this "
            f"environment records kvtier's rules in an in-cluster Prometheus ({ctx.env_file} observability.mode "
            f"{obs.mode})",
            f"set observability.mode: hyperpod-addon in {ctx.env_file}, or use a cloudwatch trigger",
        )
    return Problem(
        site.file,
        site.at(f"{at}.signal"),
        f"KEDA needs the address of the Prometheus that records kvtier's rules and {ctx.env_file} gives none",
        f"set keda.prometheus_url in {ctx.env_file}, e.g. http://kube-prometheus-stack-prometheus.monitoring:9090",
    )


def check_autoscaling(ctx: Context, site: Site, found: Findings) -> None:
    e = site.endpoint
    autoscaling = e.autoscaling
    if autoscaling is None:
        return
    if e.mode == "standalone" and (problem := _keda_problem(ctx, site)) is not None:
        found.errors.append(problem)
    for index, trigger in enumerate(autoscaling.all_triggers):
        at = f"autoscaling.{autoscaling.trigger_path(index)}"
        if isinstance(trigger, SignalTrigger):
            if (problem := _signal_problem(ctx, site, at, trigger)) is not None:
                found.errors.append(problem)
        elif isinstance(trigger, PrometheusTrigger) and (problem := _empty_query(site, at, trigger.query)):
            found.errors.append(problem)
