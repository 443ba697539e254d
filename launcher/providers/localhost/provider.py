"""The localhost provider: each node is a set of real Ray processes on this machine, with
its own loopback IP (127.0.0.2, 127.0.0.3, ...), home directory and declared resources.

With a `docker:` section each node is a container of this machine's engine instead,
started with `--net=host` and named after its node (`CONTAINER_NAME-NODE_ID`); Ray runs in
it, and the autoscaler on this machine's host, as without containers. `up` refuses at once
when the engine is not installed here.

State is a directory per cluster (`$LAUNCHER_HOME/clusters/NAME/localhost/nodes/ID/`) holding
`node.json` (kind, type, IP, ports, tags); processes carry LAUNCHER_CLUSTER_KEY (a hash of
the user and this directory, so only this cluster of this home has it; see `spec.process_key`)
and LAUNCHER_NODE_ID in their environment, so nothing is lost if the node files are. Addresses and
ports are claimed machine-wide (see `machine.py`), whatever the home or user.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.model import DEFAULT_METRICS_PORT, ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError
from launcher.files import write_whole
from launcher.paths import launcher_home
from launcher.providers.base import (
    TAG_STATUS,
    Launch,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
    ProviderTraits,
    made_by,
)
from launcher.providers.localhost.access import LocalhostAccess
from launcher.providers.localhost.machine import claim, claims, machine_dir, machine_lock, release
from launcher.providers.localhost.node_files import (
    container_name_of,
    container_of,
    node_pids,
    read_json,
    write_json,
)
from launcher.providers.localhost.processes import (
    cluster_processes,
    kill_processes,
    snapshot,
    stop_processes,
)
from launcher.providers.localhost.spec import (
    node_temp_dir,
    process_key,
    ray_temp_dir,
    state_dir,
)

_FIRST_HOST = 2  # 127.0.0.1 is rewritten by Ray to the machine's own address: avoid it
_LAST_HOST = 254
ZONE = "localhost"

# How long a terminated node's processes get after SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 0.5


class LocalhostProvider(NodeProvider):
    """Nodes as this machine's processes; also plays a cloud's part for `simulated_spot`
    types (`launcher.providers.simulation.SimulatesReclaims`)."""

    traits = ProviderTraits(containers_run="here", node_env_has_cluster_head_ip=True)

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        self.root = Path(state_dir(self.cluster_name))
        self.nodes_dir = self.root / "nodes"
        self.access = LocalhostAccess(config)

    # -- NodeProvider -------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        self.nodes_dir.mkdir(parents=True, exist_ok=True)
        return []

    def cluster_key(self) -> str:
        """The key this cluster's processes carry: what ties a process to this cluster of
        this home, where the cluster's name alone is shared by every home and user."""
        return process_key(self.cluster_name)

    def nodes(self) -> list[Node]:
        if not self.nodes_dir.is_dir():
            return []
        key = self.cluster_key()
        raylets = {
            p.tags.get("LAUNCHER_NODE_ID")
            for p in snapshot()
            if p.tagged(key) and _is_raylet(p.command)
        }
        found = []
        for record in sorted(self.nodes_dir.glob("*/node.json")):
            data = read_json(record)
            if data is None:
                continue
            found.append(self._node(data, data["id"] in raylets))
        return found

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        return (ZONE,)

    def _create(self, launch: Launch) -> list[Node]:
        node_type, kind, count = launch.node_type, launch.kind, launch.count
        avoid_zones, request_id = launch.avoid_zones, launch.request_id
        self.bootstrap()
        earlier = made_by(self.nodes(), request_id)
        created = [n for n in earlier if n.node_type == node_type.name][:count]
        if len(created) == count:
            return created
        if ZONE in avoid_zones:
            raise CapacityError(node_type.name, (), "asked to avoid the only zone, localhost")
        capacity = node_type.node_config.get("simulated_capacity")
        if isinstance(capacity, int):
            existing = sum(1 for n in self.nodes() if n.node_type == node_type.name)
            room = max(0, capacity - existing)
        else:
            room = count
        with machine_lock("localhost-ips.lock"):
            for _ in range(min(count - len(created), room)):
                node_id = f"{kind.value[0]}-{uuid.uuid4().hex[:8]}"
                home = self.nodes_dir / node_id / "home"
                home.mkdir(parents=True)
                names = (
                    ["agent", "ray", "client", "dashboard"] if kind is NodeKind.HEAD else ["agent"]
                )
                given = _given()  # read once for the address and the ports
                ports = _free_ports(names, given.ports | self._metrics_ports())
                data: dict[str, Any] = {
                    "id": node_id,
                    "kind": kind.value,
                    "node_type": node_type.name,
                    "ip": _free_ip(given.ips),
                    "created_at": time.time(),
                    "ports": ports,
                    "tags": dict(launch.tags),
                }
                record = self.nodes_dir / node_id / "node.json"
                write_json(record, data)
                # A head's autoscaler serves its metrics on its own address: no node's
                # Ray (which binds all addresses) may be given that port.
                held = self._metrics_ports() if kind is NodeKind.HEAD else set()
                claim(record, data["ip"], sorted({*ports.values(), *held}))
                created.append(self._node(data, False))
        if len(created) < count:
            raise CapacityError(
                node_type.name,
                (ZONE,),
                f"node_config.simulated_capacity is {capacity}; {len(created)} of {count} made",
                created,
            )
        return created

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """As a cloud terminates machines: all at once, and without waiting on their
        programs. The nodes' processes get SIGTERM together and SIGKILL after
        TERMINATE_GRACE_S (Ray's raylets and GCS do not exit on SIGTERM within seconds, and
        nothing of a terminated node is kept: its files go with it)."""
        problems = []
        stopping = []
        for node_id in node_ids:
            data = read_json(self.nodes_dir / node_id / "node.json")
            spec = container_of(self.config, data) if data else None
            if spec is not None:
                problem = _remove_container(spec.engine, container_name_of(node_id, spec.name))
                if problem:
                    problems.append(f"{node_id}: {problem}")
                    continue
            stopping.append(node_id)
        pids = [pid for node_id in stopping for pid in self._processes(node_id)]
        stop_processes(pids, grace_s=TERMINATE_GRACE_S)
        for node_id in stopping:
            release(self.nodes_dir / node_id / "node.json")
            shutil.rmtree(self.nodes_dir / node_id, ignore_errors=True)
            shutil.rmtree(node_temp_dir(self.cluster_name, node_id), ignore_errors=True)
        if problems:
            raise ProviderError("could not remove the container of " + "; ".join(problems))

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        path = self.nodes_dir / node_id / "node.json"
        data = read_json(path)
        if data is None:
            return
        data["tags"].update(tags)
        write_json(path, data)

    def _processes(self, node_id: str) -> list[int]:
        return node_pids(self.cluster_key(), node_id)

    def _spot_record(self, node: Node) -> tuple[Path, dict[str, Any]] | None:
        """The record of `node` (head or worker) when it is of a `simulated_spot` type."""
        node_type = self.config.node_types.get(node.node_type)
        if node_type is None or node_type.node_config.get("simulated_spot") is not True:
            return None
        path = self.nodes_dir / node.id / "node.json"
        data = read_json(path)
        return None if data is None else (path, data)

    def notify_reclaim(self, node: Node, at: float) -> bool:
        """Workers only: the autoscaler that acts on a notice runs on the head."""
        record = self._spot_record(node) if node.kind is NodeKind.WORKER else None
        if record is None:
            return False
        path, data = record
        data["reclaim_at"] = at
        write_json(path, data)
        return True

    def reclaim_node(self, node: Node) -> bool:
        """A node of a `simulated_spot` type, head or worker, goes as a machine does: its
        container removed, every process it carries killed at once (Ray, and on a head the
        autoscaler and drivers too), and it is listed PREEMPTED until terminated."""
        record = self._spot_record(node)
        if record is None:
            return False
        path, data = record
        # Listed taken back first, as a cloud lists it: never seen merely dead in between.
        data["reclaimed_at"] = time.time()
        write_json(path, data)
        spec = container_of(self.config, data)
        if spec is not None:
            problem = _remove_container(spec.engine, container_name_of(node.id, spec.name))
            if problem:
                raise ProviderError(f"could not reclaim {node.id}: {problem}")
        kill_processes(self._processes(node.id))
        return True

    def cleanup(self, purge: bool = False) -> list[str]:
        removed = []
        leftovers = cluster_processes(self.cluster_key(), self.temp_dir())
        if leftovers:
            stop_processes(p.pid for p in leftovers)
            removed.append(f"{len(leftovers)} leftover process(es) of the cluster")
        for path in (Path(self.temp_dir()), self.root):
            if path.exists():
                for record in path.glob("nodes/*/node.json"):
                    release(record)
                shutil.rmtree(path, ignore_errors=True)
                removed.append(str(path))
        return removed

    # -- localhost specifics ------------------------------------------------------------
    def temp_dir(self) -> str:
        return ray_temp_dir(self.cluster_name)

    def _metrics_ports(self) -> set[int]:
        """Ports given to no node: where heads' autoscalers serve metrics, this cluster's
        and Ray's default (other clusters' heads claim theirs machine-wide)."""
        return {DEFAULT_METRICS_PORT, self.config.metrics_port} - {0}

    def _node(self, data: Mapping[str, Any], raylet_alive: bool) -> Node:
        tags = dict(data.get("tags", {}))
        status = tags.get(TAG_STATUS)
        state = NodeState.RUNNING
        if data.get("reclaimed_at") is not None:
            state = NodeState.PREEMPTED  # a simulated spot reclaim, until terminated
        elif status == NodeStatus.UP_TO_DATE and not raylet_alive:
            state = NodeState.DEAD
        return Node(
            id=data["id"],
            kind=NodeKind(data["kind"]),
            node_type=data["node_type"],
            ip=data.get("ip"),
            state=state,
            tags=tags,
            created_at=float(data.get("created_at", 0)),
            zone=ZONE,
            reclaim_at=data.get("reclaim_at"),
        )


def _remove_container(engine: str, name: str) -> str | None:
    """Remove the container `name` (and so everything running in it); None when it is gone
    (or never was), else what went wrong."""
    try:
        done = subprocess.run(
            [engine, "rm", "-f", name], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{engine} rm -f {name}` failed: {exc}"
    if done.returncode == 0:
        return None
    gone = subprocess.run(
        [engine, "container", "inspect", name], capture_output=True, timeout=60, check=False
    )
    if gone.returncode != 0:
        return None  # no such container
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return f"`{engine} rm -f {name}` failed: {last}"


def _is_raylet(command: str) -> bool:
    first = command.split(" ", 1)[0]
    return first.endswith("/raylet") or first == "raylet"


def _listening_ips() -> set[str]:
    """Loopback addresses something on this machine listens on (any cluster, any tool)."""
    found: set[str] = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # LISTEN
            address = fields[1].split(":")[0]
            octets = [int(address[i : i + 2], 16) for i in (6, 4, 2, 0)]  # little-endian hex
            found.add(".".join(map(str, octets)))
    return found


def _node_records() -> Iterator[dict[str, Any]]:
    """The records of every localhost node of every cluster in this home."""
    for record in (launcher_home() / "clusters").glob("*/localhost/nodes/*/node.json"):
        data = read_json(record)
        if data:
            yield data


@dataclass(frozen=True)
class _Given:
    """The addresses and ports given to nodes, listening or not (a node whose Ray is not
    running yet, or is being restarted, still owns them): those of every cluster of any
    home on this machine (their claims), and those of this home's nodes that have none."""

    ips: set[str]
    ports: set[int]


def _given() -> _Given:
    given = _Given(set(), set())
    for taken in claims():
        if taken.ip:
            given.ips.add(taken.ip)
        given.ports.update(taken.ports)
    for data in _node_records():
        if data.get("ip"):
            given.ips.add(str(data["ip"]))
        ports = data.get("ports")
        if isinstance(ports, dict):
            given.ports.update(p for p in ports.values() if isinstance(p, int))
    return given


def _free_ip(given: set[str]) -> str:
    """A loopback address no node or listener here uses, taken in turn after the one given
    last (held under the machine lock), so a node that just went does not hand its address
    to its replacement at once: on a cloud a new machine gets a new address, and Ray's GCS
    may still count the old node at that address alive for a few seconds."""
    used = _listening_ips() | given
    last_file = machine_dir() / "localhost-last-ip"
    try:
        last = int(last_file.read_text().strip().rsplit(".", 1)[-1])
    except (OSError, ValueError):
        last = _FIRST_HOST - 1
    span = _LAST_HOST - _FIRST_HOST + 1
    for step in range(1, span + 1):
        host = _FIRST_HOST + (last - _FIRST_HOST + step) % span
        ip = f"127.0.0.{host}"
        if ip not in used:
            with contextlib.suppress(OSError):  # another user's file: only the turn is lost
                write_whole(last_file, ip, mode=0o666)
            return ip
    raise ProviderError(
        "no free loopback address left in 127.0.0.2-254; take down clusters "
        "you no longer need (`launcher down`)"
    )


# `ray start`'s default --min-worker-port/--max-worker-port: Ray refuses to start a node
# whose other ports fall in that range (on a machine whose ephemeral ports include it).
RAY_WORKER_PORTS = (10002, 19999)


def _free_ports(names: list[str], given: set[int]) -> dict[str, int]:
    """A distinct free port for each of `names`, none of `given` (read under the machine
    lock) and none in Ray's worker port range. Every probe socket stays bound until all are
    chosen, so the kernel cannot hand the same port out twice."""
    used = set(given)
    chosen: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        for _ in range(len(names) + 200):
            if len(chosen) == len(names):
                return chosen
            probe = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind(("", 0))
            port: int = probe.getsockname()[1]
            if port not in used and not RAY_WORKER_PORTS[0] <= port <= RAY_WORKER_PORTS[1]:
                used.add(port)
                chosen[names[len(chosen)]] = port
    raise ProviderError(
        "no free port outside Ray's worker ports (10002-19999) found: widen this machine's "
        "ephemeral port range (net.ipv4.ip_local_port_range) or take down clusters here"
    )
