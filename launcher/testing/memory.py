"""An in-memory provider: the real `NodeProvider` seam with nothing behind it.

Nodes live in a dict; each node type has zones, each (type, zone) a capacity; any method can
be told to fail; every call is recorded; listings may lag behind changes, as a cloud's do. It
keeps the invariants `providers/base.py` states (request ids make `create_nodes` safe to
repeat, removing a gone node is no error, tags merge, capacity runs out as a CapacityError
naming every zone tried), so code above the seam (the autoscaler's executor and daemon) can
be tested against it without a cloud.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError
from launcher.providers.base import (
    TAG_LAUNCH_ID,
    Launch,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    ProviderTraits,
)


@dataclass(frozen=True)
class Call:
    """One call made to the provider, with the arguments that tell calls apart."""

    method: str
    node_type: str = ""
    count: int = 0
    avoid_zones: frozenset[str] = frozenset()
    node_ids: tuple[str, ...] = ()
    request_id: str | None = None


@dataclass
class _Failure:
    error: Exception
    times: int | None  # None: every call until cleared


class MemoryProvider(NodeProvider):
    """Nodes of one cluster, in memory.

    `zones`: the zones of each node type (a type not named has `default_zones`).
    `capacity`: the most nodes of a type a zone holds at once, per (type, zone); None: no
    limit anywhere; a mapping: the pairs it names hold that many, every other pair none.
    `keeps_stopped`: `stop_nodes` keeps nodes (listed by `stopped_nodes`), and a later
    `create_nodes` of their type resumes them before making new ones.
    `frees_capacity`: what its traits say of a termination (room in a zone comes back when
    a node there goes, whatever they say: a zone holds `capacity` nodes at once).
    `lag`: how many listings a change to the nodes takes to show (a cloud's eventually
    consistent listing): after a change (a node made, resumed, removed, stopped, retagged
    or `update`d), the next `lag` calls of `nodes()` answer with the nodes as they were
    before it; changes made meanwhile show with it. 0 (the default): at once. `held()`
    always has the nodes as they are. An attribute: set it once the scene is set.
    Its nodes run nothing: its `access` is the default `NoAccess`.
    """

    def __init__(
        self,
        config: ClusterConfig,
        capacity: Mapping[tuple[str, str], int] | None = None,
        *,
        zones: Mapping[str, Sequence[str]] | None = None,
        default_zones: Sequence[str] = ("",),
        keeps_stopped: bool = False,
        frees_capacity: bool = False,
        clock: Callable[[], float] = time.time,
        lag: int = 0,
        on_head: bool = False,
    ) -> None:
        super().__init__(config, on_head)
        self.capacity = None if capacity is None else dict(capacity)
        self.type_zones = {name: tuple(z) for name, z in (zones or {}).items()}
        self.default_zones = tuple(default_zones)
        self.traits = ProviderTraits(
            keeps_stopped_nodes=keeps_stopped, terminating_frees_capacity=frees_capacity
        )
        self.clock = clock
        self.lag = lag
        self.calls: list[Call] = []
        self.bootstrapped = False
        self._running: dict[str, Node] = {}
        self._stopped: dict[str, Node] = {}
        self._failures: dict[str, list[_Failure]] = {}
        self._ids = itertools.count()
        self._listed: list[Node] = []  # what `nodes()` answers while `_stale` lasts
        self._stale = 0  # listings left that answer with `_listed`
        self._lock = threading.RLock()

    # -- what tests use to set the scene and look at it ---------------------------------
    def fail(self, method: str, error: Exception, times: int | None = None) -> None:
        """Make calls of `method` raise `error`: the next `times` calls (None: every call
        until `clear_failures`). Failures queue: each is used up before the next."""
        with self._lock:
            self._failures.setdefault(method, []).append(_Failure(error, times))

    def clear_failures(self, method: str | None = None) -> None:
        with self._lock:
            if method is None:
                self._failures.clear()
            else:
                self._failures.pop(method, None)

    def held(self) -> list[Node]:
        """The nodes it holds (what `nodes()` lists, once any `lag` has passed), without
        recording a call or failing."""
        with self._lock:
            return list(self._running.values())

    def update(self, node_id: str, **changes: Any) -> Node:
        """Change a node as the world would (its state, address, reclaim notice, tags)."""
        with self._lock:
            node = dataclasses.replace(self._running[node_id], **changes)
            self._changing()
            self._running[node_id] = node
            return node

    def calls_of(self, *methods: str) -> list[Call]:
        """The calls made to `methods`, in order."""
        with self._lock:
            return [c for c in self.calls if c.method in methods]

    def ids_of(self, *methods: str) -> list[str]:
        """The node ids the calls to `methods` named, in order."""
        return [i for c in self.calls_of(*methods) for i in c.node_ids]

    # -- the seam -------------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        self._called(Call("bootstrap"))
        with self._lock:
            if self.bootstrapped:
                return []
            self.bootstrapped = True
            return [f"in-memory cluster {self.cluster_name}"]

    def nodes(self) -> list[Node]:
        with self._lock:
            self._called(Call("nodes"))
            if self._stale > 0:
                self._stale -= 1
                return list(self._listed)
            return self.held()

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        return self.type_zones.get(node_type.name, self.default_zones)

    def _create(self, launch: Launch) -> list[Node]:
        node_type, kind, count = launch.node_type, launch.kind, launch.count
        avoid_zones, request_id = launch.avoid_zones, launch.request_id
        with self._lock:
            call = Call("create_nodes", node_type.name, count, avoid_zones)
            self._called(dataclasses.replace(call, request_id=request_id))
            made = [n for n in self._running.values() if request_id and _launched(n, request_id)]
            node_tags = launch.tags
            tried = [z for z in self.zones(node_type) if z not in avoid_zones]
            for zone in tried:
                while len(made) < count and self._room(node_type.name, zone) > 0:
                    node = self._resume(node_type.name, zone, node_tags)
                    made.append(node or self._make(node_type.name, kind, zone, node_tags))
            if len(made) < count:
                raise CapacityError(node_type.name, tried, "InsufficientCapacity (in memory)", made)
            return made

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        with self._lock:
            self._called(Call("terminate_nodes", node_ids=tuple(node_ids)))
            for node_id in node_ids:
                if node_id in self._running:
                    self._changing()
                self._running.pop(node_id, None)
                self._stopped.pop(node_id, None)

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        if not self.traits.keeps_stopped_nodes:
            self.terminate_nodes(node_ids)
            return
        with self._lock:
            self._called(Call("stop_nodes", node_ids=tuple(node_ids)))
            for node_id in node_ids:
                if node_id in self._running:
                    self._changing()
                node = self._running.pop(node_id, None)
                if node is not None:
                    self._stopped[node_id] = dataclasses.replace(
                        node, state=NodeState.STOPPED, ip=None
                    )

    def stopped_nodes(self) -> list[Node]:
        with self._lock:
            self._called(Call("stopped_nodes"))
            return list(self._stopped.values())

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._called(Call("set_tags", node_ids=(node_id,)))
            for where in (self._running, self._stopped):
                if node_id in where:
                    if where is self._running:
                        self._changing()
                    node = where[node_id]
                    where[node_id] = dataclasses.replace(node, tags={**node.tags, **tags})
                    return  # a node that is gone is ignored

    def settle(self, timeout_s: float = 60.0) -> None:
        self._called(Call("settle"))

    def cleanup(self, purge: bool = False) -> list[str]:
        with self._lock:
            self._called(Call("cleanup"))
            removed = [f"{len(self._stopped)} stopped nodes"] if self._stopped else []
            self._stopped.clear()
            if self.bootstrapped:
                removed.append(f"in-memory cluster {self.cluster_name}")
                self.bootstrapped = False
            return removed

    # -- inside ---------------------------------------------------------------------------
    def _called(self, call: Call) -> None:
        """Record `call`, then raise the failure set for its method, if any."""
        with self._lock:
            self.calls.append(call)
            queued = self._failures.get(call.method)
            if not queued:
                return
            failure = queued[0]
            if failure.times is not None:
                failure.times -= 1
                if failure.times <= 0:
                    queued.pop(0)
            raise failure.error

    def _changing(self) -> None:
        """Called before each change to the running nodes: with a `lag`, listings answer
        with the nodes as they are now for that many calls, unless an earlier change's are
        still being answered."""
        if self.lag > 0 and self._stale == 0:
            self._listed = list(self._running.values())
            self._stale = self.lag

    def _room(self, type_name: str, zone: str) -> int:
        if self.capacity is None:
            return 1
        held = sum(1 for n in self._running.values() if (n.node_type, n.zone) == (type_name, zone))
        return self.capacity.get((type_name, zone), 0) - held

    def _resume(self, type_name: str, zone: str, tags: Mapping[str, str]) -> Node | None:
        for node_id, node in self._stopped.items():
            if (node.node_type, node.zone) == (type_name, zone):
                del self._stopped[node_id]
                resumed = dataclasses.replace(
                    node, state=NodeState.PENDING, tags={**node.tags, **tags}
                )
                self._changing()
                self._running[node_id] = resumed
                return resumed
        return None

    def _make(self, type_name: str, kind: NodeKind, zone: str, tags: Mapping[str, str]) -> Node:
        node = Node(
            f"n{next(self._ids)}",
            kind,
            type_name,
            None,
            NodeState.PENDING,
            dict(tags),
            created_at=self.clock(),
            zone=zone,
        )
        self._changing()
        self._running[node.id] = node
        return node


def _launched(node: Node, request_id: str) -> bool:
    return node.tags.get(TAG_LAUNCH_ID) == request_id
