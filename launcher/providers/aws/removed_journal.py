"""Instances the autoscaler on the head has removed, kept on the head's disk.

EC2 lists a terminated instance for about an hour. A reclaimed spot worker is listed as
PREEMPTED until the autoscaler answers it (terminates and replaces it, and avoids the
offering for a while); an autoscaler restarted within that hour must not take the old
reclamation for a new one. So the head's provider writes the ids it removed to
`$LAUNCHER_HOME/clusters/NAME/aws-removed.json` (id -> when), keeping each for two hours.

Pure file handling; the provider decides when to read and add.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from launcher.files import write_whole
from launcher.paths import cluster_dir

KEEP_S = 2 * 3600.0  # longer than EC2 lists terminated instances


def removed_path(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "aws-removed.json"


def load(path: Path, now: float) -> dict[str, float]:
    """The ids removed less than KEEP_S ago -> when; an unreadable file counts as empty
    (the worst outcome is one reclamation answered twice)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(node_id): float(when)
        for node_id, when in data.items()
        if isinstance(when, int | float) and now - float(when) < KEEP_S
    }


def add(path: Path, node_ids: Iterable[str], now: float) -> None:
    """Record `node_ids` as removed at `now` (written whole, then renamed into place)."""
    kept = load(path, now)
    kept.update(dict.fromkeys(node_ids, now))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(kept, sort_keys=True))
