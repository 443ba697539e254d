"""The interface every provider implements, and the node records it returns.

Invariants every provider keeps (tests/contract/ checks them for every provider):
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

import contextlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import ProviderError
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener, direct
from launcher.runners.ray_node import STOP_TIMEOUT_S, gcs_port, node_ray_paths, stop_ray

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


class NodeProvider(ABC):
    """Nodes of one cluster on one provider.

    `on_head` is True in the autoscaler on the head node, which may reach the nodes by
    other addresses (or means) than the launcher on the user's machine.
    """

    # Whether `up` installs the launcher on the head to run the autoscaler there (the head
    # is another machine); False where the head shares this machine's installation.
    installs_launcher_on_head = False
    # Where the nodes' containers (`docker:`) run: "node" (each node is a machine of its
    # own, with one container of the config's name) or "here" (every node is on this
    # machine: one container each, named after the node, started with this machine's engine).
    containers_run: Literal["node", "here"] = "node"
    # Whether terminating a node gives its capacity back at once (a fixed pool of machines,
    # as on-prem): the autoscaler then stops avoiding that zone. False for clouds, where a
    # capacity failure says nothing about what a termination frees.
    terminating_frees_capacity = False
    # Whether the nodes are reached over SSH with the config's `auth` (so commands that
    # reach them from the user's machine need `auth.ssh_private_key` there).
    logs_in_over_ssh = False
    # Whether a lost head can be replaced by a new machine (a recovering run's supervisor
    # does so). False where the head is one given machine (on-prem: `provider.head_ip`):
    # only its Ray can be started again there, once the machine answers.
    replaces_lost_head = True

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        self.config = config
        self.cluster_name = config.cluster_name
        self.on_head = on_head

    @abstractmethod
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        """Create (or reuse) what the cluster needs before its first node. Idempotent.
        May wait up to `wait_s` for something to become reachable. Returns what it created
        (one line each, for the user); empty when everything existed."""

    @abstractmethod
    def nodes(self) -> list[Node]:
        """Every node of this cluster that is not terminated, with its current state."""

    @abstractmethod
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
        (and TAG_LAUNCH_ID: `request_id`), in zones other than `avoid_zones`. Raises
        CapacityError, naming the zones it tried, when capacity runs out (after trying
        every zone it may use). A call repeated with the same `request_id` (its answer was
        lost) makes only what the first did not: the nodes are those of both."""

    def new_node_tags(
        self,
        node_type: NodeType,
        kind: NodeKind,
        tags: Mapping[str, str],
        request_id: str | None = None,
    ) -> dict[str, str]:
        """The tags a node created by `create_nodes` starts with."""
        made = {
            **tags,
            TAG_CLUSTER: self.cluster_name,
            TAG_KIND: kind.value,
            TAG_TYPE: node_type.name,
            TAG_STATUS: tags.get(TAG_STATUS, NodeStatus.UNINITIALIZED),
        }
        if request_id:
            made[TAG_LAUNCH_ID] = request_id
        return made

    def made_by(self, request_id: str | None) -> list[Node]:
        """The nodes an earlier `create_nodes` with `request_id` made (as listed now)."""
        if not request_id:
            return []
        return [n for n in self.nodes() if n.tags.get(TAG_LAUNCH_ID) == request_id]

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        """The zones `create_nodes` may place `node_type` in (one "" where there is no
        choice); the autoscaler counts a type out of capacity when all of them are."""
        return ("",)

    @abstractmethod
    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """Stop and remove the nodes. Nodes already gone are ignored."""

    # Whether `stop_nodes` keeps nodes for reuse (stopped cloud instances, billed for their
    # disks only) rather than removing them.
    @property
    def keeps_stopped_nodes(self) -> bool:
        return False

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        """What the autoscaler does with workers it frees: stopped and kept for reuse by a
        later `create_nodes` where the provider `keeps_stopped_nodes`, else removed."""
        self.terminate_nodes(node_ids)

    def settle(self, timeout_s: float = 60.0) -> None:
        """Return once what this provider made is visible to other processes' listings
        (clouds list new machines a while after making them), or after `timeout_s`. The
        autoscaler calls it as it stops."""
        return None

    def stopped_nodes(self) -> list[Node]:
        """The cluster's stopped nodes (kept, not running; `nodes` does not list them),
        where the provider `keeps_stopped_nodes`."""
        return []

    @abstractmethod
    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        """Merge `tags` into the node's tags."""

    @abstractmethod
    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        """How to run commands and copy files on `node`; output is appended to `log_path`."""

    def node_env(self, node: Node, head: Node | None) -> dict[str, str]:
        """Environment the provider adds for commands on `node` (Ray's conventions included)."""
        env = {
            "LAUNCHER_CLUSTER": self.cluster_name,
            "LAUNCHER_NODE_ID": node.id,
            "RAY_NODE_TYPE_NAME": node.node_type,
        }
        if node.ip:
            env["LAUNCHER_NODE_IP"] = node.ip
        if head is not None and head.ip:
            env["RAY_HEAD_IP"] = head.ip
        return env

    def after_ray_start(self, node: Node) -> tuple[str, ...]:
        """Commands run on `node` once its Ray started (with `node_env`): what the provider
        runs beside Ray there (AWS: the watcher of a spot worker's reclaim notice)."""
        return ()

    # Whether `ray start` is told the node type's `resources` and `labels` (Ray's
    # RAY_OVERRIDE_RESOURCES / RAY_OVERRIDE_LABELS), as Ray's updater does on every provider
    # but on-prem, where Ray detects each machine's own.
    overrides_ray_resources = True

    def ray_start_env(self, node: Node) -> dict[str, str]:
        """Environment for `node`'s start-ray commands only, beyond `node_env`: the node
        type's declared resources and labels, which Ray then advertises instead of what it
        detects (so `resources: {CPU: 0}` keeps tasks off a head, on any machine size)."""
        node_type = self.config.node_types.get(node.node_type)
        if not self.overrides_ray_resources or node_type is None:
            return {}
        env = {}
        resources = self.ray_resources(node_type)
        if resources:
            env["RAY_OVERRIDE_RESOURCES"] = json.dumps(resources, sort_keys=True)
        if node_type.labels:
            env["RAY_OVERRIDE_LABELS"] = json.dumps(dict(node_type.labels), sort_keys=True)
        return env

    def ray_resources(self, node_type: NodeType) -> dict[str, Any]:
        """The resources `ray start` is told a node of `node_type` has (`ray_start_env`)."""
        return dict(node_type.resources)

    def container_mounts(self, node: Node) -> tuple[str, ...]:
        """Directories of `node`'s host (`~/...`) that the launcher's code inside the node's
        container must share with the host; mounted at the same place under its home."""
        return ()

    def container_name(self, node: Node, name: str) -> str:
        """The name of `node`'s container, given the config's `docker.container_name`."""
        return name

    def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
        """How `-p/--port-forward` reaches a port of `node` (through `runner`'s connection
        where the provider uses one)."""
        if not node.ip:
            raise ProviderError(f"node {node.id} has no address to forward ports to")
        return direct(node.ip)

    def ray_address(self, head: Node) -> str:
        """The address (`ip:port`) of the cluster's Ray GCS, as seen from the head."""
        return f"{head.ip}:{self.gcs_port()}"

    def gcs_port(self) -> int:
        """The port of Ray's GCS, as the head's start commands give it (`--port`)."""
        return gcs_port(self.config.head_start_ray_commands)

    def head_python(self) -> str:
        """The Python on the head that has the launcher installed (runs the autoscaler)."""
        return "python3"

    def ray_start_guard(self, node: Node) -> contextlib.AbstractContextManager[None]:
        """Held while a node's start-ray commands run (localhost: one `ray start` at a time
        per machine, since concurrent ones race for Ray's socket names)."""
        return contextlib.nullcontext()

    def before_ray_start(self, node: Node, runner: CommandRunner) -> str | None:
        """Called before a node's start-ray commands run (again): stops the Ray running
        there (`stop_node_ray`). Returns what it could not stop (one line), else None."""
        return self.stop_node_ray(node, runner)

    def stop_node_ray(self, node: Node, runner: CommandRunner, force: bool = False) -> str | None:
        """Stop `node`'s Ray and check that none of it is left. Where a node is a machine
        of its own: with the Ray the start commands use (their own `ray stop` may name
        another, or none). `force`: killed at once, not drained (a Ray whose head is gone
        has nothing to drain, and its raylet only gives up on its own after a minute).
        Returns what it could not stop (one line), else None."""
        paths = self.ray_paths(head=node.kind is NodeKind.HEAD)
        return stop_ray(runner, paths, STOP_TIMEOUT_S, force)

    def reclaim_node(self, node: Node) -> bool:
        """Take `node` (a worker or the head) away as a cloud reclaims a spot machine, where
        the provider can play that part (the localhost provider, for types marked
        `simulated_spot`): the node's machine goes with all it runs, and it is listed
        PREEMPTED until terminated. False (nothing done) where it cannot; callers then
        terminate the node instead."""
        return False

    def notify_reclaim(self, node: Node, at: float) -> bool:
        """Give notice, as a cloud does before reclaiming a spot machine, that `node` goes at
        time `at` (`reclaim_node` then takes it): it is listed with `reclaim_at` until then.
        False where the provider cannot play that part."""
        return False

    def ray_paths(self, *, head: bool) -> tuple[str, ...]:
        """The `ray` executables a node's start commands name by path."""
        config = self.config
        return node_ray_paths(
            config.head_start_ray_commands, config.worker_start_ray_commands, head=head
        )

    def cleanup(self, purge: bool = False) -> list[str]:
        """After every node is gone: remove leftovers, and with `purge` also what clusters
        may share and `up` would reuse (key pairs, security groups, roles). Returns what it
        removed, for the user."""
        return []

    def ssh_private_key(self) -> str | None:
        """The private key file nodes are reached with (None: SSH's defaults)."""
        return self.config.auth.ssh_private_key

    def head(self) -> Node | None:
        return head_of(self.nodes())

    def workers(self) -> list[Node]:
        return [n for n in self.nodes() if n.kind is NodeKind.WORKER]


def head_of(nodes: Sequence[Node]) -> Node | None:
    """The cluster's head among `nodes` (the oldest, should there be more than one)."""
    heads = [n for n in nodes if n.kind is NodeKind.HEAD]
    return min(heads, key=lambda n: n.created_at) if heads else None


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
