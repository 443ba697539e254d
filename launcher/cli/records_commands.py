"""`list` and `cost-report`: the clusters this machine launched, what they run and cost."""

from __future__ import annotations

import time

import click
from rich.table import Table

from launcher.cli.app import FiniteFloatRange, Settings, cli
from launcher.ledger.record import ClusterState
from launcher.ledger.refresh import refresh
from launcher.ledger.report import cost_rows, duration, list_row, price_source_lines
from launcher.ledger.store import read_all, records_dir


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--refresh",
    "ask",
    is_flag=True,
    help="Ask each cluster's provider what runs now instead of showing the records kept here "
    "(a cluster taken down elsewhere then shows as gone).",
)
@click.option("--all", "show_all", is_flag=True, help="Also show clusters that are gone.")
@click.pass_obj
def list_clusters(settings: Settings, as_json: bool, ask: bool, show_all: bool) -> None:
    """Every cluster launched from this machine: state, nodes, $/hour now, cost so far."""
    records = read_all()
    problems: dict[str, str] = {}
    # Shown: what is not gone, and what a refresh has just found gone.
    were_up = {r.name for r in records if r.state != ClusterState.GONE}
    if ask:
        refreshed = [refresh(r) for r in records]
        problems = {r.record.name: r.problem for r in refreshed if r.problem}
        records = [r.record for r in refreshed]
    now = time.time()
    rows = [list_row(r, now) for r in records if show_all or as_json or r.name in were_up]
    for row in rows:
        row["refresh_problem"] = problems.get(row["name"])
    if as_json:
        settings.output.json({"clusters": rows, "records": str(records_dir())})
        return
    out = settings.output
    if not rows:
        gone = sum(r.state == ClusterState.GONE for r in records)
        out.line(
            "No cluster launched from this machine is up"
            + (f" ({gone} gone: `launcher list --all`)." if gone else ".")
        )
        return
    table = Table(box=None, pad_edge=False)
    for title in ("CLUSTER", "PROVIDER", "STATE", "NODES", "UPTIME", "$/H NOW", "COST SO FAR"):
        table.add_column(title)
    for row in rows:
        nodes = ", ".join(
            f"{n['count']} {n['node_type']} ({n['machine']}, {n['lifecycle']})"
            for n in row["nodes"]
        )
        state = row["state"]
        if row["autostop"] and state == ClusterState.UP:
            stop = row["autostop"]
            state += f" (autostop {stop['idle_minutes']:g}m{', down' if stop.get('down') else ''})"
        table.add_row(
            row["name"],
            f"{row['provider']}/{row['region']}" if row["region"] else row["provider"],
            state,
            nodes or "-",
            "-" if row["uptime_s"] is None else duration(row["uptime_s"]),
            row["per_hour_now_text"],
            row["cost_so_far_text"],
        )
    out.console.print(table)
    for row in rows:
        if row["state_note"]:
            out.line(f"{row['name']}: {row['state_note']}")
        if row["refresh_problem"]:
            out.line(f"{row['name']}: could not refresh: {row['refresh_problem']}")
    if not ask:
        out.line("As recorded here; `launcher list --refresh` asks the providers.")


@cli.command(name="cost-report")
@click.option(
    "--days",
    type=FiniteFloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Report the last N days.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def cost_report(settings: Settings, days: float, as_json: bool) -> None:
    """Node-hours and cost per cluster, by node type and spot/on-demand, from the records
    kept here as nodes came and went (clusters taken down included)."""
    until = time.time()
    since = until - days * 86400
    clusters = cost_rows(read_all(), since, until)
    if as_json:
        settings.output.json({"since": since, "until": until, "days": days, "clusters": clusters})
        return
    out = settings.output
    if not clusters:
        out.line(f"No node ran in the last {days:g} day(s) in a cluster launched from here.")
        return
    table = Table(box=None, pad_edge=False)
    for title in ("CLUSTER", "NODE TYPE", "MACHINE", "LIFECYCLE", "NODE-HOURS", "COST"):
        table.add_column(title)
    for cluster in clusters:
        for i, row in enumerate(cluster["rows"]):
            table.add_row(
                cluster["name"] if i == 0 else "",
                row["node_type"],
                row["machine"],
                row["lifecycle"],
                f"{row['node_hours']:.2f}",
                row["cost_text"],
            )
        table.add_row("", "", "", "total", f"{cluster['node_hours']:.2f}", cluster["cost_text"])
    out.console.print(table)
    tables = sorted({c["price_table"] for c in clusters if c["price_table"]})
    for label in tables:
        out.line(f"Prices: {label}; list prices, not your bill.")
    for line in price_source_lines(clusters):
        out.line(f"  price of {line}")
    if any(c["cost_is_lower_bound"] for c in clusters):
        out.line(
            ">= : some nodes were last seen running by a look from here and were gone at the "
            "next; they ran at least that long."
        )
