"""What `list` and `cost-report` show, from cluster records: pure functions to JSON-ready
rows (the text views render these)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from launcher.ledger.record import ClusterRecord, ClusterState, hourly_now, total_cost, usage


def money(amount: float | None, *, billed: bool = True, at_least: bool = False) -> str:
    if not billed:
        return "free"
    if amount is None:
        return "unknown"
    return f"{'>= ' if at_least else ''}${amount:,.2f}"


def duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def _nodes_by_type(record: ClusterRecord) -> list[dict[str, Any]]:
    counts: dict[tuple[str, str, bool], int] = {}
    for node in record.running_nodes:
        key = (node.node_type, node.machine, node.spot)
        counts[key] = counts.get(key, 0) + 1
    return [
        {"node_type": t, "machine": m, "lifecycle": "spot" if s else "on-demand", "count": c}
        for (t, m, s), c in sorted(counts.items())
    ]


def list_row(record: ClusterRecord, now: float) -> dict[str, Any]:
    rows = usage(record, 0.0, now)
    billed = any(n.billed for n in record.nodes.values()) or not record.nodes
    up = record.state == ClusterState.UP
    running_billed = any(n.billed for n in record.running_nodes)
    per_hour = hourly_now(record) if running_billed else 0.0
    cost = total_cost(rows)
    at_least = any(r.at_least for r in rows)
    return {
        "name": record.name,
        "provider": record.provider,
        "region": record.region,
        "state": record.state,
        "state_since": record.state_since,
        "state_note": record.state_note,
        "autostop": dict(record.autostop) if record.autostop else None,
        "nodes": _nodes_by_type(record),
        "uptime_s": now - record.state_since if up else None,
        "per_hour_now": per_hour,
        "per_hour_now_text": money(per_hour, billed=billed) if up else "-",
        "cost_so_far": cost if billed else 0.0,
        "cost_so_far_text": money(cost, billed=billed, at_least=at_least),
        "cost_is_lower_bound": at_least,
        "price_table": record.price_table,
        "config_path": record.config_path,
    }


def cost_rows(records: Sequence[ClusterRecord], since: float, until: float) -> list[dict[str, Any]]:
    """Per cluster: node-hours and cost by node type and lifecycle over [since, until]."""
    out = []
    for record in records:
        rows = usage(record, since, until)
        if not rows:
            continue
        billed = any(r.billed for r in rows)
        at_least = any(r.at_least for r in rows)
        total = total_cost(rows)
        out.append(
            {
                "name": record.name,
                "provider": record.provider,
                "region": record.region,
                "state": record.state,
                "price_table": record.price_table,
                "rows": [
                    {
                        "node_type": r.node_type,
                        "machine": r.machine,
                        "lifecycle": "spot" if r.spot else "on-demand",
                        "node_hours": round(r.hours, 4),
                        "cost": None if r.cost is None else round(r.cost, 4),
                        "cost_text": money(r.cost, billed=r.billed, at_least=r.at_least),
                        "billed": r.billed,
                        "price_sources": list(r.price_sources),
                    }
                    for r in rows
                ],
                "node_hours": round(sum(r.hours for r in rows), 4),
                "cost": None if total is None else round(total, 4),
                "cost_text": money(total, billed=billed, at_least=at_least),
                "cost_is_lower_bound": at_least,
            }
        )
    return out


def price_source_lines(clusters: Sequence[dict[str, Any]]) -> list[str]:
    """Where each row's price comes from, one line per cluster's row that says (the rows of
    `cost_rows`)."""
    out = []
    for cluster in clusters:
        for row in cluster["rows"]:
            if row["billed"] and row["price_sources"]:
                what = f"{cluster['name']} {row['node_type']} ({row['lifecycle']})"
                out.append(f"{what}: {'; '.join(row['price_sources'])}")
    return out
