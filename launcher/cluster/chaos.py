"""`kill-random-node`: take one worker away, to see the cluster (and the job) survive it.

Without `hard`, the worker's Ray is stopped and the machine stays: the autoscaler sees a
node whose Ray died and replaces it. With `hard`, the machine goes: reclaimed as a cloud
reclaims a spot machine where the provider can play that part (the localhost provider, for
types marked `simulated_spot`; the autoscaler then sees it preempted), else terminated
through the provider; with a notice first, if asked, as AWS (2 minutes) and GCP (30 s) give
before taking a spot machine back. Each is reported only once it is seen done.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NoClusterError, UsageError
from launcher.paths import node_log
from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState, wait_unlisted
from launcher.providers.factory import make_provider
from launcher.updater.runner import node_runner

GONE_WAIT_S = 300.0  # a cloud takes a minute or two to terminate a machine


class Kill(enum.Enum):
    RAY_STOPPED = "stopped Ray on"
    RECLAIMED = "reclaimed"
    TERMINATED = "terminated"


@dataclass(frozen=True)
class KillResult:
    node: Node
    how: Kill


def candidates(nodes: Sequence[Node]) -> list[Node]:
    """The workers that can be killed: running ones (not already dead or reclaimed)."""
    return [n for n in nodes if n.kind is NodeKind.WORKER and n.state is NodeState.RUNNING]


def kill_random_node(
    config: ClusterConfig,
    *,
    hard: bool,
    notice_s: float = 0.0,
    on_notice: Callable[[Node, float], None] | None = None,
    rng: random.Random | None = None,
    provider: NodeProvider | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> KillResult:
    """Kill a random running worker (see the module's docstring). `notice_s` (with `hard`):
    give the provider's reclaim notice that long before the node goes, as clouds do for
    spot machines; `on_notice` is told the node and when it goes (wall-clock time)."""
    if notice_s and not hard:
        raise UsageError("--notice gives notice of a reclaim: it needs --hard")
    provider = provider or make_provider(config)
    nodes = provider.nodes()
    if not any(n.kind is NodeKind.HEAD for n in nodes):
        raise NoClusterError(
            f"cluster {config.cluster_name} is not running; start it with "
            f"`launcher up {config.source or 'CLUSTER.yaml'}`"
        )
    workers = candidates(nodes)
    if not workers:
        raise LauncherError(
            f"cluster {config.cluster_name} has no running worker to kill; "
            "see its nodes with `launcher status`"
        )
    node = (rng or random.Random()).choice(workers)
    if not hard:
        runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
        problem = provider.stop_node_ray(node, runner)
        if problem:
            raise LauncherError(f"could not stop Ray on worker {node.id}: {problem}")
        return KillResult(node, Kill.RAY_STOPPED)
    if notice_s:
        at = time.time() + notice_s
        if not provider.notify_reclaim(node, at):
            raise UsageError(
                f"worker {node.id} ({node.node_type}) cannot be given a reclaim notice here: "
                "only workers of a localhost type with `node_config: {simulated_spot: true}` "
                "can; drop --notice"
            )
        if on_notice is not None:
            on_notice(node, at)
        sleep(notice_s)
    if provider.reclaim_node(node):
        _wait_until(provider, node, reclaimed=True, clock=clock, sleep=sleep)
        return KillResult(node, Kill.RECLAIMED)
    provider.terminate_nodes([node.id])
    _wait_until(provider, node, reclaimed=False, clock=clock, sleep=sleep)
    return KillResult(node, Kill.TERMINATED)


def _wait_until(
    provider: NodeProvider,
    node: Node,
    *,
    reclaimed: bool,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Until the provider lists `node` gone (or, `reclaimed`, preempted)."""
    gone_states = (NodeState.PREEMPTED,) if reclaimed else ()
    left = wait_unlisted(
        provider, [node.id], GONE_WAIT_S, gone_states=gone_states, clock=clock, sleep=sleep
    )
    if left:
        raise LauncherError(
            f"asked to {'reclaim' if reclaimed else 'terminate'} worker {node.id}, but "
            f"it is still listed ({left[0].state.value}) after {GONE_WAIT_S:g} s; "
            "check it with `launcher status`"
        )
