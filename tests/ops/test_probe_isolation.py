"""`kvtier verify --probe --isolation` (issue 34) and `--adapter NAME` (issue 35) against test servers on 127.0.0.1:
each check holds on servers that key every tier on the salt and the adapter, and fails, naming the cause, on servers
that leak (an L2 shared across salts or adapters, as LMCache's own connector does; every tier shared); the engine's
refusal of a salt is passed through; the CLI builds the checks from the configuration."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.testserver import SALT_FORM_ERROR, SALT_TYPE_ERROR, Behaviour, FakeCluster
from kvtier.cli import main as cli
from kvtier.cli.verify import adapter_checks, isolation_checks, run_checks
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.errors import ExitCode, UsageError
from kvtier.ops.probe import PROMPT_WORDS, Check, Pod, ProbeTiming
from kvtier.rules import load_checked
from tests.config.test_adapters import with_adapters
from tests.support import CONFIG_DIR

DEV = load_checked(CONFIG_DIR, "dev")
OPERATOR = DEV.lobs[0].endpoints[0]  # retail/qwen3-8b: operator mode, LMCache, l2: curvine
STANDALONE = OPERATOR.model_copy(update={"mode": "standalone"})
BASE = "kvtier/fake-model"  # the test server's base model
TIMING = ProbeTiming(store_wait_s=5.0, settle_s=1.0)


class Access:
    """Pods named after the servers' order (a, b, ...), each on a node of its own."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = dict(zip("abcdef", urls, strict=False))

    def pods(self, lob: str, endpoint: str) -> list[Pod]:  # noqa: ARG002
        return [Pod(name, f"node-{name}", True) for name in self.urls]

    @contextlib.asynccontextmanager
    async def connect(self, lob: str, pod: Pod) -> AsyncIterator[str]:  # noqa: ARG002
        yield self.urls[pod.name]


def _endpoint(mode: str = "operator") -> Endpoint:
    base = OPERATOR if mode == "operator" else STANDALONE
    return base.model_copy(update={"model": base.model.model_copy(update={"id": BASE})})


def _run(urls: list[str], checks: list[Check], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    code = run_checks(DEV, checks, Access(urls), as_json=True, timing=TIMING)
    report = json.loads(capsys.readouterr().out)
    return code, report["results"]


def _cached(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(r["step"], r["pod"], r["cached_tokens"]) for r in result["requests"]]


# ---- isolation ----------------------------------------------------------------------------------------------------


def test_salts_that_key_every_tier_are_isolated(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", _endpoint())], capsys)
        sent = [json.loads(json.dumps(log.body)) for server in cluster.servers for log in server.log]
    assert code == ExitCode.OK, result
    assert (result["check"], result["outcome"]) == ("isolation", "isolated")
    assert _cached(result) == [
        ("salt X", "a", 0),
        ("salt X", "b", PROMPT_WORDS),
        ("salt Y", "b", 0),
        ("no salt", "a", 0),
    ]
    salts = [body.get("cache_salt") for body in sent]
    assert salts[0] == salts[2] and salts[1] is None and salts[3] not in (None, salts[0])  # a: X, none; b: X, Y
    assert len({body["prompt"] for body in sent}) == 1  # one fresh prompt throughout
    assert result["message"].startswith(f"salt X took {PROMPT_WORDS:,} cached tokens on its second request (pod b)")


@pytest.mark.parametrize(
    ("scope", "endpoint", "cause"),
    [
        ("gpu", _endpoint("operator"), "operator mode: the Inference Operator wires LMCache's own connector"),
        ("gpu", _endpoint("standalone"), "kvtier's LMCache connector did not tag the cache_salt"),
        ("none", _endpoint("operator"), "operator mode"),
    ],
)
def test_a_server_that_shares_kv_across_salts_is_a_leak_with_its_cause(
    scope: str, endpoint: Endpoint, cause: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "gpu": the L2 ignores the salt (LMCache's own connector: vLLM's GPU cache still keys on it); "none": every
    tier ignores it."""
    with FakeCluster(2, Behaviour(salt_scope=scope)) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", endpoint)], capsys)
    assert code == ExitCode.PROBLEMS and result["outcome"] == "leak", result
    assert _cached(result)[2:] == [("salt Y", "b", PROMPT_WORDS), ("no salt", "a", PROMPT_WORDS)]
    assert result["message"].startswith(
        f"KV crossed the cache_salt: salt Y on pod b took {PROMPT_WORDS:,} cached tokens; no salt on pod a took"
    )
    assert cause in result["message"]


def test_one_ready_pod_checks_its_own_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(1) as good, FakeCluster(1, Behaviour(salt_scope="gpu")) as leaky:
        code, (result,) = _run(good.urls, [Check("retail", _endpoint())], capsys)
        assert code == ExitCode.OK and _cached(result)[1] == ("salt X", "a", PROMPT_WORDS), result
        code, (result,) = _run(leaky.urls, [Check("retail", _endpoint())], capsys)
    assert code == ExitCode.PROBLEMS and result["outcome"] == "leak", result


def test_without_a_hit_for_salt_x_nothing_is_judged(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, shared_l2=False) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", _endpoint())], capsys)
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss", result
    assert "the second request with salt X (another pod, pod b) took no cached tokens" in result["message"]


def test_an_engine_that_reports_no_cached_tokens_cannot_pass(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, Behaviour(prompt_tokens_details=False)) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", _endpoint())], capsys)
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss"
    assert "--enable-prompt-tokens-details" in result["message"]


@pytest.mark.parametrize(
    ("salt", "error"),
    [("x" * 129, SALT_FORM_ERROR), ("tenant@a", SALT_FORM_ERROR), ("", SALT_TYPE_ERROR), (123, SALT_TYPE_ERROR)],
)
def test_a_salt_the_engine_refuses_is_its_own_error(salt: Any, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", _endpoint(), salt=salt)], capsys)
    assert code == ExitCode.USAGE and result["outcome"] == "refused"
    assert result["message"] == f"the engine on pod a refused the request with salt X: HTTP 400: {error}"


def test_the_cli_checks_every_endpoint_and_refuses_half_asked_flags(
    capsys: pytest.CaptureFixture[str], config_copy: Path
) -> None:
    assert [(c.lob, c.endpoint.name, c.salt) for c in isolation_checks(DEV, "s1")] == [("retail", "qwen3-8b", "s1")]
    for argv, words in (
        (["--isolation"], "add --probe"),
        (["--adapter", "faq"], "add --probe"),
        (["--probe", "--salt", "s"], "add --isolation"),
    ):
        assert cli(["verify", "--config-dir", str(config_copy), *argv]) == ExitCode.USAGE
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err


# ---- adapters -----------------------------------------------------------------------------------------------------

ADAPTERS = Behaviour(adapters=("faq", "billing"))


def _adapter_check(others: tuple[str, ...] = ("billing", BASE)) -> Check:
    return Check("support", _endpoint("standalone"), adapter="faq", others=others)


def test_an_adapter_hits_across_replicas_and_no_other_model_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, ADAPTERS) as cluster:
        code, (result,) = _run(cluster.urls, [_adapter_check()], capsys)
        models = [(server.url[-5:], log.body["model"]) for server in cluster.servers for log in server.log]
    assert code == ExitCode.OK and (result["check"], result["outcome"]) == ("adapter", "hit"), result
    assert _cached(result) == [
        ("adapter faq", "a", 0),
        ("adapter faq", "b", PROMPT_WORDS),
        ("adapter billing", "b", 0),
        ("the base model", "a", 0),
    ]
    assert [m for _, m in models] == ["faq", BASE, "faq", "billing"]  # server a: faq, base; server b: faq, billing


def test_an_l2_that_ignores_the_adapter_is_a_leak(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, Behaviour(adapters=("faq", "billing"), adapter_scope="gpu")) as cluster:
        code, (result,) = _run(cluster.urls, [_adapter_check()], capsys)
    assert code == ExitCode.PROBLEMS and result["outcome"] == "leak", result
    assert result["message"].startswith("KV crossed the LoRA adapter: adapter billing on pod b took")
    assert "kvtier's LMCache connector did not tag the LoRA adapter" in result["message"]


def test_an_adapter_check_needs_two_pods_and_the_adapter(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(1, ADAPTERS) as one, FakeCluster(2) as plain:
        code, (result,) = _run(one.urls, [_adapter_check()], capsys)
        assert code == ExitCode.PROBLEMS and "needs two ready pods on different nodes" in result["message"]
        code, (result,) = _run(plain.urls, [_adapter_check()], capsys)
    assert code == ExitCode.PROBLEMS and result["message"].startswith("pod a does not serve adapter faq")


def test_the_cli_builds_adapter_checks_from_the_configuration(config_copy: Path) -> None:
    with_adapters(config_copy)
    config: Config = load_checked(config_copy, "prod")
    (check,) = adapter_checks(config, "faq")
    assert (check.lob, check.endpoint.name, check.others) == (
        "support",
        "llama31-8b",
        ("billing", check.endpoint.model.id),
    )
    with pytest.raises(
        UsageError, match=r"no endpoint of prod serves adapter 'nope'; adapters: faq \(support/llama31-8b\)"
    ):
        adapter_checks(config, "nope")


def test_without_an_l2_isolation_is_checked_on_one_pod(capsys: pytest.CaptureFixture[str]) -> None:
    """Replicas without an L2 share nothing: every request goes to pod a (its GPU and CPU caches)."""
    no_l2 = _endpoint().model_copy(update={"cache": OPERATOR.cache.model_copy(update={"l2": "none"})})
    with FakeCluster(2) as cluster:
        code, (result,) = _run(cluster.urls, [Check("retail", no_l2)], capsys)
        code_adapter, (adapter,) = _run(cluster.urls, [Check("retail", no_l2, adapter="faq", others=(BASE,))], capsys)
    assert code == ExitCode.OK and {pod for _, pod, _ in _cached(result)} == {"a"}, result
    assert (
        code_adapter == ExitCode.PROBLEMS and adapter["message"] == "the endpoint has no L2: its replicas share no KV"
    )
