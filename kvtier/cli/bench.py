"""`kvtier bench`: measure TTFT and cache hits of an OpenAI-compatible endpoint (a router, or one pod).

Workloads: sweep (cross-pod reuse per prompt length), multiturn, shared-prefix (routing under load), trace (Mooncake
replay); `compare` diffs two result files. Each run writes result.json, summary.md and PNG plots.
Exit codes: 0 ok; 1 requests ran and a run had no success (the sweep's read side, say), or more failed than
--max-error-rate; 2 bad flags or an unreadable trace; 3 no URL answers; 130 interrupted (SIGINT/SIGTERM: what
finished is written, marked partial).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kvtier.cli.common import print_json
from kvtier.errors import ExitCode, UsageError
from kvtier.serving import SESSION_HEADER

if TYPE_CHECKING:
    from kvtier.bench.result import BenchResult
    from kvtier.bench.workloads import Workload

INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT
DEFAULT_LENGTHS = (500, 1000, 1500, 2000, 2500, 3000)


def _url(value: str) -> str:
    example = "write it like http://127.0.0.1:8000"
    try:
        parts = urlsplit(value)
        port = parts.port  # reading it checks it: a ValueError when it is not a number or above 65535
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a URL with a valid port (1-65535); {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"'{value}' is not a URL; {example}")
    if port is not None and not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"'{value}' has port {port}; use a port from 1 to 65535")
    from kvtier.bench.client import normalize_url

    return normalize_url(value)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} is not positive; use 1 or more")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number above 0")
    return number


def _non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number, 0 or more")
    return number


def _fraction(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from None
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not a share of requests; use 0 to 1 (0.05 = 5%)")
    return number


def _percentiles(value: str) -> tuple[float, ...]:
    from kvtier.bench.stats import parse_percentiles

    try:
        return parse_percentiles(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _slo(value: str) -> dict[str, float]:
    from kvtier.bench.stats import parse_slo

    try:
        return parse_slo(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _lengths(value: str) -> tuple[int, ...]:
    items = [v for v in value.replace(" ", "").split(",") if v]
    if not items:
        raise argparse.ArgumentTypeError("give at least one length, like 500,1000,2000")
    lengths = tuple(_positive_int(v) for v in items)
    if len(set(lengths)) != len(lengths):
        raise argparse.ArgumentTypeError(
            f"'{value}' repeats a length; give each length once (--repeat N measures each N times)"
        )
    return lengths


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmark an endpoint: TTFT and cache hits per tier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    workloads = parser.add_subparsers(dest="workload", metavar="WORKLOAD", required=True)

    _sweep_parser(workloads)
    _multiturn_parser(workloads)
    _shared_prefix_parser(workloads)
    _trace_parser(workloads)
    comp = workloads.add_parser("compare", help="print the differences between two result files")
    comp.add_argument("a", type=Path, help="result.json of the first run (A)")
    comp.add_argument("b", type=Path, help="result.json of the second run (B)")
    comp.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    comp.add_argument("--wide", action="store_true", help="do not fit the tables into 80 columns")
    parser.set_defaults(func=run)


def _sweep_parser(workloads: Any) -> None:
    sweep = workloads.add_parser(
        "sweep", help="cold vs reused TTFT per prompt length, across two pods", description=_SWEEP_HELP
    )
    sweep.add_argument("--write-url", type=_url, required=True, help="where each prompt goes first (cold)")
    sweep.add_argument(
        "--read-url", type=_url, help="where the same bytes go next (default: the write URL, i.e. its own cache)"
    )
    sweep.add_argument(
        "--lengths",
        type=_lengths,
        default=DEFAULT_LENGTHS,
        help="prompt lengths in tokens, comma-separated (default: 500,1000,...,3000)",
    )
    sweep.add_argument("--max-tokens", type=_positive_int, default=4, help="output cap per request (default 4)")
    sweep.add_argument(
        "--settle-s",
        type=_non_negative_float,
        default=1.0,
        help="pause between the write and the read of a prompt; LMCache stores to L2 asynchronously (default 1)",
    )
    sweep.add_argument(
        "--local-repeat", action="store_true", help="also send each prompt again to the write URL (its L0 hit)"
    )
    sweep.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        help="measure every length N times, each with a fresh salt; the table shows the median and spread (default 1)",
    )
    sweep.add_argument(
        "--no-warmup", action="store_true", help="skip the short warm-up request each URL gets before measuring"
    )
    _common(sweep, "completions")


def _multiturn_parser(workloads: Any) -> None:
    multi = workloads.add_parser(
        "multiturn", help="conversations with growing history, replayed on a second URL", description=_MULTI_HELP
    )
    multi.add_argument("--write-url", type=_url, required=True, help="where conversations run first")
    multi.add_argument("--read-url", type=_url, help="where the same requests are replayed (default: no replay)")
    multi.add_argument(
        "--conversations",
        type=_positive_int,
        default=5,
        help="conversations (default 5); with at least --turns of them the read URL measures every history length",
    )
    multi.add_argument("--turns", type=_positive_int, default=5)
    multi.add_argument("--system-tokens", type=_positive_int, default=500, help="system prompt per conversation")
    multi.add_argument("--turn-tokens", type=_positive_int, default=200, help="user message per turn")
    multi.add_argument("--max-tokens", type=_positive_int, default=32, help="answer length cap")
    multi.add_argument("--settle-s", type=_non_negative_float, default=1.0, help="pause before the replay")
    multi.add_argument("--concurrency", type=_positive_int, help="conversations at once (default: all)")
    _common(multi, "chat")


def _shared_prefix_parser(workloads: Any) -> None:
    shared = workloads.add_parser(
        "shared-prefix", help="many users sharing a system prompt at a target QPS", description=_SHARED_HELP
    )
    shared.add_argument("--url", type=_url, required=True, help="the endpoint (a router) to load")
    shared.add_argument("--users", type=_positive_int, default=20)
    shared.add_argument("--rounds", type=_positive_int, default=3, help="questions per user")
    shared.add_argument("--system-tokens", type=_positive_int, default=2000, help="the shared system prompt")
    shared.add_argument("--user-tokens", type=_positive_int, default=200, help="each user's own context")
    shared.add_argument("--question-tokens", type=_positive_int, default=50)
    shared.add_argument("--max-tokens", type=_positive_int, default=16)
    shared.add_argument("--qps", type=_positive_float, default=2.0, help="target request rate (default 2)")
    shared.add_argument("--concurrency", type=_positive_int, default=8, help="requests in flight at most (default 8)")
    shared.add_argument(
        "--user-header",
        default=SESSION_HEADER,
        help=f"header carrying the user id, for session routing (default {SESSION_HEADER}, the session key of "
        "kvtier's standalone router; '' for none)",
    )
    _pacing(shared, "--qps")
    _common(shared, "completions")


def _trace_parser(workloads: Any) -> None:
    trace = workloads.add_parser("trace", help="replay a Mooncake JSONL trace", description=_TRACE_HELP)
    trace.add_argument("--url", type=_url, required=True, help="the endpoint to load")
    trace.add_argument("--trace", type=Path, required=True, help="Mooncake-format JSONL file")
    pace = trace.add_mutually_exclusive_group()
    pace.add_argument(
        "--time-scale",
        type=_positive_float,
        default=None,
        help="send at timestamp x this factor (default 1: real time; 0.1: ten times faster)",
    )
    pace.add_argument("--qps", type=_positive_float, help="ignore timestamps; send at this fixed rate, in order")
    trace.add_argument("--limit", type=_positive_int, help="replay only the first N requests of the file")
    trace.add_argument(
        "--max-model-len",
        type=_positive_int,
        default=16384,
        help="skip (and count) requests whose input + output exceed it (default 16384)",
    )
    trace.add_argument("--block-size", type=_positive_int, default=512, help="tokens per hash id (Mooncake: 512)")
    trace.add_argument("--max-tokens", type=_positive_int, help="cap each request's output_length")
    trace.add_argument("--concurrency", type=_positive_int, help="requests in flight at most (default: no limit)")
    _pacing(trace, "--qps (not with --time-scale)")
    _common(trace, "completions")


def _pacing(parser: argparse.ArgumentParser, rate: str) -> None:
    from kvtier.bench.arrivals import ARRIVALS

    parser.add_argument(
        "--arrival",
        choices=ARRIVALS,
        help=f"gaps between sends at {rate}: fixed (default), poisson (random, exponential gaps) or gamma "
        "(see --burstiness)",
    )
    parser.add_argument(
        "--burstiness",
        type=_positive_float,
        help="gamma arrivals' shape, as vllm bench serve's: 1 is Poisson, below 1 burstier, above 1 more even "
        "(implies --arrival gamma)",
    )
    parser.add_argument(
        "--duration", type=_positive_float, help="send for this many seconds, then let requests in flight finish"
    )


def _common(parser: argparse.ArgumentParser, api: str) -> None:
    parser.add_argument("--model", help="model name to send (default: the first id of GET /v1/models)")
    parser.add_argument(
        "--api", choices=("completions", "chat"), default=api, help=f"/v1/completions or /v1/chat/completions ({api})"
    )
    parser.add_argument("--timeout-s", type=_positive_float, default=60.0, help="per request (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="prompt text seed (default 0)")
    parser.add_argument("--salt", help="run salt; a fixed salt repeats the exact prompts (default: random, cold)")
    parser.add_argument(
        "--metrics-url",
        type=_url,
        action="append",
        help="scrape this base URL's /metrics instead of the target URLs (repeat per pod)",
    )
    parser.add_argument("--no-metrics", action="store_true", help="do not scrape /metrics")
    parser.add_argument(
        "--router-metrics-url",
        type=_url,
        help="the standalone router's Prometheus port (http://ROUTER:29000): each request that ran alone records "
        "which replica served it, from the router's per-replica counter",
    )
    parser.add_argument("--ignore-eos", action="store_true", help="ask vLLM for exactly max_tokens (vLLM extension)")
    parser.add_argument("--label", help="a name for this run, shown in the summary and by compare")
    parser.add_argument("--out", type=Path, help="output folder (default: bench-results/<workload>-<time>-<salt>)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no live progress bar")
    parser.add_argument("--json", action="store_true", help="print the result JSON on stdout instead of a table")
    parser.add_argument("--wide", action="store_true", help="every column and percentile (tables wider than 80)")
    parser.add_argument(
        "--percentiles",
        type=_percentiles,
        default=(50.0, 90.0, 99.0),
        help="latency percentiles to report, comma-separated (default 50,90,99; e.g. 50,90,99,99.9)",
    )
    parser.add_argument(
        "--slo",
        type=_slo,
        help="goodput bounds per request, like ttft=500ms,tpot=50ms (metrics ttft, tpot, e2e; ms or s): the "
        "summary counts the requests that met all of them",
    )
    parser.add_argument(
        "--max-error-rate",
        type=_fraction,
        help="exit 1 when more than this share of requests failed (0 to 1; default: only when none succeeded)",
    )


_SWEEP_HELP = """Each prompt length is sent cold to --write-url, then byte-identical to --read-url. With two pods
behind no router, a fast read is a cross-pod hit (L2). Prompts are salted per run, so a re-run starts cold."""
_MULTI_HELP = """Conversations accumulate history turn by turn on --write-url. Once a conversation has finished all
its turns, --read-url gets it once: the byte-identical request of one turn (conversation c: turn T - c mod T), a
history that pod has never seen, so whatever it reuses comes from the shared L2 alone."""
_SHARED_HELP = """Users share one system prompt; each has its own context and questions. Requests go out at --qps,
at most --concurrency at once. Run it against two routing setups and `kvtier bench compare` the results."""
_TRACE_HELP = """Replays a Mooncake trace (timestamp ms, input_length, output_length, hash_ids of 512-token blocks):
equal hash ids become equal prompt text. Requests longer than --max-model-len are skipped and counted."""


def run(args: argparse.Namespace) -> int:
    if args.workload == "compare":
        return _compare(args)
    from kvtier.bench.prompts import new_salt
    from kvtier.bench.runner import RunOptions, run_workload

    workload = _workload(args)
    salt = args.salt or new_salt()
    outdir = args.out or Path("bench-results") / f"{workload.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{salt}"
    created = prepare_out_dir(outdir)  # before any request: a run must not be lost to an unwritable folder
    metrics_urls: tuple[str, ...] | None = None
    if args.no_metrics:
        metrics_urls = ()
    elif args.metrics_url:
        metrics_urls = tuple(dict.fromkeys(args.metrics_url))
    options = RunOptions(
        api=args.api,
        model=args.model,
        timeout_s=args.timeout_s,
        seed=args.seed,
        salt=salt,
        metrics_urls=metrics_urls,
        progress=not args.no_progress and not args.json,
        ignore_eos=args.ignore_eos,
        label=args.label,
        percentiles=tuple(args.percentiles),
        slo_ms=args.slo,
        router_metrics_url=args.router_metrics_url,
    )
    try:
        result = run_workload(workload, options)
    except BaseException:
        if created and not any(outdir.iterdir()):
            outdir.rmdir()  # leave no empty folder behind a run that sent nothing (no URL answers, Ctrl-C)
        raise
    files = _write(result, outdir, plots=not args.no_plots)
    if args.json:
        print_json(result.to_json())
    else:
        _print_summary(result, files, wide=args.wide)
    return _verdict(result, args.max_error_rate)


def _verdict(result: BenchResult, max_error_rate: float | None) -> int:
    """The exit code of a finished (or interrupted) run, with its reason on stderr."""
    if result.partial:
        print(f"kvtier bench: {_partial(result)}", file=sys.stderr)
        return INTERRUPTED
    if result.ok == 0:
        kinds = ", ".join(f"{n} {k}" for k, n in _error_kinds(result.records).items())
        print(f"kvtier bench: no request succeeded ({len(result.records)} sent: {kinds})", file=sys.stderr)
        return int(ExitCode.PROBLEMS)
    for run in result.runs():
        records = result.run_records(run)
        if records and not any(r.ok for r in records):
            kinds = ", ".join(f"{n} {k}" for k, n in _error_kinds(records).items())
            print(
                f"kvtier bench: every {run} request failed ({len(records)} sent: {kinds}); the {result.workload} "
                "measured nothing there",
                file=sys.stderr,
            )
            return int(ExitCode.PROBLEMS)
    errors = len(result.records) - result.ok
    if max_error_rate is not None and result.records and errors / len(result.records) > max_error_rate:
        print(
            f"kvtier bench: {errors} of {len(result.records)} requests failed "
            f"({errors / len(result.records):.1%}), above --max-error-rate {max_error_rate:g}",
            file=sys.stderr,
        )
        return int(ExitCode.PROBLEMS)
    return int(ExitCode.OK)


def _partial(result: BenchResult) -> str:
    from kvtier.bench.terminal import partial_note

    return partial_note(result) + " The result files are marked partial."


def _pacing_args(args: argparse.Namespace, has_rate: bool) -> dict[str, Any]:
    """--arrival/--burstiness/--duration as workload fields; burstiness alone means gamma arrivals."""
    arrival = args.arrival or ("gamma" if args.burstiness is not None else "fixed")
    if args.burstiness is not None and arrival != "gamma":
        raise UsageError(f"--burstiness shapes gamma arrivals, not {arrival} ones; use --arrival gamma")
    if (args.arrival or args.burstiness is not None) and not has_rate:
        raise UsageError("--arrival and --burstiness pace requests at --qps; a trace replayed by timestamp has its own")
    return {"arrival": arrival, "burstiness": args.burstiness or 1.0, "duration_s": args.duration}


def _workload(args: argparse.Namespace) -> Workload:
    from kvtier.bench import workloads as w

    if args.workload == "sweep":
        return w.Sweep(
            write_url=args.write_url,
            read_url=args.read_url or args.write_url,
            lengths=tuple(args.lengths),
            max_tokens=args.max_tokens,
            settle_s=args.settle_s,
            local_repeat=args.local_repeat,
            repeat=args.repeat,
            warmup=not args.no_warmup,
        )
    if args.workload == "multiturn":
        return w.MultiTurn(
            write_url=args.write_url,
            read_url=args.read_url,
            conversations=args.conversations,
            turns=args.turns,
            system_tokens=args.system_tokens,
            turn_tokens=args.turn_tokens,
            max_tokens=args.max_tokens,
            settle_s=args.settle_s,
            concurrency=args.concurrency,
        )
    if args.workload == "shared-prefix":
        return w.SharedPrefix(
            url=args.url,
            users=args.users,
            rounds=args.rounds,
            system_tokens=args.system_tokens,
            user_tokens=args.user_tokens,
            question_tokens=args.question_tokens,
            max_tokens=args.max_tokens,
            qps=args.qps,
            concurrency=args.concurrency,
            user_header=args.user_header or None,
            **_pacing_args(args, has_rate=True),
        )
    pacing = _pacing_args(args, has_rate=args.qps is not None)
    from kvtier.trace import load_trace

    requests = load_trace(args.trace, block_tokens=args.block_size, limit=args.limit).requests
    replay = w.TraceReplay(
        url=args.url,
        path=args.trace,
        requests=requests,
        time_scale=args.time_scale if args.qps is None else None,
        qps=args.qps,
        max_model_len=args.max_model_len,
        block_tokens=args.block_size,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        **pacing,
    )
    if not replay.plan()[0]:
        raise UsageError(
            f"all {len(requests)} requests of {args.trace} are longer than --max-model-len {args.max_model_len} "
            "(input + output tokens); raise it or cap outputs with --max-tokens"
        )
    replay.schedule()  # refuses a wait between sends beyond MAX_SEND_GAP_S before contacting anything
    return replay


def prepare_out_dir(outdir: Path) -> bool:
    """Create `outdir` if needed and check that files can be written in it (UsageError if not); True if created."""
    existed = outdir.is_dir()
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=outdir):
            pass
    except OSError as err:
        raise UsageError(
            f"cannot write to the output folder {outdir} ({err.strerror or err}); pass a writable --out"
        ) from err
    return not existed


def _write(result: BenchResult, outdir: Path, *, plots: bool) -> list[Path]:
    from kvtier.bench.plots import write_plots
    from kvtier.bench.report import markdown

    files = [outdir / "result.json", outdir / "summary.md"]
    result.write(files[0])
    pngs = write_plots(result, outdir) if plots else []
    files[1].write_text(markdown(result, [p.name for p in pngs]), encoding="utf-8")
    return files + pngs


def _error_kinds(records: list[Any]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for r in records:
        if not r.ok:
            kinds[r.error_kind or "unknown"] = kinds.get(r.error_kind or "unknown", 0) + 1
    return kinds


def _print_summary(result: BenchResult, files: list[Path], *, wide: bool) -> None:
    from kvtier.bench.terminal import WIDTH, summary_lines, wrap

    lines = summary_lines(result, wide)
    lines += wrap("wrote: " + ", ".join(str(f) for f in files), None if wide else WIDTH)
    print("\n".join(lines))


def _compare(args: argparse.Namespace) -> int:
    from kvtier.bench.compare import compare, compare_lines
    from kvtier.bench.result import load_result

    data = compare(load_result(args.a), load_result(args.b))
    if args.json:
        print_json(data)
        return int(ExitCode.OK)
    print("\n".join(compare_lines(data, (str(args.a), str(args.b)), wide=args.wide)))
    return int(ExitCode.OK)
