"""Decision traces: each tick's facts as one JSON line, to replay `choose` on them later.

`LAUNCHER_DECISION_TRACE=PATH` makes the head's daemon append its ticks to PATH: a first
line with the cluster's YAML, then one line per decision with the facts it was made on and
whether the last choice was kept (decide/gate.py). tests/test_decision_gate.py replays
recorded traces, deciding every tick and through the gate, and compares. Pure: encoding
and decoding only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.autoscaler.decide.choice import Facts
from launcher.autoscaler.decide.demand import decode, encode
from launcher.autoscaler.decide.view import PendingLaunch
from launcher.providers.base import Node, NodeKind, NodeState

TRACE_ENV = "LAUNCHER_DECISION_TRACE"
AUDIT_ENV = "LAUNCHER_DECISION_AUDIT"


def header(config_text: str) -> dict[str, Any]:
    return {"config": config_text}


def _node(node: Node) -> list[Any]:
    return [
        node.id,
        node.kind.value,
        node.node_type,
        node.ip,
        node.state.value,
        dict(node.tags),
        node.created_at,
        node.zone,
        node.reclaim_at,
    ]


def _node_of(raw: list[Any]) -> Node:
    node_id, kind, node_type, ip, state, tags, created_at, zone, reclaim_at = raw
    return Node(
        node_id,
        NodeKind(kind),
        node_type,
        ip,
        NodeState(state),
        dict(tags),
        float(created_at),
        zone,
        reclaim_at,
    )


def encode_tick(facts: Facts, kept: bool) -> dict[str, Any]:
    """One tick: the facts it decided on, and whether the gate kept the last choice."""
    listed = {id(n) for n in facts.listed}
    return {
        "now": facts.now,
        "kept": kept,
        "listed": [_node(n) for n in facts.listed],
        # The rest of `nodes`: launched, not listed yet, or listed with a reported notice.
        "nodes": [n.id if id(n) in listed else _node(n) for n in facts.nodes],
        "demand": encode(facts.demand),
        "busy": sorted(facts.busy),
        "evacuated": sorted(facts.evacuated),
        "pending": [
            [p.id, p.node_type, p.count, p.stands_in_for, p.started, p.request_id]
            for p in facts.pending
        ],
        "unavailable": dict(facts.unavailable),
        "resync": facts.resync,
    }


def decode_tick(raw: Mapping[str, Any]) -> tuple[Facts, bool]:
    listed = [_node_of(n) for n in raw["listed"]]
    by_id = {n.id: n for n in listed}
    nodes = [by_id[n] if isinstance(n, str) else _node_of(n) for n in raw["nodes"]]
    facts = Facts(
        listed,
        nodes,
        decode(raw["demand"]),
        frozenset(raw["busy"]),
        frozenset(raw["evacuated"]),
        [PendingLaunch(*p) for p in raw["pending"]],
        dict(raw["unavailable"]),
        bool(raw["resync"]),
        float(raw["now"]),
    )
    return facts, bool(raw["kept"])
