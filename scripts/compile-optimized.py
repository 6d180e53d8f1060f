"""Write the bytecode a kvtier synth and the `kvtier` command load, once per install; or, with --all, every installed
module's plain bytecode (the tests import far more).

cdk.json runs the app with `python -O`, which skips the runtime argument checks jsii generates into every aws-cdk-lib
call (about a tenth of a synth, docs/benchmarks.md); mypy --strict and the test suite, which runs without -O, check
the same arguments. The set-up installs packages without compiling them (compiling every installed module was most
of a fresh `make setup`: 50 of 67 s), and where PYTHONDONTWRITEBYTECODE is set Python writes no bytecode on import,
so without this step every synth and every command would compile aws-cdk-lib's modules from source. Importing every
kvtier module under -O, with writing allowed, and synthesizing one small app (a synth imports more of aws-cdk-lib on
the way) writes the `.opt-1.pyc` files a synth loads; the same files then get their plain `.pyc` for the command
and plain runs.

Usage (the Makefile's set-up does it): env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -O scripts/compile-optimized.py
For the tests (`make pytest`): env -u PYTHONDONTWRITEBYTECODE .venv/bin/python scripts/compile-optimized.py --all
"""

import compileall
import importlib
import os
import pkgutil
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable

HEARTBEAT_S = float(os.environ.get("KVTIER_HEARTBEAT_S", "8"))
# Imported inside functions by the `kvtier` command (plots, progress, HTTP), so a walk of kvtier's modules misses them.
LAZY = ("aiohttp", "matplotlib.pyplot", "rich.console", "rich.progress", "rich.table")


def _loaded_sources() -> list[str]:
    return sorted(
        {path for m in list(sys.modules.values()) if (path := getattr(m, "__file__", None) or "").endswith(".py")}
    )


def _heartbeat(stop: threading.Event, start: float) -> None:
    """A line every HEARTBEAT_S seconds: on a loaded machine compiling aws-cdk-lib takes far longer than 10 s."""
    while not stop.wait(HEARTBEAT_S):
        print(f"compile-optimized:   still compiling ({time.monotonic() - start:.0f} s)", flush=True)


def _with_heartbeat(what: str, work: Callable[[], object]) -> int:
    print(f"compile-optimized: {what} ...", flush=True)
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(stop, time.monotonic()), daemon=True).start()
    try:
        work()
    finally:
        stop.set()
    return 0


def synth_and_command() -> int:
    if sys.flags.optimize != 1 or sys.dont_write_bytecode:
        print("compile-optimized: run with `python -O` and without PYTHONDONTWRITEBYTECODE", file=sys.stderr)
        return 2
    return _with_heartbeat("writing the -O and plain bytecode a synth and the command load (about 20 s)", _compile)


def _compile() -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: the plots are written to files
    import kvtier

    for module in pkgutil.walk_packages(kvtier.__path__, "kvtier."):
        if not module.name.endswith("__main__"):  # `python -m kvtier` would run the CLI
            importlib.import_module(module.name)
    for name in LAZY:
        importlib.import_module(name)
    print("compile-optimized: ... then one small synth (about 5 s)", flush=True)
    from aws_cdk import Stack
    from aws_cdk import aws_s3 as s3

    from kvtier.app.main import new_app

    with tempfile.TemporaryDirectory() as outdir:
        app = new_app(outdir)
        s3.CfnBucket(Stack(app, "Warm"), "Bucket")
        app.synth()
    for path in _loaded_sources():  # the -O files exist now (written on import); the plain ones next to them
        compileall.compile_file(path, quiet=2, optimize=0)


def everything() -> int:
    if sys.dont_write_bytecode:
        print("compile-optimized: run without PYTHONDONTWRITEBYTECODE", file=sys.stderr)
        return 2
    # Files that are not Python 3 (test data inside some packages) fail to compile; they are never imported.
    return _with_heartbeat(
        "compiling every installed package for the tests (about a minute, once)",
        lambda: compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0, optimize=0),
    )


if __name__ == "__main__":
    sys.exit(everything() if sys.argv[1:] == ["--all"] else synth_and_command())
