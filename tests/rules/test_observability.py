"""The `observability` section: the examples load; bad input is refused with file, field and fix on one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.errors import ConfigError
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

Edit = Callable[[dict[str, Any]], None]
ARN = "arn:aws:aps:us-west-2:111122223333:workspace/ws-01234567-89ab-cdef-0123-456789abcdef"


def _obs(**values: Any) -> Edit:
    return lambda d: d.update(observability=values)


BAD: list[tuple[str, Edit, str, str]] = [
    ("unknown mode", _obs(mode="datadog"), "observability.mode", "prometheus-operator"),
    ("operator mode without settings", _obs(mode="prometheus-operator"), "observability.prometheus_operator", "add"),
    (
        "settings of another mode",
        _obs(mode="none", hyperpod_addon={"amp_workspace_arn": ARN}),
        "observability.hyperpod_addon",
        "set mode: hyperpod-addon",
    ),
    (
        "not a workspace ARN",
        _obs(mode="hyperpod-addon", hyperpod_addon={"amp_workspace_arn": "ws-123"}),
        "observability.hyperpod_addon.amp_workspace_arn",
        "write it like arn:aws:aps:",
    ),
    (
        "workspace in another region",
        _obs(mode="hyperpod-addon", hyperpod_addon={"amp_workspace_arn": ARN.replace("us-west-2", "eu-west-1")}),
        "observability.hyperpod_addon.amp_workspace_arn",
        "use a workspace in us-west-2",
    ),
    (
        "prompt threshold between histogram buckets",
        _obs(long_prompt_tokens=1024),
        "observability.long_prompt_tokens",
        "1000, 2000",
    ),
    (
        "bad selector label",
        _obs(
            mode="prometheus-operator",
            prometheus_operator={"dashboards_namespace": "monitoring", "selector_labels": {"release": "a b"}},
        ),
        "observability.prometheus_operator.selector_labels",
        "is not a Kubernetes label",
    ),
    ("pool threshold of 1", _obs(pool_usage_alert_fraction=1.0), "observability.pool_usage_alert_fraction", "< 1"),
]


@pytest.mark.parametrize(("case", "edit", "field", "words"), BAD, ids=[c[0] for c in BAD])
def test_bad_observability_is_refused_with_file_field_and_fix(
    case: str, edit: Edit, field: str, words: str, config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_copy / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as raised:
        load_checked(config_copy, "dev")
    prefix = f"{path}: {field}: "
    messages = [str(p) for p in raised.value.problems]
    assert any(m.startswith(prefix) and words in m and "; " in m and "\n" not in m for m in messages), messages
    assert cli(["validate", "--config-dir", str(config_copy)]) == 2
    err = capsys.readouterr().err
    assert prefix in err and "Traceback" not in err


def test_the_examples_use_each_mode() -> None:
    modes = {name: load_checked(CONFIG_DIR, name).env.observability.mode for name in ("dev", "prod", "byoc")}
    assert modes == {"dev": "prometheus-operator", "prod": "prometheus-operator", "byoc": "hyperpod-addon"}


def test_mode_none_needs_nothing(config_copy: Path) -> None:
    path = config_copy / "environments" / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    data["observability"] = {"mode": "none"}
    path.write_text(yaml.safe_dump(data))
    assert load_checked(config_copy, "dev").env.observability.prometheus_operator is None
