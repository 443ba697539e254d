"""Where the launcher keeps its own files on this machine: `$LAUNCHER_HOME` or `~/.launcher`."""

from __future__ import annotations

import os
from pathlib import Path


def launcher_home() -> Path:
    configured = os.environ.get("LAUNCHER_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".launcher"


def cluster_dir(cluster_name: str) -> Path:
    """Per-cluster files: lock, logs, the autoscaler's config and log, provider state."""
    return launcher_home() / "clusters" / cluster_name


def node_log(cluster_name: str, node_id: str) -> Path:
    return cluster_dir(cluster_name) / "logs" / f"{node_id}.log"
