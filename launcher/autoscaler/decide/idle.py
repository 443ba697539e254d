"""Autostop's decisions: is the cluster idle, since when, and is it time to stop it. Pure:
the daemon feeds it Ray's demand, the open sessions and its clock.

Idle means: nothing of Ray's waits (tasks, actors, placement groups, `request_resources`),
nothing holds resources on any node (a running task or actor), no actor is alive (one holding
no resources, a detached one, counts too), no Ray job's driver runs, no
`exec`, `attach` or `submit` session is open on the head, and no node is being launched or
set up. A GCS that cannot be read is
not idle (autostop fails closed: it never stops a cluster it cannot see).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.autoscaler.decide.demand import JOBS_UNKNOWN, Demand
from launcher.autoscaler.decide.evacuate import used_resources
from launcher.config.model import Autostop

UNREADABLE = "Ray's state cannot be read"


def busy_reasons(demand: Demand | None, sessions: int, launching: int = 0) -> tuple[str, ...]:
    """Why the cluster is not idle now (empty: it is). `launching`: nodes the autoscaler is
    launching or setting up (a cluster coming up is not idle)."""
    if demand is None:
        return (UNREADABLE,)
    reasons = []
    waiting = sum(count for _, count in demand.pending)
    if waiting:
        reasons.append(f"{waiting} task(s) or actor(s) waiting")
    if demand.gangs:
        reasons.append(f"{len(demand.gangs)} placement group(s) waiting")
    if demand.constraints:
        reasons.append("resources requested with request_resources")
    holding = [n for n in demand.nodes if n.alive and used_resources(n)]
    if holding:
        reasons.append(f"work running on {len(holding)} node(s)")
    if demand.actors < 0:
        reasons.append("the actor table could not be read")
    elif demand.actors:
        reasons.append(f"{demand.actors} actor(s) alive")
    if JOBS_UNKNOWN in demand.jobs:
        reasons.append(JOBS_UNKNOWN)
    elif demand.jobs:
        reasons.append(f"{len(demand.jobs)} Ray job(s) running")
    if sessions:
        reasons.append(f"{sessions} exec/attach/submit session(s) open")
    if launching:
        reasons.append(f"{launching} node(s) being launched or set up")
    return tuple(reasons)


@dataclass
class IdleTimer:
    """How long the cluster has been idle, as ticks report what keeps it busy."""

    idle_since: float | None = None
    busy: tuple[str, ...] = ()
    last: float = 0.0  # the time of the last update

    def update(self, reasons: tuple[str, ...], now: float) -> float:
        """Idle seconds so far (0 while busy). While Ray's state cannot be read, the count
        pauses: neither reset (one failed read) nor counted as idle."""
        self.busy = reasons
        if reasons == (UNREADABLE,):
            if self.idle_since is not None:
                self.idle_since += now - self.last
            self.last = now
            return 0.0 if self.idle_since is None else now - self.idle_since
        self.last = now
        if reasons:
            self.idle_since = None
            return 0.0
        if self.idle_since is None:
            self.idle_since = now
        return now - self.idle_since


def due(setting: Autostop | None, idle_s: float) -> bool:
    """Time to stop: autostop is set and the cluster was idle long enough."""
    return setting is not None and idle_s >= setting.idle_minutes * 60.0
