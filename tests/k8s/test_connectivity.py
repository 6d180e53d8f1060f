"""The connectivity an independent evaluator (network-config-analyzer 2.1.0) computes over what kvtier renders, on the
synthesized prod and on a generated environment of three LOBs (operator and standalone mixed), asserted as a table:

- every LOB pod -> Curvine's RPC ports (8995, 8996, 8997): denied;
- LOB A -> LOB B's routers, engines and endpoints (every port; operator routers too): denied;
- Curvine <-> Curvine (workers, CSI and FUSE -> master RPC; masters -> journal; FUSE -> worker RPC; healer, janitors and
  scrapers -> master web): allowed;
- a router -> its own engines (standalone and operator): allowed; a non-LOB client -> a router: allowed;
- DNS from every LOB pod: allowed; the LOB egress allow-list (Pod Identity agent, HTTPS to an interface endpoint in
  the private subnets and beyond the VPC, the LOB's operator routers, the janitor to the master's web port): allowed,
  and plain HTTP beyond the VPC: denied.

KVTIER_ISOLATION_BREAK=1 renders the old manifests (no policy in `curvine`, no LOB egress, operator routers open):
`test_the_old_manifests_fail_the_same_table` shows the same assertions fail there (the counts it prints are the
closing note's). What nca cannot see is modelled or tested elsewhere: tests/k8s/connectivity.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvtier.config.loader import Config
from kvtier.config.network import plan_subnets
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.endpoint_names import ENGINE_PORT, OPERATOR_ROUTER_PORT, ROUTER_CONTAINER_PORT
from kvtier.k8s.isolation import BREAK_SWITCH, POD_IDENTITY_AGENT, POD_IDENTITY_PORT
from kvtier.naming import lob_namespace
from kvtier.rules import load_checked
from tests.k8s.connectivity import CLIENTS, FUSE_NODES, NCA, OUTSIDE, SCRAPERS, Modelled, Table, model, run_nca
from tests.support import CONFIG_DIR, many_lobs

RPC_PORTS = (curvine.MASTER_RPC_PORT, curvine.JOURNAL_PORT, curvine.WORKER_RPC_PORT)


def rendered(config: Config, tmp: Path) -> list[dict[str, Any]]:
    """Every object every stack of the environment applies (the CDK app built, not synthesized)."""
    from kvtier.app.main import build, new_app

    stacks = build(new_app(str(tmp / "cdk.out")), config)
    return [obj for stack in stacks.all for chart in stack.outputs.charts for obj in stack.outputs.objects(chart)]


@dataclass
class Case:
    config: Config
    modelled: Modelled
    table: Table


def _case(config: Config, tmp: Path) -> Case:
    if not NCA.exists():
        pytest.fail(f"{NCA} is missing; run `make pytest` (it installs requirements-nca.txt)")
    operator = {lob.name: [e.name for e in lob.endpoints if e.mode == "operator"] for lob in config.lobs}
    modelled = model(rendered(config, tmp), operator)
    table, output = run_nca(modelled.objects, tmp / "nca")
    assert table.endpoints > 0, output[-2000:]
    return Case(config, modelled, table)


def _component(case: Case, namespace: str, component: str) -> str:
    """The nca name of a kvtier-rendered workload, by namespace and kvtier.io/component or Curvine component label."""
    for obj in case.modelled.objects:
        if obj["kind"] in ("Namespace", "NetworkPolicy") or obj["metadata"]["namespace"] != namespace:
            continue
        labels = (obj["spec"].get("template", {}).get("metadata", {}) or obj["metadata"]).get("labels", {}) or {}
        if component in (labels.get("kvtier.io/component"), labels.get("app.kubernetes.io/component")):
            return f"{namespace}/{obj['metadata']['name']}[{obj['kind']}]"
    raise AssertionError(f"no {component} in {namespace}")


def _all(case: Case, namespace: str, component: str) -> list[str]:
    found = []
    for obj in case.modelled.objects:
        if obj["kind"] in ("Namespace", "NetworkPolicy") or obj["metadata"]["namespace"] != namespace:
            continue
        labels = (obj["spec"].get("template", {}).get("metadata", {}) or obj["metadata"]).get("labels", {}) or {}
        if labels.get("kvtier.io/component") == component:
            found.append(f"{namespace}/{obj['metadata']['name']}[{obj['kind']}]")
    return found


def checks(case: Case) -> Iterator[tuple[str, bool]]:
    """(assertion, holds) for the whole table (module doc)."""
    t, m = case.table, case.modelled
    master = _component(case, curvine.NAMESPACE, "master")
    worker = _component(case, curvine.NAMESPACE, "worker")
    dns = "kube-system/coredns[Pod]"
    client = f"{CLIENTS}/client[Pod]"
    prometheus = f"{SCRAPERS}/prometheus[Pod]"
    lobs = sorted({lob.name for lob in case.config.lobs})
    env = case.config.env
    subnets = plan_subnets(env.network.cidr, len(env.availability_zones), env.network.private_subnet_mask)
    assert subnets is not None
    endpoint_ip = str(subnets[len(env.availability_zones)].network_address + 10)  # a private subnet's address
    for pod, lob in sorted(m.lob_of.items()):
        in_lob_namespace = pod.startswith(lob_namespace(lob) + "/")
        for dst in (master, worker):
            for port in RPC_PORTS:
                yield f"{pod} -> {dst}:{port} denied", not t.allowed(pod, dst, "TCP", port)
        if in_lob_namespace:
            yield f"{pod} -> DNS allowed", t.allowed(pod, dns, "UDP", 53)
            yield (
                f"{pod} -> Pod Identity agent allowed",
                t.allowed_to_ip(pod, POD_IDENTITY_AGENT.split("/")[0], "TCP", POD_IDENTITY_PORT),
            )
            yield f"{pod} -> HTTPS beyond the VPC allowed", t.allowed_to_ip(pod, OUTSIDE, "TCP", 443)
            yield f"{pod} -> an interface endpoint allowed", t.allowed_to_ip(pod, endpoint_ip, "TCP", 443)
            yield f"{pod} -> HTTP beyond the VPC denied", not t.allowed_to_ip(pod, OUTSIDE, "TCP", 80)
        # A LOB admin runs pods in the LOB's namespace only: those are the sources that count (the operator's
        # router pods of every LOB share the operator's namespace, and a LOB admin cannot run code there).
        for other, other_lob in sorted(m.lob_of.items()) if in_lob_namespace else ():
            if other_lob != lob:
                yield (
                    f"{pod} -> {other} (LOB {other_lob}) denied",
                    not t.allowed(pod, other, "TCP", 0)
                    and not any(
                        t.allowed(pod, other, "TCP", p)
                        for p in (ENGINE_PORT, ROUTER_CONTAINER_PORT, OPERATOR_ROUTER_PORT)
                    ),
                )
    # Curvine <-> Curvine
    for component in ("worker", "csi-controller", "csi-node"):
        yield (
            f"{component} -> master RPC allowed",
            t.allowed(_component(case, curvine.NAMESPACE, component), master, "TCP", 8995),
        )
    other_master, other_worker = f"{curvine.NAMESPACE}/other-master[Pod]", f"{curvine.NAMESPACE}/other-worker[Pod]"
    yield "master -> master journal allowed", t.allowed(other_master, master, "TCP", curvine.JOURNAL_PORT)
    yield "master -> master RPC allowed", t.allowed(other_master, master, "TCP", curvine.MASTER_RPC_PORT)
    yield "worker -> worker RPC allowed", t.allowed(other_worker, worker, "TCP", curvine.WORKER_RPC_PORT)
    yield "worker -> journal denied", not t.allowed(other_worker, master, "TCP", curvine.JOURNAL_PORT)
    for ip in FUSE_NODES:
        yield f"FUSE {ip} -> master RPC allowed", t.allowed_from_ip(ip, master, "TCP", curvine.MASTER_RPC_PORT)
        yield f"FUSE {ip} -> worker RPC allowed", t.allowed_from_ip(ip, worker, "TCP", curvine.WORKER_RPC_PORT)
    yield (
        "another address -> master RPC denied",
        not t.allowed_from_ip("10.250.0.99", master, "TCP", curvine.MASTER_RPC_PORT),
    )
    healer = _component(case, curvine.NAMESPACE, "l2-healer")
    yield "healer -> master web allowed", t.allowed(healer, master, "TCP", curvine.MASTER_WEB_PORT)
    yield "scraper -> master web allowed", t.allowed(prometheus, master, "TCP", curvine.MASTER_WEB_PORT)
    yield "client -> master web denied", not t.allowed(client, master, "TCP", curvine.MASTER_WEB_PORT)
    for lob in lobs:
        namespace = lob_namespace(lob)
        for janitor in _all(case, namespace, "l2-janitor"):
            yield f"{janitor} -> master web allowed", t.allowed(janitor, master, "TCP", curvine.MASTER_WEB_PORT)
        routers, engines = _all(case, namespace, "router"), _all(case, namespace, "engine")
        for router in routers:
            yield f"client -> {router} allowed", t.allowed(client, router, "TCP", ROUTER_CONTAINER_PORT)
            for engine in engines:
                yield f"{router} -> {engine} allowed", t.allowed(router, engine, "TCP", ENGINE_PORT)
        for (owner, endpoint), router in sorted(m.operator_routers.items()):
            if owner != lob:
                continue
            engine = m.operator_engines[(owner, endpoint)]
            yield f"{router} -> {engine} allowed", t.allowed(router, engine, "TCP", ENGINE_PORT)
            yield f"client -> {router} allowed", t.allowed(client, router, "TCP", OPERATOR_ROUTER_PORT)
            for pod, pod_lob in sorted(m.lob_of.items()):
                if pod_lob == lob and pod.startswith(namespace + "/") and "[Pod]" not in pod:
                    yield f"{pod} -> own {router} allowed", t.allowed(pod, router, "TCP", OPERATOR_ROUTER_PORT)


def failures(case: Case) -> tuple[int, list[str]]:
    results = list(checks(case))
    return len(results), [name for name, holds in results if not holds]


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return _case(load_checked(CONFIG_DIR, "prod"), tmp_path_factory.mktemp("prod"))


@pytest.fixture(scope="module")
def three_lobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return many_lobs(tmp_path_factory.mktemp("config") / "config", 3, name="lobs3")


@pytest.fixture(scope="module")
def three_lobs(three_lobs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Case:
    return _case(load_checked(three_lobs_dir, "lobs3"), tmp_path_factory.mktemp("lobs3"))


def test_three_lobs_mix_operator_and_standalone(three_lobs: Case) -> None:
    modes = {e.mode for lob in three_lobs.config.lobs for e in lob.endpoints}
    assert modes == {"operator", "standalone"}
    assert len(three_lobs.config.lobs) == 3


@pytest.mark.parametrize("case_name", ["prod", "three_lobs"])
def test_the_evaluator_finds_the_table(case_name: str, request: pytest.FixtureRequest) -> None:
    case: Case = request.getfixturevalue(case_name)
    total, failed = failures(case)
    print(f"{case_name}: {total} assertions, {len(failed)} failed")
    assert failed == [], "\n".join(failed)
    assert total > 100


@pytest.mark.parametrize("config_name", ["prod", "lobs3"])
def test_the_old_manifests_fail_the_same_table(
    config_name: str, three_lobs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BREAK_SWITCH, "1")
    config = load_checked(CONFIG_DIR if config_name == "prod" else three_lobs_dir, config_name)
    case = _case(config, tmp_path)
    total, failed = failures(case)
    print(f"{config_name} under {BREAK_SWITCH}=1: {total} assertions, {len(failed)} failed")
    kinds = {name.split(" -> ")[1].split(":")[0].split(" ")[0] for name in failed if " -> " in name}
    assert failed, "the old manifests must fail the table"
    # Each finding of the review shows: LOB pods reach Curvine RPC (S1-1), another LOB's operator router (S3-1).
    assert any(":8995 denied" in f for f in failed) and any("router-pod" in f and "denied" in f for f in failed), kinds
