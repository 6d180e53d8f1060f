"""Which Node the jsii kernel runs on when kvtier synthesizes in-process (`kvtier validate --previous`).

jsii starts `node` from PATH unless `JSII_NODE` names one. The system Node may be older than jsii supports: jsii then
prints an end-of-life banner, and its Python runtime (jsii 1.142.0 `_kernel/providers/process.py` `stderr_sink`)
prints such non-JSON lines as Python bytes. The Makefile and `npx` put the Node pinned in package.json first on PATH;
this does the same for the CLI in a checkout, where that Node is in node_modules/.bin.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def prefer_project_node(cwd: Path | None = None) -> Path | None:
    """Point JSII_NODE at the project's Node (the current folder's, else the checkout's), unless it is already set."""
    if os.environ.get("JSII_NODE"):
        return None
    for base in (cwd or Path.cwd(), CHECKOUT):
        node = base / "node_modules" / ".bin" / "node"
        if node.is_file() and os.access(node, os.X_OK):
            os.environ["JSII_NODE"] = str(node)
            return node
    return None
