"""HyperPod Tiered Storage is one key space for the whole cluster (issue 34): each `l2: tieredstorage` endpoint's
LMCache keys start from a hash seed of its own, the same on every replica; `validate` refuses what it cannot keep
apart, and `validate --previous` says when the tier starts cold. LMCache's own key code, fed these settings, is run
by tests/engine/test_tiered_storage_keys.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import l2_identity
from kvtier.connectors.lmcache import LMCACHE, LMCacheConnector
from kvtier.errors import ConfigError
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.naming import L2_IDENTITY_ANNOTATION
from kvtier.ops.verify import pod_problems
from kvtier.rules import load_checked
from kvtier.rules.day2 import cold_starts
from tests.support import CONFIG_DIR


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _tiered(config: Config, lob: str = "retail", **update: Any) -> Endpoint:
    endpoint = config.lob(lob).endpoints[0]
    return endpoint.model_copy(update={"cache": CacheConfig(l1_gb=20, l2="tieredstorage"), **update})


def _revised(endpoint: Endpoint, revision: str) -> Endpoint:
    return endpoint.model_copy(update={"model": endpoint.model.model_copy(update={"revision": revision})})


def _iec(config: Config, lob: str, endpoint: Endpoint) -> dict[str, Any]:
    return inference_endpoint_config(config.env, lob, endpoint)


def _seed(iec: dict[str, Any]) -> str:
    (seed,) = [v["value"] for v in iec["spec"]["worker"]["environmentVariables"] if v["name"] == "PYTHONHASHSEED"]
    return str(seed)


def test_each_identity_lob_and_endpoint_gets_its_own_seed_and_every_replica_the_same(prod: Config) -> None:
    a = _tiered(prod)
    seeds = {
        "a": _seed(_iec(prod, "retail", a)),
        "a again": _seed(_iec(prod, "retail", a)),  # what every replica of the endpoint renders
        "new revision": _seed(_iec(prod, "retail", _revised(a, "c" * 40))),
        "another LOB": _seed(_iec(prod, "search", a)),  # the same facts, another tenant
        "another name": _seed(_iec(prod, "retail", a.model_copy(update={"name": "qwen3-8b-b"}))),
    }
    assert seeds["a"] == seeds["a again"]
    assert len({seeds[k] for k in seeds if k != "a again"}) == 4, seeds
    assert all(0 <= int(s) < 2**32 and s != "0" for s in seeds.values())  # CPython's PYTHONHASHSEED range
    # The identity is on the object too, for `validate --previous`; a Curvine endpoint keeps the shared seed.
    assert _iec(prod, "retail", a)["metadata"]["annotations"][L2_IDENTITY_ANNOTATION] == l2_identity(a)
    assert _seed(_iec(prod, "retail", prod.lob("retail").endpoints[0])) == "0"


def test_the_break_switch_renders_the_shared_seed(prod: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVTIER_TIERED_KEYS_BREAK", "1")
    a = _tiered(prod)
    assert _seed(_iec(prod, "retail", a)) == _seed(_iec(prod, "retail", _revised(a, "c" * 40))) == "0"


def _write_tiered(config_copy: Path, lob: str, **endpoint: Any) -> Path:
    path = config_copy / "lobs" / f"{lob}.yaml"
    data = yaml.safe_load(path.read_text())
    data["endpoints"][0]["cache"]["l2"] = "tieredstorage"
    data["endpoints"][0].update(endpoint)
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_accepts_tiered_storage_endpoints_it_keeps_apart(config_copy: Path) -> None:
    _write_tiered(config_copy, "retail")
    _write_tiered(config_copy, "search")
    load_checked(config_copy, "prod")  # no error: two LOBs, two seeds


def test_an_image_whose_lmcache_keys_are_not_proven_is_refused_in_one_line(config_copy: Path) -> None:
    path = _write_tiered(config_copy, "retail", image="registry.example/vllm:0.12.0")
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "prod")
    (problem,) = [p for p in err.value.problems if p.field == "endpoints[0].image"]
    assert problem.file == str(path)
    assert "one key space for the whole cluster" in problem.problem and "0.3.9.post2" in problem.problem
    assert problem.allowed == "leave image unset (the operator's default image), or use l2: curvine"
    assert "\n" not in str(problem)


def test_the_default_operator_image_pinned_by_digest_keeps_its_lmcache_version(prod: Config) -> None:
    a = _tiered(prod, image="public.ecr.aws/deep-learning-containers/vllm:0.11.1-gpu-py312-cu129-ubuntu22.04-ec2-v1.0"
                + "@sha256:" + "1" * 64)  # fmt: skip
    assert LMCACHE.refusals(a) == [] and LMCACHE.lmcache_version(a) == "0.3.9.post2"


def test_two_endpoints_whose_seeds_meet_are_refused(config_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed is 32 bits (what PYTHONHASHSEED takes): two endpoints meet with one chance in 2^32, never unseen."""
    _write_tiered(config_copy, "retail")
    search = _write_tiered(config_copy, "search")
    original = LMCacheConnector.hash_seed

    def colliding(self: LMCacheConnector, endpoint: Endpoint, namespace: str) -> str:
        return "7" if endpoint.cache.l2 == "tieredstorage" else original(self, endpoint, namespace)

    monkeypatch.setattr(LMCacheConnector, "hash_seed", colliding)
    with pytest.raises(ConfigError) as err:
        load_checked(config_copy, "prod")
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == (str(search), "endpoints[0].cache.l2")
    assert "same hash seed (7) as retail/qwen3-8b's" in problem.problem


def _template(*objects: dict[str, Any]) -> dict[str, Any]:
    manifest = {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": json.dumps(objects)}}
    return {"Resources": {"Manifest": manifest}}


def test_validate_previous_says_when_the_tier_starts_cold(prod: Config) -> None:
    a = _tiered(prod)
    old, new = _iec(prod, "retail", a), _iec(prod, "retail", _revised(a, "c" * 40))
    (change,) = cold_starts({"s": _template(old)}, {"s": _template(new)})
    assert change.why.startswith("L2 starts cold: weights changed")
    assert "Tiered Storage keys start from a new hash seed" in change.why and "janitor" not in change.why
    assert cold_starts({"s": _template(old)}, {"s": _template(_iec(prod, "retail", a))}) == []
    # An endpoint deployed before its keys carried an identity: no annotation, the shared seed.
    before = json.loads(json.dumps(old))
    del before["metadata"]["annotations"]
    for var in before["spec"]["worker"]["environmentVariables"]:
        if var["name"] == "PYTHONHASHSEED":
            var["value"] = "0"
    (once,) = cold_starts({"s": _template(before)}, {"s": _template(old)})
    assert once.why.startswith("L2 starts cold once: its Tiered Storage keys now carry its identity")
    # A Curvine endpoint (the Policy's marker) keeps the directory wording.
    curvine = prod.lob("retail").endpoints[0]
    (moved,) = cold_starts(
        {"s": _template(_iec(prod, "retail", curvine))},
        {"s": _template(_iec(prod, "retail", _revised(curvine, "d" * 40)))},
    )
    assert "new, empty L2 directory" in moved.why


def test_verify_flags_a_tiered_storage_pod_on_another_seed(prod: Config) -> None:
    a = _tiered(prod)
    env = [*_iec(prod, "retail", a)["spec"]["worker"]["environmentVariables"]]
    env.append({"name": "LMCACHE_REMOTE_URL", "value": "sagemaker-hyperpod://$(NODE_IP):9200"})  # the operator's
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "kvtier-retail"},
        "spec": {"containers": [{"name": a.name, "env": env}]},
    }
    assert pod_problems(a, pod) == []
    shared = [dict(v, value="0") if v["name"] == "PYTHONHASHSEED" else v for v in env]
    pod["spec"]["containers"][0]["env"] = shared
    (problem,) = pod_problems(a, pod)
    assert problem.startswith("PYTHONHASHSEED is '0', not ") and "Tiered Storage keys apart" in problem
