"""LoRA adapters (issue 35): a valid list validates, and each bad input prints one line naming file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.cli import main as cli
from kvtier.config.adapters import ADAPTER_ROOT
from kvtier.rules import load_checked

COMMIT = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
ADAPTERS = f"""    lora: {{max_loras: 2, max_lora_rank: 16}}
    adapters:
      - {{name: faq, rank: 8, source: {{source: huggingface, id: acme/faq-lora, revision: {COMMIT}}}}}
      - {{name: billing, rank: 16, base_model: meta-llama/Llama-3.1-8B-Instruct,
         source: {{source: s3, bucket: acme-adapters, prefix: billing/, weights_version: v3}}}}
"""


def with_adapters(config_dir: Path, old: str = "", new: str = "") -> Path:
    """config_dir's support LOB (standalone endpoint llama31-8b) with two adapters, `old` replaced by `new`."""
    lob = config_dir / "lobs" / "support.yaml"
    text = lob.read_text().replace("    bench: {enabled: true}\n", "    bench: {enabled: true}\n" + ADAPTERS)
    assert old in text, old
    lob.write_text(text.replace(old, new))
    return lob


def _one_line(capsys: pytest.CaptureFixture[str], config_dir: Path) -> str:
    code = cli(["validate", "-e", "prod", "--config-dir", str(config_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err.removeprefix("kvtier validate: ")


def test_adapters_validate_with_a_version_in_their_path(config_copy: Path) -> None:
    with_adapters(config_copy)
    config = load_checked(config_copy, "prod")
    endpoint = next(e for lob in config.lobs for e in lob.endpoints if e.adapters)
    assert [a.path for a in endpoint.adapters] == [f"{ADAPTER_ROOT}/faq/{COMMIT}", f"{ADAPTER_ROOT}/billing/v3"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            f", revision: {COMMIT}",
            "",
            "endpoints[0].adapters[0].source.revision: adapter acme/faq-lora has no pinned version",
        ),
        (
            ", weights_version: v3",
            "",
            "endpoints[0].adapters[1].source.weights_version: adapter s3://acme-adapters/billing/ has no pinned",
        ),
        (
            f"revision: {COMMIT}}}",
            "revision: main}",
            "endpoints[0].adapters[0].source.revision: 'main' is not a commit",
        ),
        ("rank: 16, base", "rank: 32, base", "endpoints[0].adapters[1].rank: 32 is above lora.max_lora_rank 16"),
        ("name: billing", "name: faq", "endpoints[0].adapters[1].name: 'faq' is also the name of adapters[0]"),
        ("name: faq,", "name: FAQ_1,", "endpoints[0].adapters[0].name: 'FAQ_1' is not a valid adapter name"),
        (
            "base_model: meta-llama/",
            "base_model: other/",
            "endpoints[0].adapters[1].base_model: 'other/Llama-3.1-8B-Instruct' is not the endpoint's model",
        ),
        ("max_lora_rank: 16}", "max_lora_rank: 12}", "endpoints[0].lora.max_lora_rank: "),
        ("max_loras: 2,", "max_loras: 2, max_cpu_loras: 1,", "endpoints[0].lora.max_cpu_loras: 1 is below max_loras 2"),
        (
            "max_loras: 2, max_lora_rank: 16",
            "max_loras: 64, max_lora_rank: 256",
            "endpoints[0].lora.max_loras: vLLM reserves 88.0 GiB per GPU for 64 LoRA adapter slots of rank 256",
        ),
        (
            "mode: standalone",
            "mode: operator",
            "endpoints[0].adapters: the Inference Operator's InferenceEndpointConfig has no LoRA adapter field",
        ),
    ],
)
def test_bad_adapter_input_is_one_line(
    config_copy: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, expected: str
) -> None:
    lob = with_adapters(config_copy, old, new)
    line = _one_line(capsys, config_copy)
    assert line.startswith(f"{lob}: {expected}"), line
    assert "; " in line  # and what to do


def test_the_operator_crd_has_no_adapter_field() -> None:
    """The refusal's premise, read from the pinned Inference Operator CRD (the shared reference data)."""
    crd = Path(__file__).resolve().parents[2] / "../shared/reference/crds"
    path = crd / "inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"
    if not path.exists():
        pytest.skip(f"no {path} (the shared reference data)")
    text = path.read_text().lower()
    assert "lora" not in text
    assert "adapter" not in text
