"""Text rendering of `launcher status`."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from launcher.cluster.ops import AutoscalerState, ClusterStatus
from launcher.config.model import Autostop
from launcher.providers.base import NodeState
from launcher.runs.listing import state_of
from launcher.runs.model import Run


def render_status(console: Console, status: ClusterStatus) -> None:
    config = status.config
    if not status.nodes:
        console.print(f"Cluster {escape(config.cluster_name)} has no nodes.")
        return
    table = Table(show_edge=False, box=None, pad_edge=False)
    for column in ("node", "kind", "type", "ip", "state", "status", "resources"):
        table.add_column(column)
    for node in status.nodes:
        node_type = config.node_types.get(node.node_type)
        resources = (
            ", ".join(
                f"{k} {v}"
                for k, v in sorted(node_type.resources.items())
                if k not in ("memory", "object_store_memory")
            )
            if node_type
            else ""
        )
        table.add_row(
            node.id,
            node.kind.value,
            escape(node.node_type),
            node.ip or "-",
            node.state.value
            if node.reclaim_at is None or node.state is not NodeState.RUNNING
            else f"reclaim at {time.strftime('%H:%M:%S', time.localtime(node.reclaim_at))}",
            node.status.value,
            escape(resources),
        )
    console.print(
        f"Cluster {escape(config.cluster_name)} ({config.provider.type}); Ray at "
        f"{status.ray_address or '-'}; autoscaler "
        f"{'running' if status.autoscaler_running else 'not running'}"
    )
    console.print(table)
    render_autoscaler(console, status.autoscaler)


def _bundle(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


def render_autoscaler(console: Console, state: AutoscalerState | None) -> None:
    if state is None:
        return
    parts = [
        ", ".join(f"{count} x {_bundle(r)}" for r, count in state.pending) or "nothing pending"
    ]
    if state.placement_groups:
        parts.append(f"{state.placement_groups} placement group(s) pending")
    if state.requested:
        parts.append(f"request_resources: {state.requested} bundle(s)")
    console.print("Demand: " + "; ".join(parts))
    if state.launching:
        console.print("Launching: " + ", ".join(f"{n} x {escape(t)}" for t, n in state.launching))
    for node_type, why in state.unavailable:
        console.print(f"Not launching {escape(node_type)}: {escape(why)}")
    if state.infeasible:
        console.print(
            "Infeasible (fits no node type): " + ", ".join(_bundle(r) for r in state.infeasible)
        )
    console.print(autostop_line(state.raw.get("autostop")))
    failures = loop_exceptions_line(state.raw)
    if failures:
        console.print(failures)
    if state.decisions:
        console.print("Recent decisions:")
        for when, text in state.decisions:
            stamp = time.strftime("%H:%M:%S", time.localtime(when))
            console.print(f"  {stamp} {escape(text)}")


def autostop_line(raw: object) -> str:
    """`Autostop: stop after 10 min idle; idle 3.2 min so far` (or what keeps it busy)."""
    if not isinstance(raw, dict):
        return "Autostop: off (`launcher autostop CLUSTER.yaml -i N` sets it)"
    setting = Autostop(float(raw.get("idle_minutes", 0)), bool(raw.get("down")))
    line = f"Autostop: {setting.describe()}; "
    busy = raw.get("busy") or []
    if busy:
        return line + "not idle: " + escape(", ".join(str(b) for b in busy))
    return line + f"idle {float(raw.get('idle_s', 0)) / 60:.1f} min so far"


def loop_exceptions_line(raw: dict[str, object]) -> str | None:
    """`Autoscaler rounds failed: 3, the last at 12:00:01: RuntimeError: ...`, or None."""
    count = raw.get("update_loop_exceptions")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    line = f"Autoscaler rounds failed: {count}"
    last = raw.get("last_loop_exception")
    if isinstance(last, dict) and isinstance(last.get("time"), int | float):
        stamp = time.strftime("%H:%M:%S", time.localtime(float(last["time"])))
        line += f", the last at {stamp}: {escape(str(last.get('error', '')))}"
    return line + " (`launcher monitor` shows each with its traceback)"


def render_runs(console: Console, runs: Sequence[Run], config_path: str) -> None:
    """A line for each recovering run not ended yet, with how to take up one nobody
    supervises."""
    now = time.time()
    for run in runs:
        state = state_of(run, now)
        line = f"Run {run.id} ({escape(run.script)}): {state}, attempt {len(run.attempts)}"
        if "unsupervised" in state:
            line += f"; take it up with `launcher jobs supervise {escape(config_path)} {run.id}`"
        console.print(line)
