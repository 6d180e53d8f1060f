"""The docs' commands are real: every shell command in README.md and docs/*.md parses, and the README's
"Try it without AWS" block runs as written in a copy of the repository that has no shared folder beside it.

Parsing means: a `kvtier ...` command parses with the CLI's own argparse parser and names an environment, LOB,
endpoint and input file that exist (or that an earlier command of the same page writes); `make X` names a Makefile
target; `python -m M` names an importable module; `npx cdk ...` names a cdk subcommand and an existing environment.
Any other program must be in KNOWN_PROGRAMS, so a new kind of command gets a look before it is accepted.
`<...>` is a placeholder the reader fills in: its value is not checked.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kvtier.cli import build_parser
from tests.support import ROOT, SAMPLE_TRACE, SAMPLE_WINDOW, shared_path
from tools import docsamples

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"bash", "sh", "shell"}  # every line is a command
PROMPT_BLOCKS = {"console", "text"}  # only `$ ` lines are commands
# Programs the docs may run that kvtier cannot check further (cluster tools, coreutils, shell keywords).
KNOWN_PROGRAMS = {
    "source", "kubectl", "aws", "eksctl", "helm", "curl", "cp", "kill", "sleep", "seq", "for", "done", "break",
    "findmnt", "df", "mkdir", "chmod", "ls", "wc", "head", "grep", "sh", "echo", "true",
}  # fmt: skip
CDK_COMMANDS = {"synth", "deploy", "destroy", "bootstrap", "diff"}
KEYWORDS = {"do", "then", "else", "time"}
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\s]*>")
FILLED = "PLACEHOLDER"
PRODUCED_BY_MAKE_SYNTH = {"cdk.out", "dist"}
VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


@dataclass
class Page:
    """What earlier commands of a page left behind: files they write and shell variables they set."""

    produced: set[str] = field(default_factory=lambda: set(PRODUCED_BY_MAKE_SYNTH))
    variables: dict[str, str] = field(default_factory=dict)

    def expand(self, word: str) -> str:
        return VARIABLE.sub(lambda m: self.variables.get(m.group(1), FILLED), word)


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def commands(page: Path) -> list[Command]:
    """Shell commands of one page, continuation lines joined, in order."""
    found: list[Command] = []
    lang: str | None = None
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            lang = (stripped[3:].strip() or "plain") if lang is None else None
            continue
        if lang is None:
            continue
        if pending is not None:
            start, text = pending
            text += " " + stripped
        elif lang in SHELL_BLOCKS and stripped and not stripped.startswith("#"):
            start, text = number, stripped
        elif lang in PROMPT_BLOCKS and stripped.startswith("$ "):
            start, text = number, stripped[2:]
        else:
            continue
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
        else:
            pending = None
            found.append(Command(page, start, text))
    return found


def simple_commands(text: str) -> list[list[str]]:
    """Split a command line at ; && || | & ( ) into word lists, dropping comments and redirections."""
    text = PLACEHOLDER.sub(FILLED, text.replace("2>&1", ""))
    lexer = shlex.shlex(text, posix=True, punctuation_chars="();|&")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("();|&$"):
            parts.append([])
        elif not re.match(r"^\d?>", token):
            parts[-1].append(token)
    return [words for words in parts if words]


def exists(path: str, produced: set[str]) -> bool:
    """In the repository (a clone has nothing beside it), written by an earlier command, or a placeholder."""
    if FILLED not in path and (path.startswith(("/", "..")) or not (ROOT / path).resolve().is_relative_to(ROOT)):
        return False
    return FILLED in path or (ROOT / path).exists() or path in produced or path.split("/", 1)[0] in produced


def config_problems(args: argparse.Namespace) -> list[str]:
    """The environment, LOB and endpoint a kvtier command names exist in its configuration folder."""
    config_dir = ROOT / (getattr(args, "config_dir", None) or "config")
    env = getattr(args, "env", None)
    problems = []
    if env and FILLED not in env and not (config_dir / "environments" / f"{env}.yaml").is_file():
        problems.append(f"no environment {env!r} in {config_dir}")
    lob = getattr(args, "lob", None)
    if lob and FILLED not in lob:
        lob_file = config_dir / "lobs" / f"{lob}.yaml"
        if not lob_file.is_file():
            return [*problems, f"no LOB {lob!r} in {config_dir}"]
        endpoint = getattr(args, "endpoint", None)
        names = [e["name"] for e in yaml.safe_load(lob_file.read_text(encoding="utf-8")).get("endpoints", [])]
        if endpoint and FILLED not in endpoint and endpoint not in names:
            problems.append(f"LOB {lob!r} has no endpoint {endpoint!r} ({', '.join(names)})")
    return problems


def kvtier_problems(words: list[str], page: Page) -> list[str]:
    parser = build_parser()
    with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
        try:
            args = parser.parse_args([page.expand(w) for w in words[1:]])
        except SystemExit as exit_:
            if exit_.code == 0 and ("--help" in words or "-h" in words or "--version" in words):
                return []
            return [f"does not parse: {err.getvalue().strip().splitlines()[-1]}"]
    problems = config_problems(args)
    for name in ("trace", "previous", "config_dir", "a", "b"):
        value = getattr(args, name, None)
        if value is not None and not exists(str(value), page.produced):
            problems.append(f"{name.replace('_', '-')} {value} does not exist")
    out = getattr(args, "out", None)
    if out is not None:
        page.produced.update({str(out), f"{out}/result.json"})
    return problems


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.MULTILINE))


def problems_of(words: list[str], page: Page) -> list[str]:
    while words and words[0] in KEYWORDS:
        words = words[1:]
    assignments = [tuple(w.split("=", 1)) for w in words if re.match(r"^[A-Z_]+=", w)]
    if len(assignments) == len(words):  # VAR=value ..., or VAR=$(...) whose command is checked on its own
        page.variables.update((name, value) for name, value in assignments)
        return []
    program = words[0]
    if program == "kvtier":
        return kvtier_problems(words, page)
    if program == "make":
        missing = [t for t in words[1:] if not t.startswith("-") and t not in makefile_targets()]
        return [f"no Makefile target {t!r}" for t in missing]
    if program == "python":
        if words[1:2] != ["-m"] or importlib.util.find_spec(words[2]) is None:
            return [f"not an importable module: {' '.join(words[1:3])}"]
        return []
    if program == "npx":
        if words[1:2] != ["cdk"] or len(words) < 3 or words[2] not in CDK_COMMANDS:
            return [f"not a cdk command this project uses: {' '.join(words[1:3])}"]
        envs = [w.split("=", 1)[1] for w in words if w.startswith("env=")]
        return [
            f"no environment {e!r}"
            for e in envs
            if FILLED not in e and not (ROOT / f"config/environments/{e}.yaml").is_file()
        ]
    if program == "cp":
        page.produced.add(words[-1])
    if program == "curl" and "-o" in words:
        page.produced.add(words[words.index("-o") + 1])
    if program in KNOWN_PROGRAMS:
        return []
    return [f"unknown program {program!r}: add it to KNOWN_PROGRAMS if the docs may run it"]


def all_commands() -> list[Command]:
    return [command for page in PAGES for command in commands(page)]


def test_the_docs_have_commands_to_check() -> None:
    pages = {c.page.name for c in all_commands()}
    assert {"README.md", "planning.md", "benchmarking.md", "existing-clusters.md", "l2.md"} <= pages
    texts = [c.text for c in all_commands()]
    assert "make synth   # set up, then synthesize the default environment (dev) into cdk.out/ and dist/" in texts


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_of_a_page_parses(page: Path) -> None:
    state = Page()
    problems = [f"{c}\n    {p}" for c in commands(page) for w in simple_commands(c.text) for p in problems_of(w, state)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kvtier validate -e nosuch", "no environment 'nosuch'"),
        (
            "kvtier simulate --lob retail --endpoint nosuch --trace examples/traces/mooncake_synthetic.jsonl",
            "no endpoint",
        ),
        ("kvtier simulate --trace missing.jsonl", "trace missing.jsonl does not exist"),
        ("kvtier simulate --trace ../shared/data/traces/mooncake_synthetic_trace.jsonl", "does not exist"),
        ("kvtier plan --tokenz 5", "does not parse"),
        ("make synthesize", "no Makefile target"),
        ("npx cdk deploy -c env=staging --all", "no environment 'staging'"),
        ("rm -rf cdk.out", "unknown program 'rm'"),
        ("python -m kvtier.no_such_module", "not an importable module"),
    ],
)
def test_the_checker_catches_wrong_commands(text: str, problem: str) -> None:
    found = [p for words in simple_commands(text) for p in problems_of(words, Page(produced=set()))]
    assert any(problem in p for p in found), found


def test_placeholders_and_files_written_earlier_are_accepted() -> None:
    page = Page(produced=set())
    lines = [
        "cp -r cdk.out cdk.out.deployed",
        "kvtier validate -e <env> --previous cdk.out.deployed",
        "W=http://127.0.0.1:8101",
        "kvtier bench sweep --write-url $W --out run1",
        "kvtier bench compare run1/result.json run1/result.json",
    ]
    assert [p for line in lines for w in simple_commands(line) for p in problems_of(w, page)] == []
    assert [p for w in simple_commands("kvtier bench sweep --write-url $UNSET") for p in problems_of(w, page)]


def test_make_help_lists_every_target() -> None:
    shown = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    listed = set(re.findall(r"^make ([\w-]+)", shown.stdout, re.MULTILINE))
    assert listed == makefile_targets() - {"node_modules", "VENV"}


def try_it_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Try it without AWS", 1)[1].split("\n## ", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_the_readme_try_it_block_runs_in_a_copy_without_shared(tmp_path: Path) -> None:
    """The block runs with bash -e in a copy of the tracked files; only its two ports are swapped for free ones
    (other test runs on this machine may hold 8101/8102). The copy uses this checkout's venv, not a new install."""
    block = try_it_block()
    assert "source .venv/bin/activate" in block and "kvtier simulate" in block and "kill $SERVER" in block
    clone = tmp_path / "clone"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30)
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    (clone / ".venv").symlink_to(ROOT / ".venv")
    assert not (clone.parent / "shared").exists()
    for old, new in zip((8101, 8102), free_ports(2), strict=True):
        block = block.replace(str(old), str(new))
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "KVTIER_CONFIG_DIR"}}
    process = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", block],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the test server too, if the block stopped before `kill`
    assert process.returncode == 0, output
    assert "prefixaware*" in output  # simulate's table
    assert "speedup" in output  # bench sweep's summary
    assert list((clone / "bench-results").glob("sweep-*/result.json"))
    # What the README says the block shows is what it shows.
    bullet = said(README, README_BULLET)
    assert f"skipped {bullet['skipped']} of {bullet['requests']} requests" in " ".join(output.split())


def _paste_with_an_old_server(tmp_path: Path, old_port_index: int) -> tuple[str, int]:
    """The README's server steps pasted into an interactive bash (no -e: a failed command does not stop the rest)
    while an earlier run's test server holds one of its two ports; (output, requests the old server got)."""
    from kvtier.bench.testserver import FakeCluster

    block = try_it_block()
    steps = block[block.index("python -m kvtier.bench.testserver") :]
    assert "kvtier bench sweep" in steps and "--wait-for $SERVER" in steps
    with FakeCluster(1) as old:
        ports = free_ports(2)
        ports[old_port_index] = old.servers[0].port
        steps = steps.replace("8101", str(ports[0])).replace("8102", str(ports[1]))
        env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(
            ["bash", "--norc", "--noprofile", "-i"], stdin=subprocess.PIPE,
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            output, _ = process.communicate(steps + "exit\n", timeout=90)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return output, old.servers[0].requests


@pytest.mark.parametrize("held", [0, 1], ids=["write-port-held", "read-port-held"])
def test_pasting_the_try_it_server_steps_with_an_old_server_running_measures_nothing(tmp_path: Path, held: int) -> None:
    """An earlier run's test server still holds 8101 (or 8102): the new one says so in one line, the wait says in
    one line that it exited, and the bench never runs: not against the old server, not at all."""
    output, old_requests = _paste_with_an_old_server(tmp_path, held)
    assert old_requests == 0, output  # the old server was not benchmarked
    assert "address already in use; stop what holds it" in output, output
    assert re.search(r"kvtier testserver: process \d+ exited before serving port \d+ and \d+ \(its own line", output)
    assert "speedup" not in output and "Traceback" not in output and "No such process" not in output, output
    assert not (tmp_path / "bench-results").exists()


def test_the_wait_names_another_server_on_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that runs but is not the one asked for (a port answered by another test server) is one line."""
    from kvtier.bench.testserver import FakeCluster, main

    with FakeCluster(1) as old:
        port = old.servers[0].port
        sleeper = subprocess.Popen(["sleep", "30"])
        try:
            code = main(["--wait-for", str(sleeper.pid), "--port", str(port), "--timeout-s", "0.5"])
        finally:
            sleeper.kill()
            sleeper.wait()
    assert code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"kvtier testserver: port {port} is served by another test server (pid {os.getpid()}), not by {sleeper.pid}; "
        f"stop it (`kill {os.getpid()}`) and start again"
    ]


SAMPLES = [sample for page in docsamples.PAGES for sample in docsamples.samples(page)]


MEMORY_EDIT = ("config/environments/dev.yaml", "memory_percent: 20", "memory_percent: 10")


def _memory_sample() -> docsamples.Sample:
    (sample,) = [s for s in SAMPLES if s.edits == (MEMORY_EDIT,)]
    return sample


def test_the_docs_sample_outputs_are_found() -> None:
    where = {s.where.split(":")[0] for s in SAMPLES}
    assert {"docs/configuration.md", "docs/planning.md"} <= where
    assert _memory_sample().commands == ("$ kvtier validate -e dev", "$ echo $?")
    shown = "\n".join(s.text for s in SAMPLES if s.where.startswith("docs/configuration.md"))
    assert "configuration is valid" in shown and "warning: " in shown and "kvtier validate: " in shown


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.where)
def test_every_sample_output_is_what_the_tool_prints(sample: docsamples.Sample) -> None:
    """Each `$ kvtier ...` block of the docs, run as written: a change of output or numbers fails here until
    `python -m tools.docsamples --write` updates the page."""
    assert docsamples.run(sample) == docsamples.normalise(sample.text), (
        f"{sample.where}: the sample no longer matches the tool; run python -m tools.docsamples --write"
    )


def test_a_drifted_sample_is_caught() -> None:
    validate = _memory_sample()
    unedited = dataclasses.replace(validate, edits=())  # the shipped dev.yaml is valid: the output differs
    assert "dev: configuration is valid" in docsamples.run(unedited)
    assert docsamples.run(unedited) != docsamples.normalise(validate.text)


# Where commands write when no output is named (kvtier bench, kvtier simulate, make synth): a newcomer's clone must
# not be left with untracked files by any of them either.
DEFAULT_OUTPUTS = ("bench-results/x/result.json", "out/simulate/dev/retail/x/plot.png", "cdk.out/x", "dist/x")


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a clone")
def test_what_the_docs_commands_write_is_ignored_by_git() -> None:
    """Issue 39: `results/`, `cdk.out.deployed/` and a downloaded trace were left untracked after the docs' commands."""
    written: set[str] = set(DEFAULT_OUTPUTS)
    for page in PAGES:
        state = Page()
        for command in commands(page):
            for words in simple_commands(command.text):
                problems_of(words, state)
        written |= {p for p in state.produced - PRODUCED_BY_MAKE_SYNTH if FILLED not in p}
    assert {"results/roundrobin", "cdk.out.deployed"} <= written  # the parse sees them
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(sorted(written)),
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    ignored = set(done.stdout.split())
    assert sorted(written - ignored) == [], "add these to .gitignore (or write them under an ignored folder)"


def test_configuration_page_counts_the_shipped_gpu_nodes() -> None:
    """Issue 39: docs/configuration.md said dev has 2 GPU nodes while dev.yaml has 3."""
    text = (ROOT / "docs/configuration.md").read_text(encoding="utf-8")
    for env in ("dev", "prod"):
        said = re.search(rf"`{env}` \([^`]*?(\d+) GPU nodes", text)
        assert said is not None, f"docs/configuration.md no longer says how many GPU nodes {env} has"
        groups = yaml.safe_load((ROOT / f"config/environments/{env}.yaml").read_text())["hyperpod"]["instance_groups"]
        assert int(said.group(1)) == sum(g["count"] for g in groups if g["role"] == "gpu"), env


# The shipped trace's numbers (issue 39, item 1): the file is the published trace byte for byte, and every number the
# pages quote about it is recomputed here from the file by a plain prefix replay (not kvtier's simulator), or read
# from the sample outputs that test_every_sample_output_is_what_the_tool_prints reruns.
TRACE_README = ROOT / "examples" / "traces" / "README.md"
PUBLISHED_TRACE = "data/traces/mooncake_synthetic_trace.jsonl"  # kvcache-ai/Mooncake@3b5a594's, as downloaded


@dataclass(frozen=True)
class TraceFacts:
    requests: int
    span_s: float
    mean_prompt: float
    too_long: int
    served: int
    sharing_first_block: int  # served prompts whose first 512-token block an earlier served prompt had
    ceiling: float  # share of the served prompt tokens an unbounded cache serves (skipped requests store nothing)


def trace_facts(path: Path, max_model_len: int, limit: int | None = None) -> TraceFacts:
    """The facts of the first `limit` requests of the trace at `path` (all of them by default)."""
    from tests.simulate.test_trace import prefix_reuse

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()][:limit]
    served = [r for r in rows if r["input_length"] <= max_model_len]
    seen: set[int] = set()
    sharing = 0
    for row in served:
        sharing += row["hash_ids"][0] in seen
        seen.update(row["hash_ids"])
    hit, total = prefix_reuse(served)
    return TraceFacts(
        requests=len(rows),
        span_s=(rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000,
        mean_prompt=sum(r["input_length"] for r in rows) / len(rows),
        too_long=len(rows) - len(served),
        served=len(served),
        sharing_first_block=sharing,
        ceiling=hit / total,
    )


def git_blob_id(data: bytes) -> str:
    """What `git hash-object` prints for a file holding `data` (SHA-1 of the blob header and the bytes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def retail_max_model_len() -> int:
    lob = yaml.safe_load((ROOT / "config/lobs/retail.yaml").read_text(encoding="utf-8"))
    (endpoint,) = [e for e in lob["endpoints"] if e["name"] == "qwen3-8b"]
    return int(endpoint["max_model_len"])


def said(page: Path, pattern: str) -> dict[str, str]:
    """The groups of the one sentence of `page` that `pattern` matches, its line breaks read as spaces."""
    found = re.search(pattern, " ".join(page.read_text(encoding="utf-8").split()))
    assert found, f"{page.relative_to(ROOT)} no longer says /{pattern}/: update the page or this test"
    return found.groupdict()


def number(text: str) -> float:
    return float(text.replace(",", ""))


def percent(share: float) -> str:
    return f"{100 * share:.1f}"


def simulate_sample(page: Path, command_part: str) -> docsamples.Sample:
    (sample,) = [s for s in SAMPLES if s.page == page and command_part in s.commands[0]]
    return sample


def hit_rows(sample: docsamples.Sample) -> dict[str, list[str]]:
    """The token hit-rate table of a `kvtier simulate` output: routing -> cells (served, L0, ..., all)."""
    rows = {}
    for line in sample.text.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and cells[-1].endswith("%"):
            rows[cells[0].rstrip("*")] = cells[1:]
    assert rows, f"{sample.where}: no hit-rate table"
    return rows


def ttft_rows(sample: docsamples.Sample) -> dict[str, list[str]]:
    table = sample.text.split("TTFT (seconds)", 1)[1]
    return {
        cells[0].rstrip("*"): cells[1:]
        for line in table.splitlines()
        if line.startswith("│") and (cells := [c.strip() for c in line.strip("│").split("│")])
    }


def skipped_line(sample: docsamples.Sample) -> dict[str, str]:
    """`skipped N of M requests` of a `kvtier simulate` output."""
    found = re.search(r"^skipped (?P<skipped>[\d,]+) of (?P<requests>[\d,]+) requests", sample.text, re.MULTILINE)
    assert found, f"{sample.where}: no skipped line"
    return found.groupdict()


README = ROOT / "README.md"
PLANNING = ROOT / "docs" / "planning.md"
README_SIMULATE = "mooncake_synthetic.jsonl --no-plots"
README_BULLET = (
    r"on a public trace of (?P<requests>[\d,]+) requests: .{0,120} \((?P<skipped>[\d,]+) of the requests are longer "
    r"than `max_model_len` and are skipped\)"
)
README_SENTENCE = (
    r"With the best router, (?P<best>[\d.]+)% of the prompt tokens of the (?P<served>[\d,]+) served requests come "
    r"from cache, against (?P<ceiling>[\d.]+)% for an unbounded cache on one replica"
)
README_ROUTERS = (
    r"`(?P<configured>\w+)`, the configured router, keeps each conversation on the replica whose GPU holds it "
    r"\(L0 (?P<l0>[\d.]+)% against (?P<rr_l0>[\d.]+)% for round-robin\), which cuts the median TTFT from "
    r"(?P<rr_p50>[\d.]+) s to (?P<p50>[\d.]+) s; round-robin still reaches (?P<rr_all>[\d.]+)% because "
    r"(?P<rr_peer>[\d.]+)% of its tokens are chunks the other replica wrote to the shared L2"
)
TRACE_README_FILE = r"`(?P<name>[\w.]+)` is the whole Mooncake synthetic trace, unchanged, byte for byte"
TRACE_README_BLOB = r"the file's blob is `(?P<blob>[0-9a-f]{40})`"
TRACE_README_FACTS = (
    r"These (?P<requests>[\d,]+) requests span (?P<minutes>\d+) minutes, average (?P<mean>[\d,]+) prompt tokens, "
    r"and (?P<too_long>[\d,]+) of them are longer than (?P<limit>[\d,]+) tokens .{0,120} (?P<sharing>[\d,]+) of "
    r"the (?P<served>[\d,]+) it serves share their first 512 tokens with an earlier request, and an unbounded cache "
    r"would serve (?P<ceiling>[\d.]+)% of their prompt tokens"
)
TRACE_README_WINDOW = (
    r"its first (?P<window>\d+) requests \((?P<span>\d+) s, starting from an empty cache\) could take at most "
    r"(?P<ceiling>[\d.]+)% of their served prompt tokens from cache, the whole trace (?P<whole>[\d.]+)%"
)
PLANNING_LONGER_CONTEXT = (
    r"Serving the long ones with `max_model_len: 32768` \(Qwen3-8B's context is (?P<context>[\d,]+) tokens and one "
    r"replica's GPU holds (?P<l0>[\d,]+)\)"
)
PLANNING_LONGER_CONTEXT_RESULT = (
    r"(?P<served>[\d,]+) of the (?P<requests>[\d,]+) requests are served, but only (?P<hit>[\d.]+)% of their "
    r"prompt tokens come from cache \(the long prompts are new too\), and the median TTFT is (?P<p50>\d+) s"
)


def test_the_shipped_trace_is_the_file_its_readme_names() -> None:
    """examples/traces/README.md names the file and the upstream blob; the file's own blob id is that one, so it is
    the published file byte for byte (a dropped, added or edited line changes the id)."""
    assert said(TRACE_README, TRACE_README_FILE) == {"name": SAMPLE_TRACE.name}
    assert said(TRACE_README, TRACE_README_BLOB) == {"blob": git_blob_id(SAMPLE_TRACE.read_bytes())}


@pytest.mark.shared
def test_the_shipped_trace_is_exactly_the_published_file() -> None:
    """The same, against the file as downloaded from kvcache-ai/Mooncake@3b5a594 (not through the README's id)."""
    assert SAMPLE_TRACE.read_bytes() == shared_path(PUBLISHED_TRACE).read_bytes()


def test_git_blob_id_is_what_git_hash_object_prints(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    for data in (b"", b"one line\n", bytes(range(256))):
        path = tmp_path / "blob"
        path.write_bytes(data)
        done = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True, timeout=30)
        assert git_blob_id(data) == done.stdout.strip()


def test_the_numbers_the_docs_give_for_the_trace_are_the_traces() -> None:
    """Length, span, prompt sizes, the requests dev skips, the hit-rate ceiling (an unbounded cache, one replica) at
    the retail endpoint's max_model_len, and those of the first requests replayed alone, recomputed from the file:
    in examples/traces/README.md, README.md and planning.md."""
    limit = retail_max_model_len()
    facts = trace_facts(SAMPLE_TRACE, limit)
    window = trace_facts(SAMPLE_TRACE, limit, SAMPLE_WINDOW)
    assert said(TRACE_README, TRACE_README_FACTS) == {
        "requests": f"{facts.requests:,}",
        "minutes": str(round(facts.span_s / 60)),
        "mean": f"{facts.mean_prompt:,.0f}",
        "too_long": f"{facts.too_long:,}",
        "limit": f"{limit:,}",
        "sharing": f"{facts.sharing_first_block:,}",
        "served": f"{facts.served:,}",
        "ceiling": percent(facts.ceiling),
    }
    assert said(TRACE_README, TRACE_README_WINDOW) == {
        "window": str(window.requests),
        "span": str(round(window.span_s)),
        "ceiling": percent(window.ceiling),
        "whole": percent(facts.ceiling),
    }
    assert window.ceiling < facts.ceiling / 2  # "would understate reuse"
    assert said(README, README_SENTENCE)["ceiling"] == percent(facts.ceiling)
    assert said(README, README_BULLET) == {"requests": f"{facts.requests:,}", "skipped": f"{facts.too_long:,}"}
    assert said(PLANNING, r"unbounded caches\) is (?P<whole>[\d.]+)%") == {"whole": percent(facts.ceiling)}


def test_the_readme_quotes_what_simulate_prints_for_the_trace() -> None:
    """The sentences under the README's simulate output read their numbers off that output (which the docs-sample test
    reruns): the best router's hit rate and the served requests, the configured router's L0 share and median TTFT
    against round-robin's, round-robin's L2 peer share; and no router beats the replayed ceiling."""
    sample = simulate_sample(README, README_SIMULATE)
    rows, ttft = hit_rows(sample), ttft_rows(sample)
    assert set(rows) == {"roundrobin", "session", "prefixaware", "kvaware", "poolaware"}
    best = max(number(cells[-1].rstrip("%")) for cells in rows.values())
    readme = said(README, README_SENTENCE)
    assert number(readme["best"]) == best
    assert {cells[0] for cells in rows.values()} == {readme["served"]}
    assert skipped_line(sample) == said(README, README_BULLET)
    assert best <= number(readme["ceiling"]), "a router beats an unbounded cache: the ceiling or the simulator is wrong"
    routers = said(README, README_ROUTERS)
    configured = routers["configured"]
    assert f"│ {configured}* " in sample.text  # the output stars the endpoint's routing
    l0 = rows[configured][1]
    _served, rr_l0, _l1, _own, rr_peer, rr_all = rows["roundrobin"]
    assert routers == {
        "configured": configured,
        "l0": l0.rstrip("%"),
        "rr_l0": rr_l0.rstrip("%"),
        "rr_p50": ttft["roundrobin"][0],
        "p50": ttft[configured][0],
        "rr_all": rr_all.rstrip("%"),
        "rr_peer": rr_peer.rstrip("%"),
    }
    assert said(PLANNING, r"\((?P<best>[\d.]+)% at best, the README's output\)") == {"best": readme["best"]}


def test_planning_quotes_what_simulate_prints_with_a_longer_context() -> None:
    """planning.md's case for not raising dev's max_model_len reads its numbers off its sample output, and the
    context and GPU it cites are the catalog's and the planner's (the output's L0 line)."""
    from kvtier.catalog import MODELS

    sample = simulate_sample(PLANNING, "mooncake_synthetic.jsonl --routing prefixaware")
    (edit,) = sample.edits
    assert edit == ("config/lobs/retail.yaml", f"max_model_len: {retail_max_model_len()}", "max_model_len: 32768")
    fits = said(PLANNING, PLANNING_LONGER_CONTEXT)
    assert number(fits["context"]) == MODELS["Qwen/Qwen3-8B"].context_length
    assert f"L0 {fits['l0']} tokens" in sample.text and number(fits["l0"]) >= 32_768
    result = said(PLANNING, PLANNING_LONGER_CONTEXT_RESULT)
    (served, *_, hit) = hit_rows(sample)["prefixaware"]
    (p50, *_) = ttft_rows(sample)["prefixaware"]
    assert result == {
        "served": served,
        "requests": skipped_line(sample)["requests"],
        "hit": hit.rstrip("%"),
        "p50": str(round(number(p50))),
    }
    assert number(hit.rstrip("%")) < number(said(README, README_SENTENCE)["best"])  # "makes it worse"
