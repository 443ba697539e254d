"""`kill-random-node`: take one node away, to see the cluster (and the job) survive it, or
with `head` to rehearse losing the head.

A random running worker, or with `head` the head. Without `hard`, the node's Ray is stopped
and the machine stays: for a worker, the autoscaler sees a node whose Ray died and replaces
it; for the head, Ray's GCS is gone with it. With `hard`, the machine goes: reclaimed as a
cloud reclaims a spot machine where the provider can play that part (the localhost provider,
for types marked `simulated_spot`: every process of the node is killed and it is listed
preempted), else terminated through the provider; with a notice first, if asked (workers
only), as AWS (2 minutes) and GCP (30 s) give before taking a spot machine back. Each is
reported only once it is seen done.

Nothing replaces a lost head by itself: the autoscaler runs on the head and goes with it.
Only a run started with `launcher submit --recover` brings up a new head and goes on;
otherwise `launcher up` brings the cluster back.

`pick` decides which node from a listing (no I/O); `kill_node` acts on it.
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
from launcher.providers.base import (
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    head_of,
    wait_unlisted,
)
from launcher.providers.factory import make_provider
from launcher.providers.simulation import simulation_of
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


def check_flags(*, hard: bool, head: bool, notice_s: float) -> None:
    """UsageError for flags that do not go together, before anything is listed or done."""
    if notice_s and head:
        raise UsageError(
            "--notice gives notice of a spot worker's reclaim; the head is taken without "
            "one: drop --notice (or --head)"
        )
    if notice_s and not hard:
        raise UsageError("--notice gives notice of a reclaim: it needs --hard")


def candidates(nodes: Sequence[Node]) -> list[Node]:
    """The workers that can be killed: running ones (not already dead or reclaimed)."""
    return [n for n in nodes if n.kind is NodeKind.WORKER and n.state is NodeState.RUNNING]


def pick(
    config: ClusterConfig, nodes: Sequence[Node], *, head: bool, hard: bool, rng: random.Random
) -> Node:
    """The node to kill among the listed `nodes`: the head with `head` (its Ray must run,
    or with `hard` its machine), else a random running worker."""
    found = head_of(nodes)
    if found is None:
        raise NoClusterError(
            f"cluster {config.cluster_name} is not running; start it with "
            f"`launcher up {config.source or 'CLUSTER.yaml'}`"
        )
    if head:
        takeable = (NodeState.RUNNING, NodeState.DEAD) if hard else (NodeState.RUNNING,)
        if found.state not in takeable:
            what = "machine to take away" if hard else "Ray to stop"
            raise LauncherError(
                f"the head {found.id} of cluster {config.cluster_name} is listed "
                f"{found.state.value}: there is no {what}; see it with `launcher status`"
            )
        return found
    workers = candidates(nodes)
    if not workers:
        raise LauncherError(
            f"cluster {config.cluster_name} has no running worker to kill; "
            "see its nodes with `launcher status`"
        )
    return rng.choice(workers)


def kill_random_node(
    config: ClusterConfig,
    *,
    hard: bool,
    head: bool = False,
    notice_s: float = 0.0,
    on_notice: Callable[[Node, float], None] | None = None,
    rng: random.Random | None = None,
    provider: NodeProvider | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> KillResult:
    """Kill a random running worker, or with `head` the head (see the module's docstring).
    `notice_s` (with `hard`, workers only): give the provider's reclaim notice that long
    before the node goes, as clouds do for spot machines; `on_notice` is told the node and
    when it goes (wall-clock time)."""
    check_flags(hard=hard, head=head, notice_s=notice_s)
    provider = provider or make_provider(config)
    node = pick(config, provider.nodes(), head=head, hard=hard, rng=rng or random.Random())
    return kill_node(
        config,
        provider,
        node,
        hard=hard,
        notice_s=notice_s,
        on_notice=on_notice,
        clock=clock,
        sleep=sleep,
    )


def kill_node(
    config: ClusterConfig,
    provider: NodeProvider,
    node: Node,
    *,
    hard: bool,
    notice_s: float = 0.0,
    on_notice: Callable[[Node, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> KillResult:
    """Kill `node`, as picked: stop its Ray, or with `hard` reclaim it (after `notice_s`
    of notice) where the provider can, else terminate it. Returns once it is seen done."""
    check_flags(hard=hard, head=node.kind is NodeKind.HEAD, notice_s=notice_s)
    if not hard:
        runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
        problem = provider.access.stop_node_ray(node, runner)
        if problem:
            raise LauncherError(f"could not stop Ray on {node.kind.value} {node.id}: {problem}")
        return KillResult(node, Kill.RAY_STOPPED)
    simulation = simulation_of(provider)
    if notice_s:
        at = time.time() + notice_s
        if simulation is None or not simulation.notify_reclaim(node, at):
            raise UsageError(
                f"worker {node.id} ({node.node_type}) cannot be given a reclaim notice here: "
                "only workers of a localhost type with `node_config: {simulated_spot: true}` "
                "can; drop --notice"
            )
        if on_notice is not None:
            on_notice(node, at)
        sleep(notice_s)
    if simulation is not None and simulation.reclaim_node(node):
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
            f"asked to {'reclaim' if reclaimed else 'terminate'} {node.kind.value} {node.id}, "
            f"but it is still listed ({left[0].state.value}) after {GONE_WAIT_S:g} s; "
            "check it with `launcher status`"
        )
