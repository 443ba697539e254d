"""Text rendering of a simulation report."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from launcher.autoscaler.simulator import SimulationReport


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def render_simulation(console: Console, report: SimulationReport, prices: str = "") -> None:
    """`report` as text; `prices` says where the prices come from."""
    console.print(f"Simulated {report.duration_s / 3600:.2f} h, {report.ticks} planner ticks")
    console.print("Node-hours and cost by node type:")
    for name in sorted(report.node_hours):
        cost = report.cost.get(name)
        shown = "price unknown" if cost is None else f"${cost:,.2f}"
        console.print(f"  {escape(name)}: {report.node_hours[name]:.2f} node-h, {shown}")
    total = "unknown" if report.total_cost is None else f"${report.total_cost:,.2f}"
    if prices:
        console.print(f"Prices: {escape(prices)}")
    console.print(
        f"Total cost: {total}; peak nodes: {report.peak_nodes} (head included); "
        f"spot preemptions: {report.preemptions}; capacity failures: {report.capacity_failures}"
    )
    for name, nodes in sorted(report.fallback_launches.items()):
        console.print(f"  {nodes} node(s) of {escape(name)} launched as a fallback")
    console.print(
        f"Task wait: p50 {_seconds(report.wait_p50_s)}, p95 "
        f"{_seconds(report.wait_p95_s)}, max {_seconds(report.wait_max_s)}; "
        f"{report.tasks_never_placed} of {report.tasks_total} never placed"
    )
    console.print(
        f"Planner time per tick: mean {report.planner_ms_mean:.2f} ms, p95 "
        f"{report.planner_ms_p95:.2f} ms, max {report.planner_ms_max:.2f} ms"
    )
