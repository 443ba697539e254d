"""The one place a node's `CommandRunner` is made, for the updater and for commands on the
head: the provider's runner for the host, wrapped in a `ContainerRunner` when the config
runs that node in a container (named as the provider names it)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.config.model import ClusterConfig
from launcher.providers.base import Node, NodeKind, NodeProvider
from launcher.runners.base import CommandRunner
from launcher.runners.container import ContainerRunner, container_for


def node_runner(
    provider: NodeProvider, config: ClusterConfig, node: Node, log_path: Path
) -> CommandRunner:
    host = provider.access.command_runner(node, log_path)
    spec = container_for(
        config,
        node.node_type,
        head=node.kind is NodeKind.HEAD,
        mounts=provider.access.container_mounts(node),
    )
    if spec is None:
        return host
    named = provider.access.container_name(node, spec.name)
    return ContainerRunner(host, spec if named == spec.name else replace(spec, name=named))
