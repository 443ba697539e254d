"""How the launcher reaches localhost nodes: each is a set of this machine's processes in
its own home directory, with its own loopback address, ports and Ray temp dir; its Ray is
stopped by killing its processes (never `ray stop`, which stops every Ray node of the
machine), and one `ray start` runs at a time on the machine."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.paths import launcher_home
from launcher.providers.access import NodeAccess
from launcher.providers.localhost.machine import machine_lock
from launcher.providers.localhost.node_files import (
    container_name_of,
    container_of,
    node_pids,
    read_json,
)
from launcher.providers.localhost.processes import kill_processes, stop_processes
from launcher.providers.localhost.spec import (
    node_temp_dir,
    process_key,
    ray_temp_dir,
    state_dir,
)
from launcher.providers.nodes import Node, NodeKind
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener
from launcher.runners.local import LocalProcessRunner
from launcher.runners.ray_node import node_temp_dir_option

DEFAULT_OBJECT_STORE_BYTES = 256 * 2**20


class LocalhostAccess(NodeAccess):
    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self.nodes_dir = Path(state_dir(self.cluster_name)) / "nodes"
        self.cluster_key = process_key(self.cluster_name)

    def _record(self, node_id: str) -> dict[str, Any]:
        return read_json(self.nodes_dir / node_id / "node.json") or {}

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        return LocalProcessRunner(self.nodes_dir / node.id / "home", {}, log_path)

    def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
        """The node's own address, else this machine's 127.0.0.1 (what a node's process
        binds to "localhost", e.g. Ray's dashboard, is there: every node is this machine)."""
        ip = node.ip or "127.0.0.1"

        def open_port(port: int) -> socket.socket:
            try:
                return socket.create_connection((ip, port), timeout=10)
            except ConnectionRefusedError:
                if ip == "127.0.0.1":
                    raise
                return socket.create_connection(("127.0.0.1", port), timeout=10)

        return open_port

    def node_env(self, node: Node, head: Node | None) -> dict[str, str]:
        env = super().node_env(node, head)
        data = self._record(node.id)
        head_ports = (self._record(head.id) if head else {}).get("ports", {})
        python_bin = str(Path(sys.executable).parent)
        env.update(
            LAUNCHER_RAY_PORT=str(head_ports.get("ray", "")),
            LAUNCHER_CLIENT_PORT=str(head_ports.get("client", "")),
            LAUNCHER_DASHBOARD_PORT=str(head_ports.get("dashboard", "")),
            LAUNCHER_AGENT_PORT=str(data.get("ports", {}).get("agent", "")),
            LAUNCHER_TEMP_DIR=ray_temp_dir(self.cluster_name),
            LAUNCHER_NODE_TEMP_DIR=node_temp_dir(self.cluster_name, node.id),
            LAUNCHER_HOME=str(launcher_home()),
            LAUNCHER_CLUSTER_KEY=self.cluster_key,
            RAY_USAGE_STATS_ENABLED="0",
        )
        if container_of(self.config, data) is None:
            # On the host, Ray is this launcher's; a container has its image's.
            env["PATH"] = python_bin + os.pathsep + os.environ.get("PATH", "")
        return env

    def ray_resources(self, node_type: NodeType) -> dict[str, Any]:
        # Many nodes share this machine's memory: a small object store unless one is given.
        resources = super().ray_resources(node_type)
        resources.setdefault("object_store_memory", DEFAULT_OBJECT_STORE_BYTES)
        return resources

    def ray_start_guard(self, node: Node) -> contextlib.AbstractContextManager[None]:
        """Ray names a node's sockets and log files by counting those already in its session
        directory, so two `ray start`s into one Ray temp dir race for the same names (and
        one times out). A node with a temp dir of its own (each worker, with the defaults)
        starts beside the others; the rest start one at a time per temp dir, machine-wide
        (Ray's default temp dir, where the start commands name none, is the machine's)."""
        word = node_temp_dir_option(
            self.config.head_start_ray_commands,
            self.config.worker_start_ray_commands,
            head=node.kind is NodeKind.HEAD,
        )
        if word is not None and "LAUNCHER_NODE_TEMP_DIR" in word:
            return contextlib.nullcontext()
        digest = hashlib.sha256(self._temp_dir_of(word).encode()).hexdigest()[:16]
        return machine_lock(f"ray-start-{digest}.lock")

    def _temp_dir_of(self, word: str | None) -> str:
        """The directory a start command's `--temp-dir` word names here (Ray's default when
        None), its variables expanded as the node's shell would, where known."""
        if word is None:
            base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
            return os.path.join(base, "ray")
        cluster_dir = ray_temp_dir(self.cluster_name)
        for form in ("${LAUNCHER_TEMP_DIR}", "$LAUNCHER_TEMP_DIR"):
            word = word.replace(form, cluster_dir)
        return os.path.normpath(os.path.expanduser(os.path.expandvars(word)))

    def stop_node_ray(self, node: Node, runner: CommandRunner, force: bool = False) -> str | None:
        # Not `ray stop`: it would stop every Ray node on this machine.
        pids = node_pids(self.cluster_key, node.id)
        if force:
            kill_processes(pids)
        else:
            stop_processes(pids)
        left = node_pids(self.cluster_key, node.id)
        if left:
            return f"{len(left)} process(es) of node {node.id} still run: pid {left[0]}"
        return None

    def head_python(self) -> str:
        return sys.executable

    def ray_address(self, head: Node) -> str:
        return f"{head.ip}:{self._record(head.id).get('ports', {}).get('ray', '')}"

    def container_name(self, node: Node, name: str) -> str:
        return container_name_of(node.id, name)
