"""Rich tables for `kvtier plan`, drawn from the plan data (kvtier.planner.report) so table and JSON agree."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def tokens(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def size(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:,.1f} ms" if s < 1 else f"{s:,.2f} s"


def money(price: dict[str, Any], key: str = "per_hour") -> str:
    if price[key] is not None:
        return f"${price[key]:,.2f}"
    known = price[f"known_part_{key}"]
    return f">= ${known:,.2f} (unknown: {', '.join(price['unknown'])})"


def _endpoint_table(plan: dict[str, Any]) -> Table:
    endpoints = plan["endpoints"]
    table = Table(title="Endpoints (per replica unless noted)", show_lines=False)
    table.add_column("")
    for e in endpoints:
        table.add_column(f"{e['lob']}/{e['endpoint']}")
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: list[str]) -> None:
        rows.append((label, values))

    row("model", [f"{e['model']['id']} ({e['model']['params_billion']} B, {e['model']['dtype']})" for e in endpoints])
    row(
        "placement",
        [
            f"{e['instance_type']}, TP {e['tensor_parallel']}, {e['replicas']} replicas (max {e['max_replicas']})"
            for e in endpoints
        ],
    )
    row("weights", [f"{e['weights']['gib']:.1f} GiB ({e['weights']['gib_per_gpu']:.1f} per GPU)" for e in endpoints])
    row("KV per token", [f"{e['kv_bytes_per_token']:,} B ({size(e['kv_bytes_per_token'])})" for e in endpoints])
    row("LMCache chunk", [f"{e['chunk']['tokens']} tokens = {size(e['chunk']['bytes'])}" for e in endpoints])
    row(
        "L0 tokens (GPU)",
        [
            f"{tokens(e['l0']['tokens_per_replica'])} ({e['l0']['kv_gib_per_gpu']:.1f} GiB KV per GPU)"
            for e in endpoints
        ],
    )
    row(
        "L1 tokens (host DRAM)",
        [f"{tokens(e['l1']['tokens_per_replica'])} ({e['l1']['gib_per_replica']:g} GiB)" for e in endpoints],
    )
    row(
        "L2 tokens (shared)",
        [
            f"{tokens(e['l2']['tokens'])} ({e['l2']['gb']:,.0f} GB, {e['l2']['backend']})" if e["l2"]["tokens"] else "-"
            for e in endpoints
        ],
    )
    row(
        "chunk load from L1",
        [f"{seconds(e['load']['l1_chunk_s'])} at {e['load']['h2d_gbps']:g} GB/s" for e in endpoints],
    )
    row(
        "chunk load from L2",
        [
            f"{seconds(e['load']['l2_chunk_s'])} at {e['load']['l2_read_gbps']:.2f} GB/s "
            f"(one flow: {seconds(e['load']['l2_chunk_s_single_flow'])})"
            if e["load"]["l2_chunk_s"] is not None
            else "-"
            for e in endpoints
        ],
    )
    n = endpoints[0]["recompute"]["tokens"] if endpoints else 0
    row(
        f"recompute {n:,} tokens",
        [f"{seconds(e['recompute']['seconds'])} at {e['recompute']['effective_tflops']:.0f} TFLOPS" for e in endpoints],
    )
    row(f"load {n:,} tokens from L2", [seconds(e["recompute"]["l2_load_seconds"]) for e in endpoints])
    row(
        "L2 beats recompute from",
        [
            f"{tokens(e['break_even_tokens'])} tokens" if e["break_even_tokens"] is not None else "never"
            for e in endpoints
        ],
    )
    for label, values in rows:
        table.add_row(label, *values)
    return table


def _lob_table(plan: dict[str, Any]) -> Table:
    table = Table(title="Lines of business (nodes are shared: each pays for the GPUs it holds)")
    for header in (
        "LOB",
        "GPUs (max) / quota",
        "nodes",
        "$/hour",
        "$/month",
        "H100-equiv.",
        "on P5 $/hour",
        "on P5 $/month",
    ):
        table.add_column(header, justify="left" if header == "LOB" else "right")
    for lob in plan["lobs"]:
        table.add_row(
            lob["name"],
            f"{lob['gpus']} ({lob['max_gpus']}) / {lob['gpu_quota']}",
            f"{lob['nodes']:.2f}",
            money(lob["price"]),
            money(lob["price"], "per_month"),
            f"{lob['p5']['h100_gpus']:.2f}",
            money(lob["p5"]["price"]),
            money(lob["p5"]["price"], "per_month"),
        )
    return table


def _env_table(plan: dict[str, Any]) -> Table:
    env = plan["environment"]
    table = Table(title=f"Environment {env['name']} ({env['region']})")
    for header in ("", "instance type", "nodes", "GPUs", "$/hour", "$/month"):
        table.add_column(header, justify="left" if header in ("", "instance type") else "right")
    for g in env["groups"]:
        table.add_row(
            f"group {g['name']} ({g['role']})",
            g["instance_type"],
            str(g["count"]),
            str(g["count"] * g["gpus_per_node"]),
            money(g["price"]),
            money(g["price"], "per_month"),
        )
    table.add_row(
        "GPUs no LOB holds",
        "",
        "",
        str(env["gpus"] - env["allocated_gpus"]),
        money(env["unallocated_gpu_price"]),
        money(env["unallocated_gpu_price"], "per_month"),
    )
    table.add_row("total", "", "", str(env["gpus"]), money(env["total_price"]), money(env["total_price"], "per_month"))
    p5 = env["p5"]
    table.add_row(
        f"GPU capacity on P5 ({p5['h100_gpus']:.2f} H100-equiv.)",
        p5["instance_type"],
        str(p5["instances"]),
        str(p5["instances"] * 8),
        money(p5["price"]),
        money(p5["price"], "per_month"),
    )
    table.add_row("total with P5", "", "", "", money(p5["total_price"]), money(p5["total_price"], "per_month"))
    return table


def print_tables(plan: dict[str, Any]) -> None:
    # Wide enough for two or three endpoint columns when piped; a terminal keeps its own width.
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 180)
    if plan["endpoints"]:
        console.print(_endpoint_table(plan))
    console.print(_lob_table(plan))
    console.print(_env_table(plan))
    console.print("How these are computed (docs/planning.md; constants and sources: --json):")
    for name, rule in plan["rules"].items():
        console.print(f"  {name}: {rule}", highlight=False, markup=False)
