"""A stand-in for a vLLM engine with vLLM's fs tier, for tests/tools/test_l2engines.py (standard library only): run as
`vllm.entrypoints.openai.api_server` from a folder first on PYTHONPATH (tests/engine/fake_engine.py), with the flags
kvtier renders. A prompt it has no files for is stored as one file a full block in the fs tier's root_dir; a prompt
with files (another replica's) is an L2 hit: the files are read and the fs tier's counters grow as vLLM's do, or, when
the file named by FAIL_FILE_ENV exists, the load fails (the promotion job failure counter)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

FILE_BYTES = 4096  # small files: the test checks the flow, not the rate
FAIL_FILE_ENV = "KVTIER_FAKE_L2_FAIL_FILE"
FS = 'tier="1:fs"'


COUNTERS = {"read_bytes": 0.0, "read_time": 0.0, "failures": 0.0, "hits": 0.0}
LOCK = threading.Lock()


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def root_dir(argv: list[str]) -> Path:
    extra = json.loads(flag(argv, "--kv-transfer-config"))["kv_connector_extra_config"]
    return Path(extra["secondary_tiers"][0]["root_dir"])


def complete(prompt: list[int]) -> int:
    """Store or load the prompt's full blocks; the tokens loaded from L2."""
    root, block = root_dir(sys.argv), int(flag(sys.argv, "--block-size"))
    blocks = len(prompt) // block
    key = hashlib.sha256(json.dumps(prompt[: blocks * block]).encode()).hexdigest()[:16]
    paths = [root / f"{key}-{index}.bin" for index in range(blocks)]
    if not all(p.exists() for p in paths):
        root.mkdir(parents=True, exist_ok=True)
        for path in paths:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(b"k" * FILE_BYTES)
            tmp.replace(path)
        return 0
    fail_file = os.environ.get(FAIL_FILE_ENV, "")
    with LOCK:
        if fail_file and Path(fail_file).exists():
            COUNTERS["failures"] += 1
            return 0
        started = time.monotonic()
        done = sum(len(p.read_bytes()) for p in paths)
        COUNTERS["read_time"] += time.monotonic() - started
        COUNTERS["read_bytes"] += done
        COUNTERS["hits"] += blocks * block
    return blocks * block


def metrics() -> str:
    with LOCK:
        return (
            f"vllm:kv_offload_tiering_read_bytes_total{{{FS}}} {COUNTERS['read_bytes']}\n"
            f"vllm:kv_offload_tiering_read_time_total{{{FS}}} {COUNTERS['read_time']}\n"
            f"vllm:kv_offload_tiering_promotion_job_failures_total{{{FS}}} {COUNTERS['failures']}\n"
            f"vllm:external_prefix_cache_hits_total {COUNTERS['hits']}\n"
        )


class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, body: bytes, kind: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self.answer(metrics().encode(), "text/plain")
        else:
            model = flag(sys.argv, "--served-model-name")
            self.answer(json.dumps({"data": [{"id": model}]}).encode())

    def do_POST(self) -> None:
        request: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cached = complete(request["prompt"])
        usage = {"prompt_tokens": len(request["prompt"]), "prompt_tokens_details": {"cached_tokens": cached}}
        self.answer(json.dumps({"choices": [{"text": "x"}], "usage": usage}).encode())

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    http.server.ThreadingHTTPServer(("127.0.0.1", int(flag(sys.argv, "--port"))), Handler).serve_forever()
