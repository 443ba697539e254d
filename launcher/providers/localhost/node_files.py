"""What the localhost provider and its node access share about one node: its record
(`nodes/ID/node.json`), its processes, and its container."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig
from launcher.files import write_whole
from launcher.providers.localhost.processes import node_processes
from launcher.providers.nodes import NodeKind
from launcher.runners.container import ContainerSpec, container_for


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_whole(path, json.dumps(data, indent=1, sort_keys=True))


def node_pids(cluster_key: str, node_id: str) -> list[int]:
    """The processes of node `node_id` of the cluster whose processes carry `cluster_key`."""
    return [p.pid for p in node_processes(cluster_key, node_id)]


def container_of(config: ClusterConfig, data: Mapping[str, Any]) -> ContainerSpec | None:
    """The container the node of record `data` runs in, if its type has one."""
    node_type = str(data.get("node_type", ""))
    if node_type not in config.node_types:
        return None
    return container_for(config, node_type, head=data.get("kind") == NodeKind.HEAD)


def container_name_of(node_id: str, name: str) -> str:
    """Every node is on this machine: one container each, named after the node."""
    return f"{name}-{node_id}"
