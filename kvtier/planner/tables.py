"""Rich tables for `kvtier plan`, drawn from the plan data (kvtier.planner.report) so table and JSON agree.

The default view fits 80 columns: one two-column table per endpoint, dollars per hour and per month (README's
promise; issue 39), abbreviations with a legend. `--wide` puts the endpoints side by side, adds "alone on P5" per
hour and prints the rules.
"""

from __future__ import annotations

import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

NARROW = 80
WIDE = 180


def _model_cell(model: dict[str, Any]) -> str:
    """`id (total B, format)`, with the active share of a MoE and a KV cache dtype other than the weights' (issue 36)."""
    total = model["params_billion"]
    active = model.get("active_params_billion", total)
    params = f"{total} B" if active >= total else f"{total} B, {active:.1f} B active"
    kv = model.get("kv_cache_dtype", "auto")
    return f"{model['id']} ({params}, {model.get('weight_format', model['dtype'])}" + (
        f", KV {kv})" if kv != "auto" else ")"
    )


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
    """Dollars; a lower bound marked `+` when a price is unknown (the legend names the instance types)."""
    if price[key] is not None:
        return f"${price[key]:,.2f}"
    return f">= ${price[f'known_part_{key}']:,.2f}+"


def _endpoint_rows(plan: dict[str, Any]) -> list[tuple[str, list[str]]]:
    endpoints = plan["endpoints"]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: list[str]) -> None:
        rows.append((label, values))

    row("model", [_model_cell(e["model"]) for e in endpoints])
    row(
        "placement",
        [
            f"{e['instance_type']}, TP {e['tensor_parallel']}, {e['replicas']} replicas (max {e['max_replicas']})"
            for e in endpoints
        ],
    )
    row("weights", [f"{e['weights']['gib']:.1f} GiB ({e['weights']['gib_per_gpu']:.1f} per GPU)" for e in endpoints])
    row("KV per token", [f"{e['kv_bytes_per_token']:,} B ({size(e['kv_bytes_per_token'])})" for e in endpoints])
    row(
        "L2 file",
        [f"{e['chunk']['unit']}: {e['chunk']['tokens']} tokens = {size(e['chunk']['bytes'])}" for e in endpoints],
    )
    row(
        "L0 tokens (GPU)",
        [f"{tokens(e['l0']['tokens_per_replica'])} ({e['l0']['kv_gib_per_gpu']:.1f} GiB KV/GPU)" for e in endpoints],
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
    if any("adapters" in e for e in endpoints):  # issue 35: only where an endpoint has LoRA adapters
        row(
            "LoRA adapters (even split)",
            [
                f"{len(a['names'])} + base: L1 {tokens(a['l1_tokens_per_share'])} ({a['l1_gib_per_share']:.1f} GiB), "
                f"L2 {tokens(a['l2_tokens_per_share'])} ({a['l2_gb_per_share']:,.0f} GB) each; slots "
                f"{a['lora_gib_per_gpu']:.2f} GiB/GPU"
                if (a := e.get("adapters"))
                else "-"
                for e in endpoints
            ],
        )
    row("chunk from L1", [f"{seconds(e['load']['l1_chunk_s'])} at {e['load']['h2d_gbps']:g} GB/s" for e in endpoints])
    row(
        "chunk read from L2",
        [
            f"{seconds(e['load']['l2_chunk_s'] - e['load']['l2_hit_fixed_s'])} at {e['load']['l2_read_gbps']:.2f} GB/s"
            if e["load"]["l2_chunk_s"] is not None
            else "-"
            for e in endpoints
        ],
    )
    n = endpoints[0]["recompute"]["tokens"] if endpoints else 0
    row(
        f"TTFT, {n:,} tokens cold",
        [f"{seconds(e['recompute']['seconds'])} at {e['recompute']['effective_tflops']:.0f} TFLOPS" for e in endpoints],
    )
    hits = [e["l2_hit"] for e in endpoints]
    row(
        f"L2 read of {n:,} tokens",
        [f"{seconds(h['read_seconds'])} ({h['read_tokens']:,} tokens)" if h else "-" for h in hits],
    )
    row("L2 hit overhead", [seconds(h["overhead_seconds"]) if h else "-" for h in hits])
    row(
        "TTFT of an L2 hit",
        [f"{seconds(h['ttft_seconds'])} ({h['speedup']:.2f}x)" if h else "-" for h in hits],
    )
    row(
        "L2 beats recompute from",
        [
            f"{tokens(e['break_even_tokens'])} tokens" if e["break_even_tokens"] is not None else "never"
            for e in endpoints
        ],
    )
    settings = list(dict.fromkeys(a["setting"] for e in endpoints for a in e["autoscaling"]))
    for setting in settings:
        row(f"autoscale {setting}", [_proposal(e, setting) for e in endpoints])
    return rows


def _proposal(endpoint: dict[str, Any], setting: str) -> str:
    """`proposed (configured: x): why`, or `-` where the endpoint has no such signal."""
    found = [a for a in endpoint["autoscaling"] if a["setting"] == setting]
    if not found:
        return "-"
    a = found[0]
    configured = "" if a["configured"] is None else f" (configured {a['configured']:g})"
    return f"{a['proposed']:g}{configured}: {a['why']}"


def _endpoint_tables(plan: dict[str, Any], wide: bool) -> list[Table]:
    rows = _endpoint_rows(plan)
    names = [f"{e['lob']}/{e['endpoint']}" for e in plan["endpoints"]]
    groups = [list(range(len(names)))] if wide else [[i] for i in range(len(names))]
    out = []
    for group in groups:
        title = "Endpoints (per replica unless noted)" if wide else f"Endpoint {names[group[0]]} (per replica)"
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_header=wide)
        table.add_column("")
        for i in group:
            table.add_column(names[i])
        for label, values in rows:
            table.add_row(label, *(values[i] for i in group))
        out.append(table)
    return out


def _lob_table(plan: dict[str, Any], wide: bool) -> Table:
    table = Table(
        title="Lines of business (nodes are shared: each pays for its GPUs)",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,  # one space less between columns: $/hour and $/month both fit 80 columns
    )
    headers = ["LOB", "GPUs (max)/quota", "$/hour", "$/month", "H100-eq", "$/H100-eq-h"]
    headers += [*(["alone on P5 $/hour"] if wide else []), "alone on P5 $/month"]
    for header in headers:
        table.add_column(header, justify="left" if header == "LOB" else "right")
    for lob in plan["lobs"]:
        cells = [lob["name"], f"{lob['gpus']} ({lob['max_gpus']}) / {lob['gpu_quota']}"]
        cells += [money(lob["price"]), money(lob["price"], "per_month")]
        per = lob["p5"]["price_per_h100_equivalent_hour"]
        cells += [f"{lob['p5']['h100_gpus']:.2f}", f"${per:,.2f}" if per is not None else "-"]
        cells += [*([money(lob["p5"]["price"])] if wide else []), money(lob["p5"]["price"], "per_month")]
        table.add_row(*cells)
    return table


def _env_table(plan: dict[str, Any]) -> Table:
    env = plan["environment"]
    table = Table(
        title=f"Environment {env['name']} ({env['region']})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,  # one space less between columns, none at the edges: $/hour and $/month fit 80
        pad_edge=False,
    )
    headers = ["", "instance type", "nodes", "GPUs", "$/hour", "$/month"]
    for header in headers:
        # only the label column wraps (at its words) when 80 columns are short: a unit or a price is not split
        table.add_column(header, justify="left" if header in ("", "instance type") else "right", no_wrap=bool(header))

    def add(label: str, kind: str, nodes: str, gpus: str, price: dict[str, Any]) -> None:
        table.add_row(label, kind, nodes, gpus, money(price), money(price, "per_month"))

    for g in env["groups"]:
        add(
            f"group {g['name']} ({g['role']})",
            g["instance_type"],
            str(g["count"]),
            str(g["count"] * g["gpus_per_node"]),
            g["price"],
        )
    add("GPUs no LOB holds", "", "", str(env["gpus"] - env["allocated_gpus"]), env["unallocated_gpu_price"])
    for f in env["fixed"]:
        add(f["name"], f["unit"], str(f["count"]), "", f["price"])
    add("total", "", "", str(env["gpus"]), env["total_price"])
    p5 = env["p5"]
    add("GPU capacity on P5", p5["instance_type"], str(p5["instances"]), str(p5["instances"] * 8), p5["price"])
    add("total with P5", "", "", "", p5["total_price"])
    return table


def _kv_table(plan: dict[str, Any]) -> Table:
    """Why P5 was bought: the KV one replica reaches, with the tiers and on an H100 alone."""
    table = Table(title="KV cache one replica reaches (tokens)", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("endpoint", "L0+L1+L2 on its type", "L0 on a P5 GPU"):
        table.add_column(header, justify="left" if header == "endpoint" else "right")
    for row in plan["environment"]["p5"]["kv"]:
        table.add_row(
            f"{row['lob']}/{row['endpoint']} ({row['instance_type'].removeprefix('ml.')})",
            f"{row['tokens']:,}",
            f"{row['tokens_on_p5']:,}",
        )
    return table


def _unknown_prices(plan: dict[str, Any]) -> list[str]:
    env = plan["environment"]
    return sorted({*env["total_price"]["unknown"], *env["p5"]["total_price"]["unknown"]})


def print_tables(plan: dict[str, Any], *, wide: bool = False, console: Console | None = None) -> None:
    if console is None:
        probe = Console(file=sys.stdout)
        if wide:
            width = probe.width if probe.is_terminal else WIDE
        else:
            width = min(probe.width, NARROW) if probe.is_terminal else NARROW
        console = Console(file=sys.stdout, width=width)
    for table in _endpoint_tables(plan, wide) if plan["endpoints"] else []:
        console.print(table)
    console.print(_lob_table(plan, wide))
    console.print(_env_table(plan))
    if plan["environment"]["p5"]["kv"]:
        console.print(_kv_table(plan))
    legend = (
        "H100-eq: H100 GPUs of the same dense BF16 throughput; $/H100-eq-h: the LOB's $/hour per H100-eq "
        f"(P5: ${plan['environment']['p5']['price_per_gpu_hour']:,.2f} per H100-hour)."
    )
    console.print(legend, highlight=False, markup=False)
    console.print(f"Not priced: {plan['environment']['not_priced']}.", highlight=False, markup=False)
    unknown = _unknown_prices(plan)
    if unknown:
        console.print(f"+: a lower bound; no price for {', '.join(unknown)}.", highlight=False, markup=False)
    for caveat in plan["caveats"]:
        console.print(f"caveat: {caveat}", highlight=False, markup=False)
    if wide:
        console.print("How these are computed (docs/planning.md; constants and sources: --json):")
        for name, rule in plan["rules"].items():
            console.print(f"  {name}: {rule}", highlight=False, markup=False)
    else:
        console.print("How these are computed: --wide (rules), --json (constants and sources).", highlight=False)
