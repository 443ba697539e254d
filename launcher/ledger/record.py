"""The record of one cluster: its state and, per node, when it ran, as a plain value.

Every command that lists a cluster's nodes (`up`, `status`, `down`, `list --refresh`) and the
autoscaler on the head (every listing it reads) fold what they saw into the record with
`observe`; copies kept in two places (this machine, the head) are combined with `merge`.
Node-hours and costs are read from it (`usage`). Everything here is pure: files are
`store.py`'s job.

A node runs from when the provider says it was launched (or started again, after a stop)
until it is no longer listed. An observer that saw it recently (`EXACT_GAP_S`) closes the
run when it sees it gone; one that had not looked for longer (a laptop that was closed)
closes it at the last time it was seen, and marks the end as not known exactly: costs are
then "at least".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EXACT_GAP_S = 300.0
MERGE_SLACK_S = 1.0  # runs of one node this close together are one run


class ClusterState:
    UP = "up"
    STOPPED = "stopped"
    AUTOSTOPPED = "autostopped"  # stopped by the head's autostop (nodes kept, not running)
    GONE = "gone"


@dataclass(frozen=True)
class Run:
    start: float
    end: float  # the last time it was seen running, while `open`
    open: bool = True
    exact: bool = True  # False: it ended some time after `end` (nobody was looking)

    def hours(self, since: float, until: float) -> float:
        return max(0.0, min(self.end, until) - max(self.start, since)) / 3600.0


@dataclass(frozen=True)
class NodeRecord:
    """One node (instance, pod, process group) and its runs. `price_per_hour` is the list
    price of what it is (None: unknown) unless `billed` is False (machines already paid for:
    this machine, on-prem)."""

    id: str
    kind: str
    node_type: str
    machine: str
    spot: bool
    price_per_hour: float | None
    billed: bool = True
    runs: tuple[Run, ...] = ()
    price_source: str = ""  # where the price comes from ("live: ...", "static table ...")

    @property
    def running(self) -> bool:
        return bool(self.runs) and self.runs[-1].open


@dataclass(frozen=True)
class Seen:
    """A node as an observer listed it, with what it costs (from the price table)."""

    id: str
    kind: str
    node_type: str
    launched_at: float  # when the provider says it was launched or last started; 0: unknown
    machine: str
    spot: bool
    price_per_hour: float | None
    billed: bool
    price_source: str = ""


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    provider: str
    region: str
    config_path: str
    config_text: str  # to list the cluster again without its file (`list --refresh`)
    state: str
    state_since: float
    state_note: str = ""  # how it came to this state: "autostop after 10 min idle", ...
    price_table: str = ""  # "as of DATE, SOURCE" of the prices recorded
    autostop: Mapping[str, Any] | None = None  # {"idle_minutes": N, "down": bool}
    nodes: Mapping[str, NodeRecord] = field(default_factory=dict)

    @property
    def running_nodes(self) -> list[NodeRecord]:
        return [n for n in self.nodes.values() if n.running]


def observe(
    record: ClusterRecord, seen: Sequence[Seen], now: float, listed_all: bool = True
) -> ClusterRecord:
    """`record` after an observer listed `seen` (the cluster's nodes that exist and run) at
    `now`. `listed_all`: the listing is the whole cluster (a node missing from it is gone)."""
    nodes = dict(record.nodes)
    for node in seen:
        old = nodes.get(node.id)
        runs = list(old.runs) if old else []
        if runs and runs[-1].open and node.launched_at > runs[-1].end + MERGE_SLACK_S:
            # Started again since it was last seen (stopped and started while nobody
            # looked): that run ended some time after it was last seen.
            runs[-1] = dataclasses.replace(runs[-1], open=False, exact=False)
        if runs and runs[-1].open:
            runs[-1] = dataclasses.replace(runs[-1], end=max(runs[-1].end, now))
        else:
            after = runs[-1].end if runs else 0.0
            start = node.launched_at if after < node.launched_at <= now else now
            runs.append(Run(start, now))
        nodes[node.id] = NodeRecord(
            node.id,
            node.kind,
            node.node_type,
            node.machine,
            node.spot,
            node.price_per_hour,
            node.billed,
            tuple(runs),
            node.price_source or (old.price_source if old else ""),
        )
    if listed_all:
        listed = {n.id for n in seen}
        for node_id, kept in nodes.items():
            if node_id not in listed and kept.running:
                nodes[node_id] = _closed(kept, now)
    return dataclasses.replace(record, nodes=nodes)


def _closed(node: NodeRecord, now: float) -> NodeRecord:
    last = node.runs[-1]
    exact = now - last.end <= EXACT_GAP_S
    ended = Run(last.start, now if exact else last.end, open=False, exact=exact)
    return dataclasses.replace(node, runs=(*node.runs[:-1], ended))


def all_gone(record: ClusterRecord, now: float, state: str, note: str = "") -> ClusterRecord:
    """Every node seen gone at `now` (`down` took them, or a refresh found none), and the
    cluster in `state`."""
    closed = observe(record, (), now)
    return dataclasses.replace(closed, state=state, state_since=now, state_note=note)


def merge(a: ClusterRecord, b: ClusterRecord) -> ClusterRecord:
    """Two copies of one cluster's record combined: every node's runs joined, the state of
    the copy that changed it last."""
    newer, older = (a, b) if a.state_since >= b.state_since else (b, a)
    nodes = dict(older.nodes)
    for node_id, node in newer.nodes.items():
        other = nodes.get(node_id)
        nodes[node_id] = node if other is None else _merge_node(node, other)
    return dataclasses.replace(
        newer,
        config_text=newer.config_text or older.config_text,
        config_path=newer.config_path or older.config_path,
        nodes=nodes,
    )


def _merge_node(a: NodeRecord, b: NodeRecord) -> NodeRecord:
    runs = sorted([*a.runs, *b.runs], key=lambda r: r.start)
    joined: list[Run] = []
    for run in runs:
        if joined and run.start <= joined[-1].end + MERGE_SLACK_S:
            last = joined[-1]
            # The run that reaches furthest says how it ends: seen later, it knows more.
            ends = run if run.end >= last.end else last
            joined[-1] = Run(last.start, ends.end, ends.open, ends.exact)
        else:
            joined.append(run)
    return dataclasses.replace(a, runs=tuple(joined))


@dataclass(frozen=True)
class Usage:
    """Node-hours and cost of one (node type, machine, spot) of a cluster over a window."""

    node_type: str
    machine: str
    spot: bool
    hours: float
    cost: float | None  # None: a price unknown
    billed: bool
    at_least: bool  # some run's end is not known exactly: more than this
    price_sources: tuple[str, ...] = ()  # where its nodes' prices come from


def usage(record: ClusterRecord, since: float, until: float) -> list[Usage]:
    groups: dict[tuple[str, str, bool], list[NodeRecord]] = {}
    for node in record.nodes.values():
        groups.setdefault((node.node_type, node.machine, node.spot), []).append(node)
    out = []
    for (node_type, machine, spot), nodes in sorted(groups.items()):
        hours = sum(r.hours(since, until) for n in nodes for r in n.runs)
        if hours <= 0:
            continue
        billed = any(n.billed for n in nodes)
        cost: float | None = 0.0
        for node in nodes:
            node_hours = sum(r.hours(since, until) for r in node.runs)
            if not node.billed or node_hours == 0:
                continue
            if node.price_per_hour is None or cost is None:
                cost = None
            else:
                cost += node_hours * node.price_per_hour
        at_least = any(not r.exact and r.end > since for n in nodes for r in n.runs)
        sources = tuple(sorted({n.price_source for n in nodes if n.billed and n.price_source}))
        out.append(Usage(node_type, machine, spot, hours, cost, billed, at_least, sources))
    return out


def hourly_now(record: ClusterRecord) -> float | None:
    """What the running nodes cost per hour together (None: a running node's price is
    unknown)."""
    total = 0.0
    for node in record.running_nodes:
        if not node.billed:
            continue
        if node.price_per_hour is None:
            return None
        total += node.price_per_hour
    return total


def total_cost(rows: Iterable[Usage]) -> float | None:
    total = 0.0
    for row in rows:
        if row.cost is None:
            return None
        total += row.cost
    return total


# -- JSON ----------------------------------------------------------------------------------
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_RECORD_FIELDS = _names(ClusterRecord)
_NODE_FIELDS = _names(NodeRecord)
_RUN_FIELDS = _names(Run)


def _node_json(node: NodeRecord) -> dict[str, Any]:
    """`dataclasses.asdict(node)`, field by field: every field but `runs` is a plain value
    (asdict's deep copies cost a head ~50 ms per write of a thousand nodes)."""
    out = {name: getattr(node, name) for name in _NODE_FIELDS}
    out["runs"] = [{name: getattr(run, name) for name in _RUN_FIELDS} for run in node.runs]
    return out


def to_json(record: ClusterRecord) -> dict[str, Any]:
    out = {name: getattr(record, name) for name in _RECORD_FIELDS}
    out["nodes"] = {k: _node_json(v) for k, v in record.nodes.items()}
    out["autostop"] = dict(record.autostop) if record.autostop is not None else None
    return out


def from_json(raw: Mapping[str, Any]) -> ClusterRecord:
    known = {f.name for f in dataclasses.fields(NodeRecord)}  # a newer version's are skipped
    nodes = {
        k: NodeRecord(
            **{f: x for f, x in v.items() if f in known and f != "runs"},
            runs=tuple(Run(**r) for r in v.get("runs", ())),
        )
        for k, v in raw.get("nodes", {}).items()
    }
    fields = {f.name for f in dataclasses.fields(ClusterRecord)} - {"nodes"}
    return ClusterRecord(**{k: v for k, v in raw.items() if k in fields}, nodes=nodes)
