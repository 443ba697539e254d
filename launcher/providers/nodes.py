"""The records a provider lists its nodes as, and the tags every provider keeps on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

# Tags every provider stores on its nodes.
TAG_CLUSTER = "launcher-cluster"
TAG_KIND = "launcher-node-kind"  # head | worker
TAG_TYPE = "launcher-node-type"
TAG_STATUS = "launcher-node-status"  # see NodeStatus
TAG_SETUP_HASH = "launcher-setup-hash"
TAG_START_HASH = "launcher-start-hash"
TAG_LAUNCH_ID = "launcher-launch-id"
TAG_STANDS_IN_FOR = "launcher-stands-in-for"  # launched for this type's min_workers
TAG_AUTOSTOPPED = "launcher-autostopped"  # the time the head's autostop stopped the cluster
# A worker kept across its head's loss: until this time (whole epoch seconds) the run's
# supervisor starts its Ray against the new head, and the autoscaler leaves it alone.
TAG_REJOIN_BY = "launcher-rejoin-by"


class NodeKind(StrEnum):
    HEAD = "head"
    WORKER = "worker"


class NodeStatus(StrEnum):
    """Where the updater has brought a node (kept in TAG_STATUS)."""

    UNINITIALIZED = "uninitialized"
    WAITING = "waiting-for-node"
    SYNCING = "syncing-files"
    SETTING_UP = "setting-up"
    STARTING_RAY = "starting-ray"
    UP_TO_DATE = "up-to-date"
    FAILED = "update-failed"


class NodeState(StrEnum):
    """What the provider sees of the machine (or processes) behind a node."""

    PENDING = "pending"  # created, not yet usable
    RUNNING = "running"  # usable; Ray may or may not be started on it
    DEAD = "dead"  # was set up, but its Ray node is gone (killed, crashed)
    PREEMPTED = "preempted"  # the provider took it back (a spot interruption)
    STOPPED = "stopped"  # kept, not running: only `stopped_nodes` lists these


@dataclass(frozen=True)
class Node:
    id: str
    kind: NodeKind
    node_type: str
    ip: str | None
    state: NodeState
    tags: Mapping[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    zone: str = ""  # where it runs (an availability zone); "" where there is one place
    # When the provider has given notice that it takes the node back (a spot interruption
    # notice): the time it goes. The node still runs until then.
    reclaim_at: float | None = None

    @property
    def status(self) -> NodeStatus:
        try:
            return NodeStatus(self.tags.get(TAG_STATUS, NodeStatus.UNINITIALIZED))
        except ValueError:
            return NodeStatus.UNINITIALIZED

    @property
    def rejoin_by(self) -> float:
        """Until when a run's supervisor starts this kept worker's Ray (0: nobody does)."""
        try:
            return float(self.tags.get(TAG_REJOIN_BY) or 0)
        except ValueError:
            return 0.0


def head_of(nodes: Sequence[Node]) -> Node | None:
    """The cluster's head among `nodes` (the oldest, should there be more than one)."""
    heads = [n for n in nodes if n.kind is NodeKind.HEAD]
    return min(heads, key=lambda n: n.created_at) if heads else None
