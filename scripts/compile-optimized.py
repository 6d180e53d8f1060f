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
import pkgutil
import sys
import tempfile


def main() -> int:
    if sys.flags.optimize != 1 or sys.dont_write_bytecode:
        print("compile-optimized: run with `python -O` and without PYTHONDONTWRITEBYTECODE", file=sys.stderr)
        return 2
    print("compile-optimized: writing the -O bytecode a synth loads (about 10 s) ...", flush=True)
    import kvtier

    for module in pkgutil.walk_packages(kvtier.__path__, "kvtier."):
        if not module.name.endswith("__main__"):  # `python -m kvtier` would run the CLI
            importlib.import_module(module.name)
    from aws_cdk import Stack
    from aws_cdk import aws_s3 as s3

    from kvtier.app.main import new_app

    with tempfile.TemporaryDirectory() as outdir:
        app = new_app(outdir)
        s3.CfnBucket(Stack(app, "Warm"), "Bucket")
        app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
