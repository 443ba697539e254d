"""What Ray is waiting for, as values: the demand the autoscaler decides from, and its
wire form between the GCS-reading child process (observe/ray_state.py) and the daemon
(observe/gcs.py), one JSON line per read. Pure: parsing only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.autoscaler.decide.planner import Gang, Resources

JOBS_UNKNOWN = "the job table could not be read"


@dataclass(frozen=True)
class RayNode:
    node_id: str
    ip: str
    total: Resources
    available: Resources
    idle_s: float
    alive: bool


@dataclass(frozen=True)
class Demand:
    pending: tuple[tuple[Resources, int], ...] = ()
    gangs: tuple[Gang, ...] = ()
    constraints: tuple[Resources, ...] = ()
    nodes: tuple[RayNode, ...] = ()
    # Ray jobs whose driver runs (not Ray's internal ones); JOBS_UNKNOWN when the job table
    # could not be read (counted as a job: autostop fails closed).
    jobs: tuple[str, ...] = ()
    # Actors alive (not Ray's internal ones; an actor holding no resources counts too); -1
    # when the actor table could not be read (counted as busy: autostop fails closed).
    actors: int = 0
    # Reclaim notices nodes reported themselves (notice_watch): (node id, reclaim time).
    notices: tuple[tuple[str, float], ...] = ()
    session: str = ""  # the Ray session's name (Ray's metrics label them with it)

    @property
    def empty(self) -> bool:
        return not (self.pending or self.gangs or self.constraints)


# -- the wire form: one JSON line of demand per request line -----------------------------
READY_LINE = "ready"


def encode(demand: Demand) -> dict[str, Any]:
    return {
        "pending": [[dict(r), c] for r, c in demand.pending],
        "gangs": [[[dict(b) for b in g.bundles], g.strategy, g.name] for g in demand.gangs],
        "constraints": [dict(c) for c in demand.constraints],
        "nodes": [
            [n.node_id, n.ip, dict(n.total), dict(n.available), n.idle_s, n.alive]
            for n in demand.nodes
        ],
        "jobs": list(demand.jobs),
        "actors": demand.actors,
        "notices": [list(n) for n in demand.notices],
        "session": demand.session,
    }


def decode(data: Mapping[str, Any]) -> Demand:
    return Demand(
        tuple((dict(r), int(c)) for r, c in data["pending"]),
        tuple(Gang(tuple(dict(b) for b in bundles), s, n) for bundles, s, n in data["gangs"]),
        tuple(dict(c) for c in data["constraints"]),
        tuple(
            RayNode(i, ip, dict(t), dict(a), float(idle), bool(alive))
            for i, ip, t, a, idle, alive in data["nodes"]
        ),
        tuple(str(j) for j in data.get("jobs", ())),
        int(data.get("actors", 0)),
        tuple((str(ip), float(at)) for ip, at in data.get("notices", ())),
        str(data.get("session", "")),
    )


def request_line(forget: Sequence[str] = (), metrics_address: str | None = None) -> str:
    """A request: `read`, or `read` with the node ids whose notices to delete first (a
    list), and with the address where the autoscaler serves its metrics, for Ray's metrics
    discovery to name (an object: {"forget": [...], "metrics_address": "ip:port"})."""
    if metrics_address:
        args = {"forget": list(forget), "metrics_address": metrics_address}
        return f"read {json.dumps(args)}\n"
    return f"read {json.dumps(list(forget))}\n" if forget else "read\n"


def _args_of(request: str) -> object:
    _, _, rest = request.strip().partition(" ")
    try:
        return json.loads(rest) if rest else []
    except ValueError:
        return []


def _forget_of(request: str) -> list[str]:
    ids = _args_of(request)
    if isinstance(ids, dict):
        ids = ids.get("forget", [])
    return [str(i) for i in ids] if isinstance(ids, list) else []


def _metrics_address_of(request: str) -> str | None:
    args = _args_of(request)
    address = args.get("metrics_address") if isinstance(args, dict) else None
    return str(address) if address else None
