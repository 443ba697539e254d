"""Fingerprints of what the updater applies, so an unchanged node is skipped.

The setup hash covers file mount contents (unless they sync continuously), the commands
before Ray starts and the node's container (image, name, run options); the start hash
covers the start commands and the node's resources. Both are stored as node tags.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.config.model import ClusterConfig
from launcher.runners.container import container_for

_CHUNK = 1 << 20


@dataclass(frozen=True)
class NodeHashes:
    setup: str
    start: str


def node_hashes(config: ClusterConfig, node_type: str, *, head: bool, cwd: Path) -> NodeHashes:
    commands = config.commands_for(node_type, head=head)
    # Synced continuously, a mount's contents are copied on every update and do not make
    # setup run again (as in Ray); only which mounts there are does.
    mounts = {
        remote: "synced"
        if config.file_mounts_sync_continuously
        else contents_hash(cwd / Path(local).expanduser())
        for remote, local in sorted(config.file_mounts.items())
    }
    applied: dict[str, object] = {
        "mounts": mounts,
        "init": commands.initialization,
        "setup": commands.setup,
        "synced": config.cluster_synced_files,
    }
    # A node in a container is set up again (in a new container) when its image or run
    # options change; nodes on their hosts keep the hash they had before containers existed.
    container = container_for(config, node_type, head=head)
    if container is not None:
        applied["container"] = [container.engine, container.name, container.digest]
    setup = _digest(applied)
    start = _digest(
        {
            "start": commands.start_ray,
            "resources": dict(config.node_types[node_type].resources),
            "labels": dict(config.node_types[node_type].labels),
        }
    )
    return NodeHashes(setup, start)


def contents_hash(path: Path) -> str:
    """Hash of a file's or directory tree's names, modes and bytes."""
    digest = hashlib.sha256()
    if path.is_file():
        _add_file(digest, path, path.name)
    elif path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                file = Path(root) / name
                _add_file(digest, file, str(file.relative_to(path)))
    else:
        digest.update(b"missing")
    return digest.hexdigest()[:16]


def _add_file(digest: hashlib._Hash, path: Path, name: str) -> None:
    digest.update(name.encode() + b"\0" + oct(path.stat().st_mode & 0o777).encode() + b"\0")
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)


def _digest(data: Mapping[str, object]) -> str:
    text = json.dumps(data, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
