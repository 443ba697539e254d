"""The one place a node's `CommandRunner` is made, for the updater and for commands on the
head: the provider's runner for the host, wrapped in a `ContainerRunner` when the config
runs that node in a container."""

from __future__ import annotations

from pathlib import Path

from launcher.config.model import ClusterConfig
from launcher.providers.base import Node, NodeKind, NodeProvider
from launcher.runners.base import CommandRunner
from launcher.runners.container import ContainerRunner, container_for


def node_runner(
    provider: NodeProvider, config: ClusterConfig, node: Node, log_path: Path
) -> CommandRunner:
    host = provider.command_runner(node, log_path)
    spec = container_for(
        config,
        node.node_type,
        head=node.kind is NodeKind.HEAD,
        mounts=provider.container_mounts(node),
    )
    return host if spec is None else ContainerRunner(host, spec)
