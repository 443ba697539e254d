"""Keep every node type at its min_workers and replace dead workers: a pure decision."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from launcher.config.model import ClusterConfig
from launcher.providers.base import Node, NodeKind, NodeState, NodeStatus


@dataclass(frozen=True)
class Decisions:
    terminate: tuple[tuple[str, str], ...] = ()  # (node id, reason)
    launch: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # type -> (count, why)

    @property
    def empty(self) -> bool:
        return not self.terminate and not self.launch


def decide(
    config: ClusterConfig,
    nodes: Iterable[Node],
    updating: set[str],
    blocked_types: AbstractSet[str] = frozenset(),
) -> Decisions:
    """What to terminate and launch so each type has at least min_workers healthy workers.

    `updating` are nodes whose setup is in progress (never terminated here);
    `blocked_types` are types in failure backoff (not launched now).
    """
    terminate = []
    alive: Counter[str] = Counter()
    for node in nodes:
        if node.kind is not NodeKind.WORKER:
            continue
        if node.state is NodeState.DEAD:
            terminate.append((node.id, "Ray on it stopped (process died or node lost)"))
        elif node.status is NodeStatus.FAILED and node.id not in updating:
            terminate.append((node.id, "setup failed"))
        elif node.node_type not in config.node_types:
            terminate.append((node.id, f"node type {node.node_type} is no longer in the config"))
        else:
            alive[node.node_type] += 1
    room = config.max_workers - sum(alive.values())
    launch: dict[str, tuple[int, str]] = {}
    for name, node_type in config.node_types.items():
        missing = node_type.min_workers - alive[name]
        if missing <= 0 or name in blocked_types or room <= 0:
            continue
        count = min(missing, room)
        room -= count
        launch[name] = (count, f"below min_workers ({alive[name]} < {node_type.min_workers})")
    return Decisions(tuple(terminate), launch)
