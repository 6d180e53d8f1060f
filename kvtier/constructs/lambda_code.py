"""The code asset of a Lambda whose handlers live in one package of kvtier/lambdas (e.g. `eks_api`).

The asset's root is kvtier/lambdas holding only that package, so a handler is `<package>.<module>.<function>` and
the package's modules import each other relatively: the same imports run in Lambda (the runtime imports the
handler's dotted module name; docs/references.md "Issue 37") and in the tests (as `kvtier.lambdas.<package>`).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_

LAMBDAS_DIR = Path(__file__).resolve().parent.parent / "lambdas"


def package_code(package: str) -> lambda_.Code:
    others = sorted(entry.name for entry in LAMBDAS_DIR.iterdir() if entry.name != package)
    return lambda_.Code.from_asset(str(LAMBDAS_DIR), exclude=[*others, "__pycache__", "*.pyc"])
