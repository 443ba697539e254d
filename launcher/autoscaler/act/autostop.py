"""Autostop's actions, run by the autoscaler on the head once the cluster was idle long
enough (the decision is idle.py's): stop the cluster, or tear it down, the head last.

- `down`, or a provider that cannot keep stopped nodes (localhost, on-prem, Kubernetes):
  every worker is terminated and seen gone, then the head is terminated, as `launcher down`
  does; the record says which, and why.
- otherwise (AWS, with `cache_stopped_nodes`): the workers are stopped, the head is tagged
  autostopped and stopped last; `launcher up` starts them again.

The record is written before the head goes: on a head that shares this machine's
`$LAUNCHER_HOME` (localhost) it is the one `launcher list` reads; elsewhere it is the head's
copy, and `launcher list --refresh` finds the cluster stopped or gone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from launcher.autoscaler.clock import Clock
from launcher.config.model import Autostop, ClusterConfig
from launcher.errors import LauncherError
from launcher.ledger.keeping import note_gone, note_listing
from launcher.ledger.record import ClusterState
from launcher.paths import cluster_dir
from launcher.providers.base import (
    TAG_AUTOSTOPPED,
    Node,
    NodeKind,
    NodeProvider,
    head_of,
    wait_unlisted,
)

GONE_WAIT_S = 300.0
SYSTEM_CLOCK = Clock()
POLL_S = 2.0


def autostop_cluster(
    provider: NodeProvider,
    config: ClusterConfig,
    setting: Autostop,
    idle_s: float,
    log: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Clock = SYSTEM_CLOCK,
) -> str:
    """Stop or tear down the cluster; returns what was done (one line, also recorded).
    `clock.wall` stamps the stopped head."""
    nodes = provider.nodes()
    head = head_of(nodes)
    workers = [n for n in nodes if n.kind is NodeKind.WORKER]
    idle = f"idle for {idle_s / 60:.1f} min"
    note_listing(config, nodes)
    if setting.down or not provider.traits.keeps_stopped_nodes:
        how = "down" if setting.down else "stop"
        why = (
            f"autostop ({setting.describe()}): {idle}; taken down, the head last"
            if setting.down
            else f"autostop ({setting.describe()}): {idle}; this provider cannot keep stopped "
            "nodes, so they were terminated"
        )
        log(f"autostop: {idle}, tearing the cluster down ({how} requested)")
        _terminate(provider, workers, log, sleep)
        note_gone(config, why)
        if head is not None:
            log(f"autostop: terminating the head {head.id}")
            provider.terminate_nodes([head.id])
            provider.cleanup()
            shutil.rmtree(cluster_dir(config.cluster_name), ignore_errors=True)
        return why
    why = f"autostop ({setting.describe()}): {idle}; nodes stopped, `launcher up` starts them"
    log(f"autostop: {idle}, stopping {len(workers)} worker(s), then the head")
    if workers:
        provider.stop_nodes([n.id for n in workers])
        _wait_gone(provider, workers, sleep)
    note_gone(config, why, state=ClusterState.AUTOSTOPPED)
    if head is not None:
        provider.set_tags(head.id, {TAG_AUTOSTOPPED: str(int(clock.wall()))})
        log(f"autostop: stopping the head {head.id}")
        provider.stop_nodes([head.id])
    return why


def _terminate(
    provider: NodeProvider,
    workers: list[Node],
    log: Callable[[str], None],
    sleep: Callable[[float], None],
) -> None:
    if not workers:
        return
    log(f"autostop: terminating {len(workers)} worker(s)")
    provider.terminate_nodes([n.id for n in workers])
    _wait_gone(provider, workers, sleep)


def _wait_gone(provider: NodeProvider, nodes: list[Node], sleep: Callable[[float], None]) -> None:
    left = wait_unlisted(provider, [n.id for n in nodes], GONE_WAIT_S, poll_s=POLL_S, sleep=sleep)
    if left:
        raise LauncherError(
            f"autostop: {', '.join(sorted(n.id for n in left))} still listed {GONE_WAIT_S:g} s "
            "after being removed; the cluster was not stopped"
        )
