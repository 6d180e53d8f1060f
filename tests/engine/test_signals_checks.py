"""The signals run's checks and rule rendering without engines (in `make test`): each check fails on what a broken
rule or panel would show, and the test-only rendering changes only what signals.py says it changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvtier.k8s.observability import rules
from tests.engine import signals
from tests.engine.scenario import ENDPOINT
from tests.engine.signals import SOLO, Phase


def _record(endpoint: str, value: float) -> dict[str, object]:
    return {"metric": {"lob": "support", "kvtier_endpoint": endpoint}, "value": [0, str(value)]}


def _healthy() -> Phase:
    phase = Phase("healthy")
    for name in signals.record_names():
        phase.records[name] = [_record(ENDPOINT, 0.5), _record(SOLO, 0.5)]
    phase.panels = {"Hit rate per tier [llama31-8b]": [("x", 1)]}
    phase.variables = {"kvtier-overview.json/lob": ["support"], "kvtier-endpoint.json/endpoint": [ENDPOINT, SOLO]}
    return phase


def test_the_checks_pass_on_a_healthy_observation() -> None:
    phase = _healthy()
    signals.no_alert(phase)
    signals.every_record_has_data(phase)
    signals.tier_shares_follow_the_workload(phase)
    signals.every_panel_has_data(phase)
    signals.every_variable_lists(phase)


@pytest.mark.parametrize(
    "breakage",
    [
        "pending alert",
        "empty record",
        "record without the solo endpoint",
        "no L2 share",
        "empty panel",
        "variable without solo",
        "unhealthy rule",
    ],
)
def test_each_healthy_check_fails_on_what_a_defect_shows(breakage: str) -> None:
    phase = _healthy()
    name = "lob_endpoint:kvtier_l2_hit:ratio5m"
    if breakage == "pending alert":
        phase.seen["KvtierL2SilentMiss"] = {"pending"}
    elif breakage == "empty record":
        phase.records[name] = []
    elif breakage == "record without the solo endpoint":
        phase.records[name] = [_record(ENDPOINT, 0.5)]
    elif breakage == "no L2 share":
        phase.records[name] = [_record(ENDPOINT, 0.0), _record(SOLO, 0.0)]
    elif breakage == "empty panel":
        phase.panels["TTFT p50 / p90 [solo]"] = [("y", 0)]
    elif breakage == "variable without solo":
        phase.variables["kvtier-endpoint.json/endpoint"] = [ENDPOINT]
    else:
        phase.rule_health = [("lob:kvtier_l0_hit:ratio5m", "many-to-many matching")]
    checks = (
        signals.no_alert,
        signals.every_record_has_data,
        signals.tier_shares_follow_the_workload,
        signals.every_panel_has_data,
        signals.every_variable_lists,
    )
    failed = 0
    for check in checks:
        try:
            check(phase)
        except AssertionError:
            failed += 1
    assert failed >= 1, breakage


def _fired(name: str, after_s: float, **others: set[str]) -> Phase:
    phase = Phase("broken")
    phase.seen = {name: {"pending", "firing"}, **others}
    phase.severity = {name: "critical"}
    phase.fired_after_s = {name: after_s}
    return phase


def test_exactly_one_alert_fires() -> None:
    signals.exactly_fires(_fired("KvtierL2SilentMiss", 25), "KvtierL2SilentMiss", 20)
    signals.only_the_mount_alert_pages(_fired("KvtierL2WritesFailing", 25), 20)
    with pytest.raises(AssertionError, match="never fired"):
        signals.exactly_fires(Phase("p"), "KvtierL2SilentMiss", 20)
    with pytest.raises(AssertionError, match="also seen"):
        signals.exactly_fires(
            _fired("KvtierL2SilentMiss", 25, KvtierTtftSloBreached={"pending"}), "KvtierL2SilentMiss", 20
        )
    with pytest.raises(AssertionError, match="before its for"):
        signals.exactly_fires(_fired("KvtierL2SilentMiss", 3), "KvtierL2SilentMiss", 20)
    phase = _fired("KvtierL2WritesFailing", 25)
    phase.severity["KvtierL2WritesFailing"] = "warning"
    with pytest.raises(AssertionError, match="does not page"):
        signals.only_the_mount_alert_pages(phase, 20)


def test_the_rules_loaded_are_kvtiers_with_only_the_documented_changes(tmp_path: Path) -> None:
    config, lob = signals.signals_config()
    loaded = yaml.safe_load(signals.rule_file(tmp_path, config, lob).read_text())["groups"]
    shipped = [*rules.platform_groups(config.env), *rules.lob_groups(config.env, lob)]
    assert [g["name"] for g in loaded] == [g["name"] for g in shipped]
    for mine, theirs in zip(loaded, shipped, strict=True):
        theirs_kept = [r for r in theirs["rules"] if r.get("alert") not in signals.LEFT_OUT]
        assert len(mine["rules"]) == len(theirs_kept)
        for a, b in zip(mine["rules"], theirs_kept, strict=True):
            assert a["expr"] == b["expr"]
            if "alert" in a:
                assert a["for"] == signals.SIGNALS_FOR and b["for"] != signals.SIGNALS_FOR
    solo = [e for e in lob.endpoints if e.name == SOLO]
    assert len(solo) == 1 and solo[0].replicas == 1
