"""How the launcher reaches a provider's nodes and runs Ray on them: the node-access seam,
kept apart from the instance seam (`base.NodeProvider`).

A provider's nodes are made and listed by its NodeProvider; everything done *on* a node
goes through its `NodeAccess` (`provider.access`): the command runner (SSH, Kubernetes
exec, this machine's processes), port forwarding, the private key, the environment of a
node's commands, and the hooks around `ray start`. The defaults here are Ray's conventions
on a machine of its own; a provider overrides only what differs, and most override nothing
but `command_runner`:

- `launcher.providers.ssh_access.SshNodeAccess`: nodes reached over SSH with the config's
  `auth` (AWS, GCP, on-prem);
- `launcher.providers.kubernetes.access.KubeExecAccess`: pods reached through the API;
- `launcher.providers.localhost.access.LocalhostAccess`: nodes that are this machine's
  processes;
- `NoAccess`: nodes that run nothing (the in-memory provider of `launcher.testing`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import ProviderError
from launcher.providers.nodes import Node, NodeKind
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener, direct
from launcher.runners.ray_node import STOP_TIMEOUT_S, gcs_port, node_ray_paths, stop_ray


class NodeAccess:
    """Reaching the nodes of one cluster. Every method has Ray's default but
    `command_runner`, which says how commands run on a node at all."""

    # Whether `ray start` is told the node type's `resources` and `labels` (Ray's
    # RAY_OVERRIDE_RESOURCES / RAY_OVERRIDE_LABELS), as Ray's updater does on every provider
    # but on-prem, where Ray detects each machine's own.
    overrides_ray_resources = True

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.cluster_name = config.cluster_name

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        """How to run commands and copy files on `node`; output is appended to `log_path`."""
        raise ProviderError(f"nodes of cluster {self.cluster_name} run no commands")

    def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
        """How `-p/--port-forward` reaches a port of `node` (through `runner`'s connection
        where the provider uses one)."""
        if not node.ip:
            raise ProviderError(f"node {node.id} has no address to forward ports to")
        return direct(node.ip)

    def ssh_private_key(self) -> str | None:
        """The private key file nodes are reached with (None: SSH's defaults, or no SSH)."""
        return self.config.auth.ssh_private_key

    def node_env(self, node: Node, head: Node | None) -> dict[str, str]:
        """Environment added for commands on `node` (Ray's conventions included)."""
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

    def ray_start_env(self, node: Node) -> dict[str, str]:
        """Environment for `node`'s start-ray commands only, beyond `node_env`: the node
        type's declared resources and labels, which Ray then advertises instead of what it
        detects (so `resources: {CPU: 0}` keeps tasks off a head, on any machine size); on
        the head, Ray's monitor's metrics turned off where the autoscaler serves its own."""
        env = ray_monitor_env(self.config) if node.kind is NodeKind.HEAD else {}
        node_type = self.config.node_types.get(node.node_type)
        if not self.overrides_ray_resources or node_type is None:
            return env
        resources = self.ray_resources(node_type)
        if resources:
            env["RAY_OVERRIDE_RESOURCES"] = json.dumps(resources, sort_keys=True)
        if node_type.labels:
            env["RAY_OVERRIDE_LABELS"] = json.dumps(dict(node_type.labels), sort_keys=True)
        return env

    def ray_resources(self, node_type: NodeType) -> dict[str, Any]:
        """The resources `ray start` is told a node of `node_type` has (`ray_start_env`)."""
        return dict(node_type.resources)

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

    def after_ray_start(self, node: Node) -> tuple[str, ...]:
        """Commands run on `node` once its Ray started (with `node_env`): what the provider
        runs beside Ray there (AWS: the watcher of a spot worker's reclaim notice)."""
        return ()

    def ray_paths(self, *, head: bool) -> tuple[str, ...]:
        """The `ray` executables a node's start commands name by path."""
        config = self.config
        return node_ray_paths(
            config.head_start_ray_commands, config.worker_start_ray_commands, head=head
        )

    def gcs_port(self) -> int:
        """The port of Ray's GCS, as the head's start commands give it (`--port`)."""
        return gcs_port(self.config.head_start_ray_commands)

    def ray_address(self, head: Node) -> str:
        """The address (`ip:port`) of the cluster's Ray GCS, as seen from the head."""
        return f"{head.ip}:{self.gcs_port()}"

    def head_python(self) -> str:
        """The Python on the head that has the launcher installed (runs the autoscaler)."""
        return "python3"

    def container_mounts(self, node: Node) -> tuple[str, ...]:
        """Directories of `node`'s host (`~/...`) that the launcher's code inside the node's
        container must share with the host; mounted at the same place under its home."""
        return ()

    def container_name(self, node: Node, name: str) -> str:
        """The name of `node`'s container, given the config's `docker.container_name`."""
        return name


class NoAccess(NodeAccess):
    """Nodes that run nothing (the base default): every command is refused by name."""


# Ray's monitor on the head (`ray start --head` runs it; it does no scaling for us) serves
# autoscaler metrics of its own, each node as its own `node_<id>` type, at its
# AUTOSCALER_METRIC_PORT on all interfaces, and writes that address where Ray's metrics
# discovery reads it (`AutoscalerMetricsAddress` in the GCS). Given a port outside 0-65535,
# its metrics server fails to start, which it logs and goes on without (Ray 2.60,
# autoscaler/_private/monitor.py and v2/monitor.py catch it); our autoscaler serves the
# metrics and writes its own address there (autoscaler/observe/ray_state.py).
RAY_MONITOR_METRICS_OFF = {"AUTOSCALER_METRIC_PORT": "65536"}


def ray_monitor_env(config: ClusterConfig) -> dict[str, str]:
    """The head's `ray start` environment for Ray's monitor: its metrics off while the
    autoscaler serves ours (`metadata.launcher.metrics_port` is not 0)."""
    return dict(RAY_MONITOR_METRICS_OFF) if config.metrics_port else {}
