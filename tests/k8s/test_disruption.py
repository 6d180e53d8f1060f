"""Issue 38 in the rendered objects: two routers on two nodes with short node-loss tolerations and a PDB, a PDB per
endpoint's engines (both modes), the engines' preStop drain and grace period, and bounded download volumes with
matching ephemeral-storage requests. The rendered prod is checked as a whole at the end (one synth per session)."""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.config.endpoint import DEFAULT_MAX_REQUEST_SECONDS, Endpoint
from kvtier.config.loader import Config
from kvtier.k8s import drain
from kvtier.k8s.disruption import NODE_LOSS_TAINTS, ROUTER_NODE_LOSS_S, engine_pdb, engine_selector
from kvtier.k8s.endpoint_names import ENGINE_PORT
from kvtier.k8s.router import ROUTER_REPLICAS, router_objects
from kvtier.k8s.standalone import engine_deployment
from kvtier.planner.shapes import endpoint_model
from kvtier.rules import load_checked
from kvtier.sizing import engine_disk
from tests.support import CONFIG_DIR, Synth
from tests.validation import validate_k8s


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _support(config: Config, **update: Any) -> Endpoint:
    return config.lob("support").endpoints[0].model_copy(update=update)


def _kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_routers_are_two_on_two_nodes_with_short_tolerations_and_a_budget(config: Config) -> None:
    endpoint = _support(config)
    objects = router_objects(config.env, "support", endpoint)
    for obj in objects:
        validate_k8s(obj)
    deployment, pdb = _kind(objects, "Deployment"), _kind(objects, "PodDisruptionBudget")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == ROUTER_REPLICAS == 2
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["nodeTaintsPolicy"] == "Honor"
    assert _matches(spread["labelSelector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    short = {t["key"]: t for t in pod["tolerations"] if t.get("effect") == "NoExecute"}
    assert set(short) == set(NODE_LOSS_TAINTS)
    assert all(t["tolerationSeconds"] == ROUTER_NODE_LOSS_S < 300 for t in short.values())
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert _matches(pdb["spec"]["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    engine_labels = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["metadata"]["labels"]
    assert not _matches(pdb["spec"]["selector"]["matchLabels"], engine_labels), "the router budget counts routers only"


def test_router_cuts_a_request_at_the_endpoints_longest_allowed(config: Config) -> None:
    for seconds, expected in ((None, DEFAULT_MAX_REQUEST_SECONDS), (1200, 1200)):
        objects = router_objects(config.env, "support", _support(config, max_request_seconds=seconds))
        container = _kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        flags = container["args"]
        assert flags[flags.index("--request-timeout-secs") + 1] == str(expected)


@pytest.mark.parametrize("mode", ["standalone", "operator"])
def test_each_endpoints_engines_have_a_budget_that_selects_exactly_them(config: Config, mode: str) -> None:
    endpoint = (config.lob("support") if mode == "standalone" else config.lob("search")).endpoints[0]
    assert endpoint.mode == mode
    lob = "support" if mode == "standalone" else "search"
    pdb = engine_pdb(lob, endpoint)
    validate_k8s(pdb)
    assert pdb["metadata"]["namespace"] == f"kvtier-{lob}"
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    if mode == "standalone":
        labels = engine_deployment(config.env, lob, endpoint)["spec"]["template"]["metadata"]["labels"]
        assert _matches(pdb["spec"]["selector"]["matchLabels"], labels)
    else:  # the label the operator puts on an endpoint's pods (docs/references.md)
        assert engine_selector(endpoint) == {"app": endpoint.name}


def test_engines_drain_before_sigterm_within_their_longest_request(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = _support(config, max_request_seconds=900)
    pod = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", "-c"] and command[2] == drain.script()
    assert command[3:] == [str(ENGINE_PORT), str(900 + drain.QUIET_S), str(drain.QUIET_S)]
    assert pod["terminationGracePeriodSeconds"] == 900 + drain.QUIET_S + drain.SHUTDOWN_S
    compile(command[2], "engine_drain.py", "exec")  # what python3 -c runs
    monkeypatch.setenv(drain.BREAK, "1")
    broken = engine_deployment(config.env, "support", endpoint)["spec"]["template"]["spec"]
    assert "lifecycle" not in broken["containers"][0] and broken["terminationGracePeriodSeconds"] == 60


def test_max_request_seconds_is_refused_in_operator_mode(config: Config) -> None:
    from pydantic import ValidationError

    search = config.lob("search").endpoints[0]
    with pytest.raises(ValidationError, match="operator mode cannot honour it"):
        Endpoint.model_validate({**search.model_dump(exclude_none=True), "max_request_seconds": 300})


def _volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["volumes"]}


def test_download_and_scratch_are_bounded_and_requested(config: Config) -> None:
    lob = config.lob("support")
    endpoint = lob.endpoints[0]
    disk = engine_disk(endpoint, endpoint_model(lob, endpoint, "lobs/support.yaml"))
    pod = engine_deployment(config.env, "support", endpoint, disk)["spec"]["template"]["spec"]
    volumes = _volumes(pod)
    assert volumes["model-cache"]["emptyDir"]["sizeLimit"] == f"{disk.model_cache_gib}Gi"
    weights_gib = 8.03e9 * 2 / 1024**3  # Llama-3.1-8B, bf16
    assert weights_gib < disk.model_cache_gib < weights_gib * 1.3, disk
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["ephemeral-storage"] == resources["limits"]["ephemeral-storage"]
    assert resources["requests"]["ephemeral-storage"] == f"{disk.total_gib}Gi"
    assert all("sizeLimit" in v.get("emptyDir", {"sizeLimit": 0}) for v in volumes.values()), volumes


def test_s3_weights_are_streamed_so_only_config_lands_on_disk(config: Config) -> None:
    lob = config.lob("search")
    endpoint = lob.endpoints[0].model_copy(update={"mode": "standalone"})
    disk = engine_disk(endpoint, endpoint_model(lob, endpoint, "lobs/search.yaml"))
    assert disk.model_cache_gib == 1 and disk.adapters_gib == 0, disk


def test_the_adapters_volume_grows_with_their_ranks(config: Config) -> None:
    from kvtier.config.adapters import Adapter

    lob = config.lob("support")
    base = lob.endpoints[0]
    model = endpoint_model(lob, base, "lobs/support.yaml")

    def adapters(rank: int, count: int) -> Endpoint:
        items = [
            Adapter.model_validate(
                {"name": f"a{i}", "rank": rank, "source": {"source": "s3", "bucket": "acme", "prefix": f"a{i}",
                                                           "weights_version": "v1"}}
            )
            for i in range(count)
        ]  # fmt: skip
        return base.model_copy(
            update={"adapters": tuple(items), "lora": base.lora.model_copy(update={"max_lora_rank": 64})}
        )

    small, large = engine_disk(adapters(8, 1), model), engine_disk(adapters(64, 4), model)
    assert 0 < small.adapters_gib < large.adapters_gib, (small, large)
    pod = engine_deployment(config.env, "support", adapters(64, 4), large)["spec"]["template"]["spec"]
    assert _volumes(pod)["lora-adapters"]["emptyDir"]["sizeLimit"] == f"{large.adapters_gib}Gi"


# ---- the rendered prod, as `cdk deploy` applies it --------------------------------------------------------------


def _lob_objects(synth: Synth) -> list[dict[str, Any]]:
    return [obj for stack in synth.stacks.lobs for chart in stack.outputs.charts for obj in chart.manifests()]


def test_rendered_prod_has_budgets_short_tolerations_and_bounded_volumes(prod: Synth) -> None:
    objects = _lob_objects(prod)
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    iecs = [o for o in objects if o["kind"] == "InferenceEndpointConfig"]
    engines = [
        d for d in deployments if d["spec"]["template"]["metadata"]["labels"].get("kvtier.io/component") == "engine"
    ]
    routers = [
        d for d in deployments if d["spec"]["template"]["metadata"]["labels"].get("kvtier.io/component") == "router"
    ]
    assert engines and routers and iecs, "prod renders standalone and operator endpoints"

    def budget(namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        return [
            p
            for p in pdbs
            if p["metadata"]["namespace"] == namespace and _matches(p["spec"]["selector"]["matchLabels"], labels)
        ]

    for deployment in [*engines, *routers]:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        found = budget(deployment["metadata"]["namespace"], labels)
        assert len(found) == 1, f"{deployment['metadata']['name']}: {len(found)} budgets (the Eviction API needs one)"
    for iec in iecs:
        found = budget(iec["metadata"]["namespace"], {"app": iec["metadata"]["name"]})
        assert len(found) == 1, f"operator endpoint {iec['metadata']['name']}: {len(found)} budgets"
        assert "ephemeral-storage" in iec["spec"]["worker"]["resources"]["requests"]
    for router in routers:
        pod = router["spec"]["template"]["spec"]
        assert router["spec"]["replicas"] == 2 and pod["topologySpreadConstraints"]
        seconds = {t["key"]: t.get("tolerationSeconds") for t in pod["tolerations"] if t.get("effect") == "NoExecute"}
        assert seconds == dict.fromkeys(NODE_LOSS_TAINTS, ROUTER_NODE_LOSS_S)
    for engine in engines:
        pod = engine["spec"]["template"]["spec"]
        empty = [v for v in pod["volumes"] if "emptyDir" in v]
        assert empty and all("sizeLimit" in v["emptyDir"] for v in empty), empty
        (container,) = pod["containers"]
        assert container["resources"]["requests"]["ephemeral-storage"], container["resources"]
        assert "preStop" in container["lifecycle"]
