"""`hyperpod: {existing: ...}`: the example loads; every kind of bad input names its field; node placement follows the
owner's selectors; the install switches decide what the cluster and platform stacks build (constructed, not
synthesized)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.config.loader import Config
from kvtier.errors import ConfigError
from kvtier.k8s.placement import placement
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

Edit = Callable[[dict[str, Any]], None]


def _existing(d: dict[str, Any]) -> dict[str, Any]:
    existing: dict[str, Any] = d["hyperpod"]["existing"]
    return existing


def _write(config_dir: Path, edit: Edit) -> Path:
    path = config_dir / "environments" / "byoc.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    return path


def _load(config_copy: Path, edit: Edit) -> Config:
    _write(config_copy, edit)
    return load_checked(config_copy, "byoc")


def test_the_example_loads_with_the_owners_groups_and_selectors() -> None:
    env = load_checked(CONFIG_DIR, "byoc").env
    existing = env.hyperpod.existing
    assert existing is not None and not env.hyperpod.instance_groups
    assert [(g.name, g.role, g.count) for g in env.groups("gpu")] == [("inference", "gpu", 3)]
    assert [(g.name, g.role) for g in env.groups("system")] == [("controllers", "system")]
    assert placement(env, "gpu").node_selector == {"sagemaker.amazonaws.com/instance-group-name": "inference"}
    assert placement(env, "system").node_selector == {"sagemaker.amazonaws.com/instance-group-name": "controllers"}
    assert env.hyperpod.eks_cluster_name(env.name) == "ml-cluster-eks"
    assert existing.oidc_issuer == "oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF"


def test_a_new_cluster_keeps_kvtiers_labels_and_installs_everything() -> None:
    env = load_checked(CONFIG_DIR, "dev").env
    assert placement(env, "gpu").node_selector == {"kvtier.io/role": "gpu"}
    assert env.hyperpod.eks_cluster_name(env.name) == "kvtier-dev"
    assert all(env.hyperpod.installs(c) for c in ("hyperpod_dependencies", "inference_operator", "kyverno", "curvine"))
    assert env.hyperpod.installs_addon("vpc-cni", "network")


def test_owner_taints_become_tolerations(config_copy: Path) -> None:
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    env = _load(config_copy, lambda d: _existing(d)["nodes"]["gpu"].update(taints=[taint])).env
    assert placement(env, "gpu").tolerations == (
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    )
    assert placement(env, "system").tolerations == ()


def test_switches(config_copy: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        _existing(d)["install"].update(addons=["cert-manager", "network"], curvine=False)

    hyperpod = _load(config_copy, edit).env.hyperpod
    assert hyperpod.installs_addon("cert-manager", "nodes") and hyperpod.installs_addon("coredns", "network")
    assert not hyperpod.installs_addon("metrics-server", "nodes")
    assert not hyperpod.installs("curvine") and hyperpod.installs("kyverno")


# (case, edit of byoc.yaml, field path expected in the message, words expected in the message)
BAD_INPUTS: list[tuple[str, Edit, str, str]] = [
    ("both kinds", lambda d: d["hyperpod"].update(instance_groups=[]), "hyperpod.existing", "exactly one"),
    ("neither kind", lambda d: d["hyperpod"].pop("existing"), "hyperpod.instance_groups", "existing:"),
    ("no cluster name", lambda d: d["hyperpod"].pop("cluster_name"), "hyperpod.cluster_name", "list-clusters"),
    (
        "node recovery set",
        lambda d: d["hyperpod"].update(node_recovery="None"),
        "hyperpod.node_recovery",
        "passes the current",
    ),
    (
        "cluster ARN by name",
        lambda d: _existing(d).update(hyperpod_cluster_arn="ml-cluster"),
        "hyperpod.existing.hyperpod_cluster_arn",
        "cluster/abcdef123456",
    ),
    (
        "provider in another account",
        lambda d: _existing(d).update(
            oidc_provider_arn="arn:aws:iam::444455556666:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC"
        ),
        "hyperpod.existing.oidc_provider_arn",
        "cluster's account",
    ),
    (
        "provider in another region",
        lambda d: _existing(d).update(
            oidc_provider_arn="arn:aws:iam::111122223333:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC"
        ),
        "hyperpod.existing.oidc_provider_arn",
        "region",
    ),
    (
        "kubectl role not a role",
        lambda d: _existing(d).update(kubectl_role_arn="arn:aws:iam::111122223333:user/bob"),
        "hyperpod.existing.kubectl_role_arn",
        "role/",
    ),
    (
        "subnet id",
        lambda d: _existing(d).update(subnet_ids=["subnet-xyz"]),
        "hyperpod.existing.subnet_ids[0]",
        "subnet-",
    ),
    ("no subnets", lambda d: _existing(d).update(subnet_ids=[]), "hyperpod.existing.subnet_ids", "at least 1"),
    (
        "gpu type under system",
        lambda d: _existing(d)["nodes"]["system"]["groups"][0].update(instance_type="ml.g6e.xlarge"),
        "hyperpod.existing.nodes.system.groups[0].instance_type",
        "role system",
    ),
    (
        "group listed twice",
        lambda d: _existing(d)["nodes"]["gpu"]["groups"].append(
            {"name": "inference", "instance_type": "ml.g6e.4xlarge", "count": 1}
        ),
        "hyperpod.existing.nodes.gpu.groups[1].name",
        "listed twice",
    ),
    (
        "empty selector",
        lambda d: _existing(d)["nodes"]["gpu"].update(selector={}),
        "hyperpod.existing.nodes.gpu.selector",
        "at least 1",
    ),
    (
        "selector label key",
        lambda d: _existing(d)["nodes"]["gpu"].update(selector={"bad key!": "x"}),
        "hyperpod.existing.nodes.gpu.selector.bad key!",
        "label key",
    ),
    (
        "install switch missing",
        lambda d: _existing(d)["install"].pop("curvine"),
        "hyperpod.existing.install.curvine",
        "required",
    ),
    (
        "add-on listed twice",
        lambda d: _existing(d)["install"].update(addons=["nodes", "nodes"]),
        "hyperpod.existing.install.addons[1]",
        "twice",
    ),
    (
        "add-on name shape",
        lambda d: _existing(d)["install"].update(addons=["Cert Manager"]),
        "hyperpod.existing.install.addons[0]",
        "add-on name",
    ),
    ("unknown key", lambda d: _existing(d).update(bogus=1), "hyperpod.existing.bogus", "known keys here"),
    (
        "ebs size on an owner's group",
        lambda d: _existing(d)["nodes"]["gpu"]["groups"][0].update(ebs_gb=500),
        "hyperpod.existing.nodes.gpu.groups[0].ebs_gb",
        "unknown key",
    ),
]


@pytest.mark.parametrize(("case", "edit", "field", "words"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_names_its_field(
    config_copy: Path, capsys: pytest.CaptureFixture[str], case: str, edit: Edit, field: str, words: str
) -> None:
    path = _write(config_copy, edit)
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "byoc")
    messages = [str(p) for p in err.value.problems]
    assert any(m.startswith(f"{path}: {field}: ") and words in m for m in messages), (case, messages)
    assert cli(["validate", "--config-dir", str(config_copy), "-e", "byoc"]) == 2
    assert field in capsys.readouterr().err


# ---- what the switches build (stacks constructed, not synthesized) -------------------------------------------------


def _build(config: Config) -> Any:
    from kvtier.app.main import build

    return build(cdk.App(), config)


def test_switches_decide_what_the_stacks_hold(config_copy: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        _existing(d)["install"].update(
            addons=["cert-manager", "network"],
            hyperpod_dependencies=True,
            inference_operator=False,
            kyverno=False,
            curvine=False,
        )
        d["hyperpod"]["tiered_storage"] = {"enabled": False}
        d["lobs"] = []  # an operator endpoint with a Curvine L2 needs tiered storage (a loader cross-check)

    stacks = _build(_load(config_copy, edit))
    cluster = stacks.cluster
    assert {name for group in cluster.addons.values() for name in group.addons} == {
        "cert-manager",
        "vpc-cni",
        "kube-proxy",
        "coredns",
        "eks-pod-identity-agent",
    }
    assert cluster.hyperpod_dependencies is not None  # runs in the owner's VPC with kvtier's kubectl layer
    assert cluster.tiered_storage is None  # tiered storage off: the owner's setting is left alone
    assert stacks.platform.operator is None and stacks.platform.kyverno is None and stacks.platform.curvine == []
    assert {r.name for r in cluster.outputs.releases} >= {"cert-manager", "hyperpod-dependencies"}


def test_an_owner_kubectl_role_replaces_kvtiers_access_entry(config_copy: Path) -> None:
    role = "arn:aws:iam::111122223333:role/kvtier-kubectl"
    cluster = _build(_load(config_copy, lambda d: _existing(d).update(kubectl_role_arn=role))).cluster
    assert cluster.existing_eks.kubectl_access is None
    assert cluster.existing_eks.kubectl_provider.role.role_arn == role


def test_an_unknown_addon_is_refused_with_the_known_ones(config_copy: Path) -> None:
    with pytest.raises(ConfigError, match=r"install\.addons\[1\]: 'cert-manger' is not an add-on .*cert-manager"):
        _load(config_copy, lambda d: _existing(d)["install"].update(addons=["nodes", "cert-manger"]))
