"""Messages a newcomer met that blamed the wrong thing (issue 39): each is one line naming the field and the fix.

Before: `region: us-west-9` blamed availability_zones[0] and suggested inventing us-west-9a; `model.source: gcs`
printed the whole model mapping and said it "does not say which kind it is"; an empty tag key was "too long".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.cli import main as cli


@pytest.mark.parametrize(
    ("file", "old", "new", "line"),
    [
        (
            "environments/dev.yaml", "region: us-west-2", "region: us-west-9",
            "environments/dev.yaml: region: 'us-west-9' is not a region where HyperPod offers an instance type of "
            "kvtier's catalog; use one such as us-west-2 or us-west-1",
        ),
        (
            "lobs/retail.yaml", "source: huggingface, token_secret: null", "source: gcs, token_secret: null",
            "lobs/retail.yaml: endpoints[0].model.source: 'gcs' is not a kind kvtier knows; use one of 'huggingface', "
            "'s3'",
        ),
        (
            "environments/dev.yaml", "tags: {}", 'tags: {"": x}',
            "environments/dev.yaml: tags: a tag has an empty key; give every tag a key of 1-128 characters",
        ),
    ],
    ids=["region", "model-source", "empty-tag-key"],
)  # fmt: skip
def test_the_message_names_what_is_wrong(
    config_copy: Path, capsys: pytest.CaptureFixture[str], file: str, old: str, new: str, line: str
) -> None:
    path = config_copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    code = cli(["validate", "-e", "dev", "--config-dir", str(config_copy)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err == f"kvtier validate: {config_copy}/{line}"
