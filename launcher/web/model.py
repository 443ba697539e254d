"""What the page shows, as JSON-ready dicts: pure functions of cluster records, the live
state a poll found (`Live`), the cluster's timeline events and its runs. No I/O, the time
passed in. Long lists come a page at a time (`page`), filtered on the server."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.autoscaler.telemetry import by_type
from launcher.cluster.ops import AutoscalerState
from launcher.ledger.record import ClusterRecord, ClusterState, NodeRecord
from launcher.ledger.record import Run as NodeRun
from launcher.ledger.report import list_row
from launcher.providers.base import Node
from launcher.runs.listing import state_of
from launcher.runs.model import Run

MAX_PAGE = 500
MAX_POINTS = 1500  # a plot's points: longer histories are thinned evenly
UNREACHABLE = "unreachable"
Event = Mapping[str, Any]


@dataclass(frozen=True)
class Live:
    """What the last poll of a running cluster found. `error`: why the last poll failed (the
    rest is from the last one that answered); `polled_at`: when one last answered."""

    nodes: tuple[Node, ...] = ()
    autoscaler: AutoscalerState | None = None
    autoscaler_running: bool = False
    ray_address: str | None = None
    runs: tuple[Run, ...] = ()
    polled_at: float | None = None
    error: str = ""
    seen: tuple[Event, ...] = field(default=())  # samples this page took, for a plot


def page(items: Sequence[Any], offset: int, limit: int) -> dict[str, Any]:
    limit = max(1, min(MAX_PAGE, limit))
    offset = max(0, min(offset, max(0, len(items) - 1)))
    return {
        "total": len(items),
        "offset": offset,
        "limit": limit,
        "items": list(items[offset : offset + limit]),
    }


def shown_state(record: ClusterRecord, live: Live | None) -> str:
    """The record's state, or `unreachable` for one recorded up whose last poll failed."""
    if record.state == ClusterState.UP and live is not None and live.error:
        return UNREACHABLE
    return record.state


def cluster_row(record: ClusterRecord, live: Live | None, now: float) -> dict[str, Any]:
    row = list_row(record, now)
    row["shown_state"] = shown_state(record, live)
    row["node_count"] = len(live.nodes) if live and live.polled_at else len(record.running_nodes)
    row["error"] = live.error if live else ""
    row["polled_at"] = live.polled_at if live else None
    return row


def cluster_rows(
    records: Iterable[ClusterRecord], live: Mapping[str, Live], now: float
) -> list[dict[str, Any]]:
    """Every cluster: the ones up first, then by name."""
    rows = [cluster_row(r, live.get(r.name), now) for r in records]
    return sorted(rows, key=lambda r: (r["state"] == ClusterState.GONE, r["name"]))


def _last_start(node: NodeRecord | None) -> float | None:
    return node.runs[-1].start if node is not None and node.runs else None


def node_rows(record: ClusterRecord, live: Live | None, now: float) -> list[dict[str, Any]]:
    """The cluster's nodes: those the last poll listed (with the record's price and spot),
    then those only the record knows (gone, or running as last recorded)."""
    rows = []
    listed = {n.id: n for n in live.nodes} if live and live.polled_at else {}
    for node in listed.values():
        kept = record.nodes.get(node.id)
        started = _last_start(kept) or node.created_at or None
        rows.append(
            {
                "id": node.id,
                "kind": node.kind.value,
                "node_type": node.node_type,
                "machine": kept.machine if kept else "",
                "spot": kept.spot if kept else None,
                "state": node.state.value,
                "status": node.status.value,
                "address": node.ip or "",
                "zone": node.zone,
                "age_s": None if started is None else max(0.0, now - started),
                "ended_at": None,
                "per_hour": _price(kept),
                "billed": kept.billed if kept else True,
                "price_source": kept.price_source if kept else "",
                "reclaim_at": node.reclaim_at,
            }
        )
    for kept in record.nodes.values():
        if kept.id in listed:
            continue
        running = kept.running and not listed and record.state == ClusterState.UP
        last = kept.runs[-1] if kept.runs else None
        rows.append(
            {
                "id": kept.id,
                "kind": kept.kind,
                "node_type": kept.node_type,
                "machine": kept.machine,
                "spot": kept.spot,
                "state": "running (as recorded)" if running else _ended(record, last),
                "status": "",
                "address": "",
                "zone": "",
                "age_s": None
                if last is None
                else max(0.0, (now if running else last.end) - last.start),
                "ended_at": None if running or last is None else last.end,
                "per_hour": _price(kept),
                "billed": kept.billed if kept else True,
                "price_source": kept.price_source,
                "reclaim_at": None,
            }
        )
    rows.sort(key=_node_order)
    return rows


STOPPED_SLACK_S = 600.0  # a node that ended this close to the cluster's stop was stopped


def _ended(record: ClusterRecord, last: NodeRun | None) -> str:
    """How a node that no longer runs ended: stopped with its cluster (kept, `up` starts it
    again), else gone."""
    kept = record.state in (ClusterState.STOPPED, ClusterState.AUTOSTOPPED)
    if kept and last is not None and last.end >= record.state_since - STOPPED_SLACK_S:
        return "stopped"
    return "gone"


def _node_order(row: Mapping[str, Any]) -> tuple[bool, bool, float, str]:
    """Running nodes first (the head leading), then the gone, the last to end first."""
    ended = row["state"] in ("gone", "stopped")
    return (ended, row["kind"] != "head", -float(row["ended_at"] or 0), row["id"])


def _price(node: NodeRecord | None) -> float | None:
    if node is None:
        return None
    return node.price_per_hour if node.billed else 0.0


def filter_rows(rows: Sequence[Mapping[str, Any]], text: str, keys: Sequence[str]) -> list[Any]:
    """Rows where any of `keys` holds `text` (case-blind); all of them for no text."""
    needle = text.strip().lower()
    if not needle:
        return list(rows)
    return [r for r in rows if any(needle in str(r.get(k) or "").lower() for k in keys)]


def decision_rows(events: Sequence[Event], live: Live | None) -> list[dict[str, Any]]:
    """Every decision, newest first: the timeline's, else (no timeline from this head yet)
    the last few the head's state file lists."""
    rows = [
        {
            "t": e.get("t"),
            "action": str(e.get("action") or ""),
            "node_type": e.get("node_type"),
            "count": e.get("count"),
            "reason": str(e.get("reason") or ""),
        }
        for e in events
        if e.get("kind") == "decision"
    ]
    if not rows and live is not None and live.autoscaler is not None:
        rows = [
            {"t": t, "action": "status", "node_type": None, "count": None, "reason": text}
            for t, text in live.autoscaler.decisions
        ]
    rows.reverse()
    return rows


def decisions_view(
    rows: Sequence[Mapping[str, Any]], action: str, text: str, offset: int, limit: int
) -> dict[str, Any]:
    actions: dict[str, int] = {}
    for row in rows:
        actions[row["action"]] = actions.get(row["action"], 0) + 1
    chosen = [r for r in rows if r["action"] == action] if action else list(rows)
    chosen = filter_rows(chosen, text, ("action", "node_type", "reason"))
    return {**page(chosen, offset, limit), "actions": dict(sorted(actions.items()))}


def reclaim_rows(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Reclaims and capacity failures, newest first."""
    keep = ("reclaim", "failure")
    rows = [dict(e) for e in events if e.get("kind") in keep]
    rows.reverse()
    return rows


def series(
    events: Sequence[Event], live: Live | None, max_points: int = MAX_POINTS
) -> dict[str, Any]:
    """Nodes by type (running + launching) and pending demand by resource over time, from
    the timeline's samples, else the samples this page took itself; thinned to
    `max_points`."""
    samples = [e for e in events if e.get("kind") == "sample"]
    source = "timeline"
    if not samples and live is not None:
        samples, source = list(live.seen), "page"
    # In time order (a copy that joins two heads' histories may not be).
    samples.sort(key=lambda s: float(s.get("t", 0.0)))
    if len(samples) > max_points:
        step = len(samples) / max_points
        picked = [samples[int(i * step)] for i in range(max_points - 1)]
        samples = [*picked, samples[-1]]
    types = sorted({t for s in samples for t in (s.get("nodes") or {})})
    resources = sorted({r for s in samples for r in (s.get("pending") or {})})
    nodes: dict[str, list[float]] = {t: [] for t in types}
    pending: dict[str, list[float]] = {r: [] for r in resources}
    for sample in samples:
        by_type = sample.get("nodes") or {}
        for t in types:
            counts = by_type.get(t) or {}
            nodes[t].append(float(counts.get("running", 0)) + float(counts.get("launching", 0)))
        wanted = sample.get("pending") or {}
        for r in resources:
            pending[r].append(float(wanted.get(r, 0.0)))
    return {
        "source": source,
        "t": [float(s.get("t", 0.0)) for s in samples],
        "nodes": nodes,
        "pending": pending,
    }


def sample_of(
    nodes: Sequence[Node], autoscaler: AutoscalerState | None, now: float
) -> dict[str, Any]:
    """A timeline-shaped sample of what a poll saw (for clusters whose head keeps none)."""
    running, launching = by_type(nodes)  # counted as the head's own samples count them
    counts = {
        name: {"running": running.get(name, 0), "launching": launching.get(name, 0)}
        for name in sorted(set(running) | set(launching))
    }
    pending: dict[str, float] = {}
    if autoscaler is not None:
        for resources, count in autoscaler.pending:
            for name, amount in resources.items():
                pending[name] = pending.get(name, 0.0) + amount * count
    return {"kind": "sample", "t": now, "nodes": counts, "pending": pending}


def run_rows(runs: Sequence[Run], now: float) -> list[dict[str, Any]]:
    return [
        {
            "id": run.id,
            "script": run.script,
            "state": state_of(run, now),
            "created_at": run.created_at,
            "ended_at": run.ended_at,
            "attempts": len(run.attempts),
            "time_lost_s": run.time_lost(now),
            "message": run.message,
            "recoveries": [
                {
                    "lost_head": r.lost_head,
                    "why": r.why,
                    "seen_at": r.seen_at,
                    "new_head": r.new_head,
                    "adopted": len(r.adopted),
                    "took_s": max(r.phases.values()) if r.phases else None,
                }
                for r in run.recoveries
            ],
        }
        for run in sorted(runs, key=lambda r: r.created_at, reverse=True)
    ]


def event_counts(events: Sequence[Event]) -> dict[str, int]:
    """How many decisions, reclaims and capacity failures the timeline holds."""
    counts = {"decisions": 0, "reclaims": 0, "failures": 0}
    names = {"decision": "decisions", "reclaim": "reclaims", "failure": "failures"}
    for event in events:
        name = names.get(str(event.get("kind")))
        if name is not None:
            counts[name] += 1
    return counts


def cluster_detail(
    record: ClusterRecord, live: Live | None, counts: Mapping[str, int], now: float
) -> dict[str, Any]:
    """The cluster's heading: its row in the list, with the pending demand, the
    autoscaler, and how many decisions and reclaims there are (`event_counts`)."""
    row = cluster_row(record, live, now)
    autoscaler = live.autoscaler if live else None
    row.update(
        autoscaler_running=bool(live and live.autoscaler_running),
        ray_address=live.ray_address if live else None,
        pending=[{"resources": r, "count": c} for r, c in autoscaler.pending] if autoscaler else [],
        infeasible=list(autoscaler.infeasible) if autoscaler else [],
        launching=[{"node_type": t, "count": c} for t, c in autoscaler.launching]
        if autoscaler
        else [],
        runs=len(live.runs) if live else 0,
        **counts,
    )
    return row
