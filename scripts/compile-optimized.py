"""Write the `python -O` bytecode (`.opt-1.pyc`) of every module a kvtier synth loads, once per install.

cdk.json runs the app with `python -O`, which skips the runtime argument checks jsii generates into every aws-cdk-lib
call (about a tenth of a synth, docs/benchmarks.md); mypy --strict and the test suite, which runs without -O, check
the same arguments. uv's --compile-bytecode writes only the plain `.pyc`, and where PYTHONDONTWRITEBYTECODE is set
Python writes none, so without this step every -O synth would compile aws-cdk-lib's modules from source (2.5x
slower). Importing every kvtier module under -O, with writing allowed, and synthesizing one small app (a synth
imports more of aws-cdk-lib on the way) writes the files a synth loads.

Usage (the Makefile's set-up does it): env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -O scripts/compile-optimized.py
"""

import importlib
import os
import pkgutil
import sys
import tempfile
import threading
import time

HEARTBEAT_S = float(os.environ.get("KVTIER_HEARTBEAT_S", "8"))


def main() -> int:
    if sys.flags.optimize != 1 or sys.dont_write_bytecode:
        print("compile-optimized: run with `python -O` and without PYTHONDONTWRITEBYTECODE", file=sys.stderr)
        return 2
    print("compile-optimized: writing the -O bytecode a synth loads: kvtier's modules (about 5 s) ...", flush=True)
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(stop, time.monotonic()), daemon=True).start()
    try:
        _compile()
    finally:
        stop.set()
    return 0


def _heartbeat(stop: threading.Event, start: float) -> None:
    """A line every HEARTBEAT_S seconds: on a loaded machine compiling aws-cdk-lib takes far longer than 10 s."""
    while not stop.wait(HEARTBEAT_S):
        print(f"compile-optimized:   still compiling ({time.monotonic() - start:.0f} s)", flush=True)


def _compile() -> None:
    import kvtier

    for module in pkgutil.walk_packages(kvtier.__path__, "kvtier."):
        if not module.name.endswith("__main__"):  # `python -m kvtier` would run the CLI
            importlib.import_module(module.name)
    print("compile-optimized: ... then one small synth (about 5 s)", flush=True)
    from aws_cdk import Stack
    from aws_cdk import aws_s3 as s3

    from kvtier.app.main import new_app

    with tempfile.TemporaryDirectory() as outdir:
        app = new_app(outdir)
        s3.CfnBucket(Stack(app, "Warm"), "Bucket")
        app.synth()


if __name__ == "__main__":
    sys.exit(main())
