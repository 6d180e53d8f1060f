"""A third-party OpenAI client drives the test server: NVIDIA AIPerf 0.13.0 (its own venv, .venv-aiperf, from
requirements-aiperf.txt; `make pytest` builds it) profiles streaming completions and streaming chat, offline, with a
tokenizer built here (aiperf_tokenizer.py), and every request must succeed with the completion tokens it asked for.

AIPerf drops an answer whose `object` it does not know (`aiperf/endpoints/openai_chat.py`
`extract_chat_response_data`, `openai_completions.py`): the server without `object`, `id`, `model` and `created` got
0 of 10 valid requests on both endpoints. About 10 s per endpoint here.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvtier.bench.testserver import Behaviour, FakeCluster
from tests.support import ROOT

AIPERF_VENV = ROOT / ".venv-aiperf"
REQUESTS = 10
OUTPUT_TOKENS = 8  # fewer than the server's 16, so the answers' length is what the requests asked for


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (AIPERF_VENV / "bin" / "aiperf").exists():
        pytest.fail(f"{AIPERF_VENV} is missing; run `make pytest` (it installs requirements-aiperf.txt)")
    hub = tmp_path_factory.mktemp("hf-hub")
    subprocess.run(
        [str(AIPERF_VENV / "bin" / "python"), str(Path(__file__).with_name("aiperf_tokenizer.py")), str(hub)],
        check=True, capture_output=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    return hub


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_aiperf_gets_every_streaming_request_answered(endpoint: str, hub: Path, tmp_path: Path) -> None:
    fast = Behaviour(cold_s=0.02, l2_s=0.01, warm_s=0.005, itl_s=0.002)
    with FakeCluster(1, fast) as cluster:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VIRTUAL_ENV"))},
            "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1",
        }  # fmt: skip
        done = subprocess.run(
            [
                str(AIPERF_VENV / "bin" / "aiperf"), "profile", "--model", fast.model,
                "--tokenizer", "kvtier/tiny-tokenizer", "--url", cluster.urls[0], "--endpoint-type", endpoint,
                "--streaming", "--request-count", str(REQUESTS), "--concurrency", "2",
                "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0", "--use-server-token-count",
                "--workers-max", "1", "--record-processors", "1", "--ui-type", "none",
                "--artifact-dir", str(tmp_path / "aiperf"),
            ],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        logged = list(cluster.servers[0].log)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "aiperf" / "profile_export_aiperf.json").read_text())
    assert result["request_count"]["avg"] == REQUESTS
    assert result.get("error_request_count") is None, result["error_summary"]
    assert result["output_sequence_length"]["min"] == result["output_sequence_length"]["max"] == OUTPUT_TOKENS
    assert len(logged) == REQUESTS
    # chat asks with max_completion_tokens (the OpenAI chat name), completions with max_tokens
    asked = "max_completion_tokens" if endpoint == "chat" else "max_tokens"
    assert {entry.body.get(asked) for entry in logged} == {OUTPUT_TOKENS}
    assert {entry.max_tokens for entry in logged} == {OUTPUT_TOKENS}
