"""Which workers are broken and must be replaced: a pure decision.

The planner launches workers (for min_workers and demand); this only finds the ones to
terminate first, so their replacements are planned in the same tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from launcher.autoscaler.decide.demand import RayNode
from launcher.config.model import ClusterConfig
from launcher.providers.base import Node, NodeKind, NodeState, NodeStatus


def broken_workers(
    config: ClusterConfig,
    nodes: Iterable[Node],
    updating: AbstractSet[str],
    ray_nodes: Iterable[RayNode] = (),
) -> tuple[tuple[str, str], ...]:
    """(node id, reason) of workers whose Ray died, whose setup failed, or whose type left
    the config. `updating` are nodes whose setup is in progress (never terminated here).
    `ray_nodes` is what Ray's GCS reports: a set-up worker whose address only has dead Ray
    nodes lost its Ray, even where the provider still sees the machine running."""
    ray_nodes = list(ray_nodes)
    alive = {n.ip for n in ray_nodes if n.alive}
    dead = {n.ip for n in ray_nodes if not n.alive} - alive
    terminate = []
    for node in nodes:
        if node.kind is not NodeKind.WORKER:
            continue
        if node.state is NodeState.PREEMPTED:
            terminate.append((node.id, f"preempted in {node.zone or 'its zone'}"))
        elif node.state is NodeState.DEAD:
            terminate.append((node.id, "Ray on it stopped (process died or node lost)"))
        elif node.ip in dead and node.status is NodeStatus.UP_TO_DATE and node.id not in updating:
            terminate.append((node.id, "Ray on it stopped (Ray reports the node dead)"))
        elif node.status is NodeStatus.FAILED and node.id not in updating:
            terminate.append((node.id, "setup failed"))
        elif node.node_type not in config.node_types:
            terminate.append((node.id, f"node type {node.node_type} is no longer in the config"))
    return tuple(terminate)
