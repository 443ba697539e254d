"""Where the launcher keeps its own files on this machine: `$LAUNCHER_HOME` or `~/.launcher`.

Files named after a cluster (its directory, its record, its keys) are named so that no two
clusters share one, on a file system that ignores case too (macOS): a name with capitals
(or one that looks like a changed name) is lowercased and given a short hash of the exact
name (launcher/naming.py). A file or directory an earlier version made under the exact name
is used while it exists, so clusters running across an upgrade keep their files.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.naming import NameRule, derive

# What this launcher writes as a file name: lowercase, so a case-blind file system never
# takes two names for one.
_FILE_NAME = NameRule(255, r"[^a-z0-9_.-]+", lowercase=True, start="[a-z0-9]", end=".")


def launcher_home() -> Path:
    configured = os.environ.get("LAUNCHER_HOME")
    home = Path(configured).expanduser() if configured else Path.home() / ".launcher"
    # Absolute: what is derived from it (a cluster's process key, its Ray temp dir) names
    # the directory it is, whichever directory the launcher was started in.
    return home.absolute()


def named_file(parent: Path, name: str, suffix: str = "", *, derived: bool = False) -> Path:
    """`parent/NAME+SUFFIX` for a file or directory named after `name` (see the module).
    `derived`: `name` is already a name derived from a cluster name (a key pair's), unique
    as it is, so it is kept where a file may have it."""
    exact = f"{name}{suffix}"
    if derived and _FILE_NAME.valid(exact):
        return parent / exact
    safe = derive("", name, _FILE_NAME, suffix)
    if safe != exact:
        try:
            if exact in os.listdir(parent):  # by its exact name, not the file system's
                return parent / exact
        except OSError:
            pass
    return parent / safe


def cluster_dir(cluster_name: str) -> Path:
    """Per-cluster files: lock, logs, the autoscaler's config and log, provider state."""
    return named_file(launcher_home() / "clusters", cluster_name)


def node_log(cluster_name: str, node_id: str) -> Path:
    return cluster_dir(cluster_name) / "logs" / f"{node_id}.log"
