"""The instance seam: what every provider implements to make, list and remove its nodes.

What is done *on* a node (commands, ports, keys, the hooks around `ray start`) is the
node-access seam (`launcher/providers/access.py`), an object each provider hands out as
`provider.access`. What a provider can and cannot do is declared in its `traits`. Playing a
cloud's part (taking a node back as a spot reclaim) is not on either seam: the localhost
provider offers it through `launcher/providers/simulation.py`.

Invariants every provider keeps (`launcher.testing.contract` checks them for every provider):
- Cluster membership and node state live with the provider (cloud tags, or files for
  localhost), so a launcher that crashed or lost its laptop recovers by listing nodes.
  `nodes()` shows this cluster's nodes only, each with its kind, type and cluster tags.
- `create_nodes`, `terminate_nodes`, `stop_nodes` and `set_tags` are safe to repeat:
  `create_nodes` called again with the same `request_id` makes nothing more (it answers
  with the nodes the first call made), removing a node that is gone is not an error, and a
  tag write merges the keys it names into the node's tags.
- Capacity runs out as a CapacityError naming the zones tried, raised only once every
  zone the provider may use (less `avoid_zones`) was tried.
- Listing is eventually consistent with creation: a node just created may take a moment
  to appear, and callers never assume otherwise within one call.
- `stop_nodes` keeps a node for later reuse where the provider can (`keeps_stopped_nodes`):
  such a node leaves `nodes()`, and a later `create_nodes` of its type resumes it before
  making new ones. Elsewhere it is `terminate_nodes`.
- After every node is gone, `cleanup(purge=True)` leaves nothing of the cluster behind.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from launcher.config.model import ClusterConfig, NodeType
from launcher.providers.access import NoAccess, NodeAccess
from launcher.providers.nodes import (
    TAG_AUTOSTOPPED,
    TAG_CLUSTER,
    TAG_KIND,
    TAG_LAUNCH_ID,
    TAG_REJOIN_BY,
    TAG_SETUP_HASH,
    TAG_STANDS_IN_FOR,
    TAG_START_HASH,
    TAG_STATUS,
    TAG_TYPE,
    Node,
    NodeKind,
    NodeState,
    NodeStatus,
    head_of,
)

__all__ = [
    "TAG_AUTOSTOPPED",
    "TAG_CLUSTER",
    "TAG_KIND",
    "TAG_LAUNCH_ID",
    "TAG_REJOIN_BY",
    "TAG_SETUP_HASH",
    "TAG_STANDS_IN_FOR",
    "TAG_START_HASH",
    "TAG_STATUS",
    "TAG_TYPE",
    "Launch",
    "Node",
    "NodeKind",
    "NodeProvider",
    "NodeState",
    "NodeStatus",
    "ProviderTraits",
    "head_of",
    "made_by",
    "new_node_tags",
    "wait_unlisted",
]


@dataclass(frozen=True)
class ProviderTraits:
    """What a provider is, declared once: the callers and the contract kit read these
    instead of asking which provider it is."""

    # Whether `stop_nodes` keeps nodes for reuse (stopped cloud instances, billed for their
    # disks only) rather than removing them; a later `create_nodes` resumes them first.
    keeps_stopped_nodes: bool = False
    # Whether terminating a node gives its capacity back at once (a fixed pool of machines,
    # as on-prem): the autoscaler then stops avoiding that zone. False for clouds, where a
    # capacity failure says nothing about what a termination frees.
    terminating_frees_capacity: bool = False
    # Whether a lost head can be replaced by a new machine (a recovering run's supervisor
    # does so). False where the head is one given machine (on-prem: `provider.head_ip`):
    # only its Ray can be started again there, once the machine answers.
    replaces_lost_head: bool = True
    # Whether `up` installs the launcher on the head to run the autoscaler there (the head
    # is another machine); False where the head shares this machine's installation.
    installs_launcher_on_head: bool = False
    # Where the nodes' containers (`docker:`) run: "node" (each node is a machine of its
    # own, with one container of the config's name) or "here" (every node is on this
    # machine: one container each, named after the node, started with this machine's engine).
    containers_run: Literal["node", "here"] = "node"
    # Whether the nodes are reached over SSH with the config's `auth` (so commands that
    # reach them from the user's machine need `auth.ssh_private_key` there).
    logs_in_over_ssh: bool = False
    # Whether a worker set up from the user's machine is told the head's address as the
    # workers reach it (`access.node_env`'s RAY_HEAD_IP): false where a listing from outside
    # gives public addresses and the workers reach the head at its private one. A run's
    # supervisor then starts the Ray of workers kept across a lost head itself, at once,
    # instead of leaving them to the new head's autoscaler.
    node_env_has_cluster_head_ip: bool = False


@dataclass(frozen=True)
class Launch:
    """One `create_nodes` call, as an implementation's `_create` receives it."""

    node_type: NodeType
    kind: NodeKind
    count: int
    tags: Mapping[str, str]  # the new nodes' tags (`new_node_tags`)
    avoid_zones: frozenset[str]
    request_id: str | None

    def with_request_id(self, request_id: str) -> Launch:
        """This launch under `request_id` (for a provider that gives every launch an id)."""
        tags = {**self.tags, TAG_LAUNCH_ID: request_id}
        return dataclasses.replace(self, request_id=request_id, tags=tags)


class NodeProvider(ABC):
    """Nodes of one cluster on one provider: the instance seam.

    `on_head` is True in the autoscaler on the head node, which may reach the nodes by
    other addresses (or means) than the launcher on the user's machine. An implementation
    sets `access` (how its nodes are reached) in its constructor, and declares `traits`.
    """

    traits = ProviderTraits()

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        self.config = config
        self.cluster_name = config.cluster_name
        self.on_head = on_head
        self.access: NodeAccess = NoAccess(config)

    @abstractmethod
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        """Create (or reuse) what the cluster needs before its first node. Idempotent: a
        second call (from a new process, as a second `up`) creates nothing and returns [].
        May wait up to `wait_s` for something to become reachable. Returns what it created
        (one line each, for the user)."""

    @abstractmethod
    def nodes(self) -> list[Node]:
        """Every node of this cluster that is not terminated (nor stopped), with its current
        state; never another cluster's. Eventually consistent with `create_nodes`."""

    def create_nodes(
        self,
        node_type: NodeType,
        kind: NodeKind,
        count: int,
        tags: Mapping[str, str],
        avoid_zones: Collection[str] = (),
        request_id: str | None = None,
    ) -> list[Node]:
        """Start `count` nodes of `node_type`, tagged with `tags` plus cluster, kind and type
        (and TAG_LAUNCH_ID: `request_id`; see `new_node_tags`), in zones other than
        `avoid_zones`. Raises CapacityError, naming the zones it tried, when capacity runs
        out (after trying every zone it may use). A call repeated with the same
        `request_id` (its answer was lost) makes only what the first did not: the nodes are
        those of both. Where `traits.keeps_stopped_nodes`, stopped nodes of the type are
        resumed before new ones are made."""
        node_tags = new_node_tags(self.cluster_name, node_type, kind, tags, request_id)
        launch = Launch(node_type, kind, count, node_tags, frozenset(avoid_zones), request_id)
        return self._create(launch)

    @abstractmethod
    def _create(self, launch: Launch) -> list[Node]:
        """What `create_nodes` does, given its arguments as one `Launch` whose tags are the
        new nodes' (`new_node_tags`). Implementations keep `create_nodes`'s promises."""

    @abstractmethod
    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """Stop and remove the nodes (they leave `nodes()`). Nodes already gone, or ids
        never made, are ignored."""

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        """What the autoscaler does with workers it frees: stopped and kept for reuse (they
        leave `nodes()` and are listed by `stopped_nodes`) where `traits.keeps_stopped_nodes`,
        else removed as `terminate_nodes` does. Nodes already gone are ignored."""
        self.terminate_nodes(node_ids)

    def stopped_nodes(self) -> list[Node]:
        """The cluster's stopped nodes (kept, not running; `nodes` does not list them),
        where `traits.keeps_stopped_nodes`; else []."""
        return []

    @abstractmethod
    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        """Merge `tags` into the node's tags (keys not named keep their values); a node that
        is gone is ignored."""

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        """The zones `create_nodes` may place `node_type` in (one "" where there is no
        choice); the autoscaler counts a type out of capacity when all of them are. A
        CapacityError names a subset of these."""
        return ("",)

    def settle(self, timeout_s: float = 60.0) -> None:
        """Return once what this provider made is visible to other processes' listings
        (clouds list new machines a while after making them), or after `timeout_s`. The
        autoscaler calls it as it stops."""
        return None

    def cleanup(self, purge: bool = False) -> list[str]:
        """After every node is gone: remove leftovers, and with `purge` also what clusters
        may share and `up` would reuse (key pairs, security groups, roles), so that nothing
        of the cluster is left. Returns what it removed, for the user."""
        return []

    # -- derived from the seam (not overridden) -------------------------------------------
    def head(self) -> Node | None:
        return head_of(self.nodes())

    def workers(self) -> list[Node]:
        return [n for n in self.nodes() if n.kind is NodeKind.WORKER]


def new_node_tags(
    cluster_name: str,
    node_type: NodeType,
    kind: NodeKind,
    tags: Mapping[str, str],
    request_id: str | None = None,
) -> dict[str, str]:
    """The tags a node created by `create_nodes` starts with: `tags`, plus the cluster, its
    kind and type, an UNINITIALIZED status unless `tags` has one, and the launch id."""
    made = {
        **tags,
        TAG_CLUSTER: cluster_name,
        TAG_KIND: kind.value,
        TAG_TYPE: node_type.name,
        TAG_STATUS: tags.get(TAG_STATUS, NodeStatus.UNINITIALIZED),
    }
    if request_id:
        made[TAG_LAUNCH_ID] = request_id
    return made


def made_by(nodes: Sequence[Node], request_id: str | None) -> list[Node]:
    """The nodes among `nodes` that a `create_nodes` with `request_id` made."""
    if not request_id:
        return []
    return [n for n in nodes if n.tags.get(TAG_LAUNCH_ID) == request_id]


def wait_unlisted(
    provider: NodeProvider,
    ids: Collection[str],
    timeout_s: float,
    *,
    poll_s: float = 2.0,
    gone_states: Collection[NodeState] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Node]:
    """List the provider's nodes until none of `ids` is listed (one listed in a state of
    `gone_states` counts as gone). Returns [] then, or the nodes still listed once
    `timeout_s` has passed; the caller says what that means."""
    wanted = set(ids)
    deadline = clock() + timeout_s
    while True:
        left = [n for n in provider.nodes() if n.id in wanted and n.state not in gone_states]
        if not left or clock() >= deadline:
            return left
        sleep(poll_s)
