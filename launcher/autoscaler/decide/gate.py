"""When a tick may keep the last tick's choice instead of deciding again. Pure.

An idle cluster's ticks decide the same thing every second: nothing to launch, nothing to
terminate. `choose` is pure, so a tick whose facts are those of the last one gets the same
choice; the daemon then keeps that choice and skips the planner. Facts are "the same" when
everything `choose` reads is equal, with two exceptions that move with time alone:

- Ray's idle times grow every read. `choose` only compares them with the node types' idle
  timeouts (`idle_s < timeout`), so each is kept as how many of the timeouts it has reached:
  equal counts give equal comparisons, and the tick an idle timeout comes due differs.
- `now` is read for nodes given notice of a reclaim (evacuations, waiting for the reclaim)
  and kept workers a run's supervisor restarts (`rejoin_by`). While any node is in either
  state, every tick decides again.

A choice that acts (launches, terminates, sets up, evacuates) is never kept: each of those is
decided on the listing of its own tick. `file_mounts_sync_continuously`'s resync ticks decide
again too. `LAUNCHER_DECISION_AUDIT=1` makes the daemon decide every tick anyway and compare
(tests/test_decision_gate.py replays recorded ticks the same way).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.autoscaler.decide.choice import Facts
from launcher.autoscaler.decide.demand import RayNode
from launcher.autoscaler.decide.planner import Resources, Settings
from launcher.autoscaler.decide.view import PendingLaunch
from launcher.providers.base import Node

# A Ray node as `choose` reads it: id, address, total, available, idle step, alive.
RayNodeKey = tuple[str, str, Resources, Resources, int, bool]


@dataclass(frozen=True)
class TickKey:
    """Everything a tick's `choose` reads, as compared between ticks (see the module)."""

    settings: Settings  # compared by identity: new prices or config are a new object
    listed: tuple[Node, ...]
    nodes: tuple[Node, ...]
    pending: tuple[tuple[Resources, int], ...]
    gangs: tuple[object, ...]
    constraints: tuple[Resources, ...]
    ray_nodes: tuple[RayNodeKey, ...]
    busy: frozenset[str]
    evacuated: frozenset[str]
    launches: tuple[PendingLaunch, ...]
    unavailable: tuple[tuple[str, str], ...]

    def same_as(self, other: TickKey | None) -> bool:
        """Whether a tick with this key gets the choice of a tick with `other`."""
        if other is None or self.settings is not other.settings:
            return False
        return self._facts() == other._facts()

    def _facts(self) -> tuple[object, ...]:
        return (
            self.listed,
            self.nodes,
            self.pending,
            self.gangs,
            self.constraints,
            self.ray_nodes,
            self.busy,
            self.evacuated,
            self.launches,
            self.unavailable,
        )


def idle_thresholds(settings: Settings) -> tuple[float, ...]:
    """Every idle timeout `choose` may compare an idle time with, sorted."""
    found = {settings.idle_timeout_s}
    found.update(t.idle_timeout_s for t in settings.types.values() if t.idle_timeout_s is not None)
    return tuple(sorted(found))


def idle_step(idle_s: float, thresholds: Sequence[float]) -> int:
    """How many of `thresholds` `idle_s` has reached (`idle_s >= threshold`)."""
    return bisect.bisect_right(thresholds, idle_s)


def _ray_node(node: RayNode, thresholds: Sequence[float]) -> RayNodeKey:
    return (
        node.node_id,
        node.ip,
        node.total,
        node.available,
        idle_step(node.idle_s, thresholds),
        node.alive,
    )


def _timed(node: Node) -> bool:
    """Whether `choose` compares something of `node` with the time."""
    return node.reclaim_at is not None or node.rejoin_by > 0


def tick_key(
    settings: Settings,
    thresholds: Sequence[float],
    facts: Facts,
    last: TickKey | None = None,
) -> TickKey | None:
    """The key of a tick's facts; None when the tick must decide whatever the last one did
    (its choice depends on the time: see the module). `last`: the last tick's key, whose
    nodes (when these are the same) are known to have neither notice nor rejoin time."""
    nodes = tuple(facts.nodes)
    if facts.resync:
        return None
    if (last is None or nodes != last.nodes) and any(_timed(n) for n in nodes):
        return None
    demand = facts.demand
    return TickKey(
        settings,
        tuple(facts.listed),
        nodes,
        demand.pending,
        tuple(demand.gangs),
        demand.constraints,
        tuple(_ray_node(n, thresholds) for n in demand.nodes),
        frozenset(facts.busy),
        frozenset(facts.evacuated),
        tuple(facts.pending),
        tuple(sorted(facts.unavailable.items())),
    )
