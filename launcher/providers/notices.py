"""The command that starts a spot worker's reclaim-notice watcher once its Ray runs
(launcher/providers/notice_watch.py, sent as `python -c`: the launcher is not installed on
workers). It runs in the background with the Python that has Ray there, one per node."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig
from launcher.providers import notice_watch
from launcher.providers.nodes import Node, NodeKind

LABEL = "launcher-notice-watch"


def watcher_command(node_id: str, gcs_port: int, cloud: str = "aws") -> str:
    """`cloud`: whose metadata service the watcher asks (notice_watch's `--cloud`)."""
    source = Path(notice_watch.__file__).read_text()
    run = (
        f'-c {shlex.quote(source)} --gcs "$RAY_HEAD_IP:{gcs_port}" '
        f"--node-id {shlex.quote(node_id)} --cloud {cloud} --label {LABEL}"
    )
    # The Python the `ray` command runs with (its #! line), else python3, else python.
    inner = (
        'for PY in "$(sed -n \'1s/^#!//p\' "$(command -v ray)" 2>/dev/null)" python3 python; '
        f'do "$PY" -c "import ray" 2>/dev/null && exec "$PY" {run}; done'
    )
    # One watcher per node: an earlier one (Ray started again) is stopped first, found by
    # its pid file (and checked to be a watcher: a pid may have been reused since).
    pid_file = "~/.launcher-notice-watch.pid"
    return (
        f"old=$(cat {pid_file} 2>/dev/null) && grep -qa {LABEL} /proc/$old/cmdline 2>/dev/null "
        "&& kill $old; "
        f"nohup sh -c {shlex.quote(inner)} > ~/.launcher-notice-watch.log 2>&1 < /dev/null & "
        f"echo $! > {pid_file}"
    )


def spot_worker_watcher(
    config: ClusterConfig,
    node: Node,
    gcs_port: int,
    is_spot: Callable[[Mapping[str, Any]], bool],
    cloud: str,
) -> tuple[str, ...]:
    """The commands run after Ray starts on `node` (`NodeAccess.after_ray_start`): the
    watcher, on a worker whose type `is_spot` says is spot; nothing elsewhere."""
    node_type = config.node_types.get(node.node_type)
    if node.kind is not NodeKind.WORKER or node_type is None:
        return ()
    if not is_spot(node_type.node_config):
        return ()
    return (watcher_command(node.id, gcs_port, cloud=cloud),)
