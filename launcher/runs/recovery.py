"""Replacing a lost head, keeping the workers that live.

1. The lost head goes for good (terminated through the provider: a machine that no longer
   answers may still run an autoscaler, which must not act beside the new head's).
2. Every worker still running is kept: its machine, files and setup stay (their hashes
   are on it); no new machine is bought for it. Its old Ray is killed at once, all of them
   side by side: with its GCS gone it has nothing to drain, and a raylet left alone only
   gives up after a minute. Each is then marked to be set up again (status uninitialized);
   those this machine reached are also marked as this supervisor's to restart until
   `TAG_REJOIN_BY`, which the new head's autoscaler leaves alone until then (the others,
   and any this supervisor leaves halfway, it sets up as new ones). Workers taken back
   (preempted) are left to that autoscaler, which replaces them as it replaces any.
3. A new head is brought up as `launcher up` does (the same steps, the same autoscaler),
   of the type `decide.new_head_type` chose. As soon as its Ray is up, before its
   autoscaler is installed and started, the kept workers' Ray is started against it, all
   side by side (only Ray: `UpdateOptions.ray_only`). The driver can start on it at once:
   the kept workers rejoin while it starts (as after `ray up`, whose workers join after the
   head), and `rejoining` tells the supervisor when they have.

Each step is idempotent, with the provider's listing as the truth: a supervisor killed
halfway and started again does the steps again and finds the done ones done (a new head
it made before is the head `up` finds).
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from launcher.cluster import lifecycle
from launcher.cluster.lock import ClusterLock
from launcher.config.loader import Overrides
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, EventSink, Message, NodeProgress
from launcher.paths import node_log
from launcher.providers.base import (
    TAG_REJOIN_BY,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
    wait_unlisted,
)
from launcher.updater.runner import node_runner
from launcher.updater.updater import STARTING_RAY, NodeUpdater, UpdateOptions

OLD_HEAD_GONE_S = 300.0
KILL_WAIT_S = 15.0  # how long the kept workers' old Ray may take to be killed
REJOIN_S = 600.0  # how long a kept worker is the supervisor's to restart (TAG_REJOIN_BY)
REJOIN_MARGIN_S = 60.0  # no restart is begun with less than this left of it

PhaseSink = Callable[[str], None]


@dataclass(frozen=True)
class Replaced:
    head: Node
    adopted: tuple[str, ...]  # the kept workers, rejoining the new head


def retire_head(
    config: ClusterConfig, provider: NodeProvider, lost_head: str, events: EventSink
) -> tuple[str, ...]:
    """Steps 1 and 2: the lost head terminated, the running workers marked to rejoin and
    their old Ray killed. Returns the ids of those workers. A head other than `lost_head`
    that runs (one a supervisor made before it was stopped) is kept: it is the new head."""
    with ClusterLock(
        config.cluster_name, "a run's recovery", on_wait=lambda m: events(Message(m, "warning"))
    ):
        listed = provider.nodes()
        old = [
            n
            for n in listed
            if n.kind is NodeKind.HEAD
            and (n.id == lost_head or n.state in (NodeState.PREEMPTED, NodeState.DEAD))
        ]
        if old:
            provider.terminate_nodes([n.id for n in old])
            left = wait_unlisted(provider, [n.id for n in old], OLD_HEAD_GONE_S)
            if left:
                raise LauncherError(
                    f"the lost head {left[0].id} is still listed ({left[0].state.value}) "
                    f"{OLD_HEAD_GONE_S:g} s after it was terminated; check it with "
                    "`launcher status`"
                )
        kept = adoptable(listed)
        if any(n.kind is NodeKind.HEAD and n not in old for n in listed):
            # A new head made by an earlier try: the workers were marked then, and its
            # autoscaler may have started their Ray against it already.
            return tuple(n.id for n in kept)
        # Before any new head exists (so before its autoscaler can start their new Ray).
        unreached = set()
        for node_id, problem in kill_orphaned_ray(config, provider, kept):
            unreached.add(node_id)
            events(
                Message(
                    f"{node_id}: could not kill its old Ray ({problem}); the new head's "
                    "autoscaler stops it before starting Ray there",
                    "warning",
                )
            )
        rejoin_by = str(int(time.time() + REJOIN_S))
        here = provider.traits.node_env_has_cluster_head_ip
        for node in kept:
            mine = here and node.id not in unreached
            provider.set_tags(
                node.id,
                {TAG_STATUS: NodeStatus.UNINITIALIZED, TAG_REJOIN_BY: rejoin_by if mine else ""},
            )
        return tuple(n.id for n in kept)


def kill_orphaned_ray(
    config: ClusterConfig,
    provider: NodeProvider,
    workers: Sequence[Node],
    wait_s: float | None = None,
) -> list[tuple[str, str]]:
    """Kill the Ray of `workers` (whose head is gone) at once, side by side, waiting at most
    `wait_s` (a worker this machine cannot reach must not hold the recovery up: the new
    head's autoscaler stops its Ray anyway before starting it again). Returns (node id,
    problem) for those where some of it is left or that were not reached in time."""
    if not workers:
        return []
    wait_s = KILL_WAIT_S if wait_s is None else wait_s

    def kill(node: Node) -> str | None:
        try:
            runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
            return provider.access.stop_node_ray(node, runner, force=True)
        except LauncherError as exc:
            return str(exc)

    pool = ThreadPoolExecutor(max_workers=min(32, len(workers)), thread_name_prefix="kill-ray")
    futures = {node.id: pool.submit(kill, node) for node in workers}
    wait(futures.values(), timeout=wait_s)
    # Those not done go on in the background: a kill that lands after the new head's
    # autoscaler has started that worker's Ray leaves it dead, replaced as any dead worker.
    pool.shutdown(wait=False)
    problems = []
    for node_id, future in futures.items():
        if not future.done():
            problems.append((node_id, f"not reached within {wait_s:g} s"))
        elif (problem := future.result()) is not None:
            problems.append((node_id, problem))
    return problems


def adoptable(nodes: Sequence[Node]) -> list[Node]:
    """The workers a new head can keep: machines that run (their Ray may be gone: it
    follows its head), set up once; not those taken back or whose setup failed."""
    return [
        n
        for n in nodes
        if n.kind is NodeKind.WORKER
        and n.state in (NodeState.RUNNING, NodeState.DEAD)
        and n.status is not NodeStatus.FAILED
    ]


class Restarts:
    """The kept workers whose Ray a supervisor is starting now: one start per worker, also
    when a recovery is tried again while an earlier try's starts still run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[str] = set()

    def claim(self, node_ids: Sequence[str]) -> set[str]:
        """Those of `node_ids` no start runs for, now claimed."""
        with self._lock:
            free = set(node_ids) - self._busy
            self._busy |= free
            return free

    def release(self, node_id: str) -> None:
        with self._lock:
            self._busy.discard(node_id)


def restart_kept(
    config: ClusterConfig,
    provider: NodeProvider,
    head: Node,
    events: EventSink,
    restarts: Restarts | None = None,
    final: bool = True,
) -> list[str]:
    """Start the Ray of the kept workers that are this supervisor's (`TAG_REJOIN_BY`, with
    time enough left) against `head`, side by side; each is marked up to date and no longer
    the supervisor's once its Ray runs (one that fails is tagged failed, and replaced by the
    autoscaler as any; unless not `final`: a first try, while the head's own Ray starts,
    whose failures are left as they are, for the try once the head is up). Those `restarts`
    says are being started already are left to that start. Returns the ids of those whose
    Ray was started."""
    restarts = restarts or Restarts()
    now = time.time()
    mine = [
        n
        for n in provider.nodes()
        if n.kind is NodeKind.WORKER
        and n.rejoin_by > now + REJOIN_MARGIN_S
        and n.state is NodeState.RUNNING
        and n.status not in (NodeStatus.UP_TO_DATE, NodeStatus.FAILED)
    ]
    claimed = restarts.claim([n.id for n in mine])
    mine = [n for n in mine if n.id in claimed]
    lock = threading.Lock()

    def said(event: Event) -> None:
        with lock:
            events(event)

    def restart(node: Node) -> bool:
        options = UpdateOptions(cwd=Path.cwd(), ray_only=True, tag_failure=final)
        try:
            if not final and not _gcs_answers(config, provider, node, head):
                return False
            NodeUpdater(provider, config, node, head, options, said).run()
        except LauncherError as exc:
            if final:
                said(Message(f"{node.id}: could not start its Ray again: {exc}", "warning"))
            return False
        else:
            provider.set_tags(node.id, {TAG_REJOIN_BY: ""})
            return True
        finally:
            restarts.release(node.id)

    if not mine:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(mine)), thread_name_prefix="rejoin") as pool:
        started = list(pool.map(restart, mine))
    return [n.id for n, ok in zip(mine, started, strict=True) if ok]


# Waits, on a kept worker, until the new head's GCS takes connections: started before it
# does, a worker's `ray start` fails its first connect only after seconds, then sleeps.
_GCS_PROBE = (
    "python3 -c 'import socket, sys, time\n"
    "end = time.monotonic() + float(sys.argv[3])\n"
    "while time.monotonic() < end:\n"
    "    try:\n"
    "        socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close()\n"
    "        sys.exit(0)\n"
    "    except OSError:\n"
    "        time.sleep(0.05)\n"
    "sys.exit(1)' {host} {port} {wait}"
)
GCS_WAIT_S = 60.0


def _gcs_answers(config: ClusterConfig, provider: NodeProvider, node: Node, head: Node) -> bool:
    """Whether `head`'s GCS took a connection from `node` within GCS_WAIT_S."""
    host, _, port = provider.access.ray_address(head).rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
        probe = _GCS_PROBE.format(host=shlex.quote(host), port=port, wait=GCS_WAIT_S)
        return runner.run(probe, timeout=GCS_WAIT_S + 30).ok
    except LauncherError:
        return False


def bring_up_head(
    path: str,
    overrides: Overrides,
    head_type: str,
    events: EventSink,
    on_phase: PhaseSink,
    ready_timeout_s: float = 300.0,
    on_head_ready: Callable[[Node], None] | None = None,
    on_ray_starting: Callable[[str], None] | None = None,
    secret_env: Mapping[str, str] | None = None,
) -> Node:
    """Step 3: `up`, with a head of `head_type` if a head must be made; `on_ray_starting` is
    called with its id as its start-ray commands begin, `on_head_ready` with it once its Ray
    is up, before its autoscaler is started."""
    seen_head = False

    def sink(event: Event) -> None:
        nonlocal seen_head
        if isinstance(event, NodeProgress) and event.kind == NodeKind.HEAD.value:
            if not seen_head:
                seen_head = True
                on_phase("head_launched")
            if event.stage == STARTING_RAY and on_ray_starting is not None:
                on_ray_starting(event.node_id)
            if event.done:
                on_phase("ray_up")
        events(event)

    options = lifecycle.UpOptions(
        wait_for_workers=False,
        head_type=head_type,
        ready_timeout_s=ready_timeout_s,
        on_head_ready=on_head_ready,
        secret_env=secret_env,
    )
    result = lifecycle.up(path, overrides, options, sink, lambda _: True)
    return result.head


@dataclass(frozen=True)
class Rejoin:
    waiting: tuple[str, ...]  # kept workers still being set up against the new head
    rejoined: tuple[str, ...]  # up to date against it


def rejoining(nodes: Sequence[Node], adopted: Sequence[str]) -> Rejoin:
    """Where the kept workers `adopted` are, from a listing: a pure decision. A worker
    neither waiting nor rejoined failed its setup or is gone (min_workers are the new
    autoscaler's to keep: a fallback may stand in for a type just taken back)."""
    wanted = set(adopted)
    workers = [n for n in nodes if n.id in wanted]
    waiting = tuple(
        n.id
        for n in workers
        if n.status not in (NodeStatus.UP_TO_DATE, NodeStatus.FAILED)
        and n.state in (NodeState.RUNNING, NodeState.PENDING)
    )
    rejoined = tuple(n.id for n in workers if n.status is NodeStatus.UP_TO_DATE)
    return Rejoin(waiting, rejoined)


def replace_head(
    path: str,
    overrides: Overrides,
    config: ClusterConfig,
    provider: NodeProvider,
    lost_head: str,
    head_type: str,
    events: EventSink,
    on_phase: PhaseSink,
    ready_timeout_s: float = 300.0,
    restarts: Restarts | None = None,
    secret_env: Mapping[str, str] | None = None,
) -> Replaced:
    """Steps 1 to 3 (see the module). `ready_timeout_s`: how long the new head may take to
    accept commands; `restarts`: the kept workers' starts of the supervisor's earlier
    tries that may still run (see restart_kept)."""
    restarts = restarts or Restarts()
    adopted = retire_head(config, provider, lost_head, events)
    on_phase("old_head_gone")
    if adopted:
        events(Message(f"keeping {len(adopted)} worker(s): {', '.join(adopted)}"))

    early: list[threading.Thread] = []

    def start_early(head_id: str) -> None:
        # As the new head's start-ray commands begin: each kept worker's `ray start` runs
        # as soon as the head's GCS takes connections, beside the rest of the head's start
        # (which leaves the machines idle for seconds, waiting on its own processes).
        def run() -> None:
            head = next((n for n in provider.nodes() if n.id == head_id and n.ip), None)
            if head is not None:
                with contextlib.suppress(LauncherError):  # tried again once the head is up
                    restart_kept(config, provider, head, events, restarts, final=False)

        if not early:
            early.append(_started(run, "rejoin-kept-early"))

    def rejoin(head: Node) -> None:
        # Once the head's Ray is up, beside the rest of `up` (the head's autoscaler) and the
        # driver's start: those the first try did not start (or that it did not try).
        def run() -> None:
            for thread in early:
                thread.join()
            try:
                restart_kept(config, provider, head, events, restarts)
            except LauncherError as exc:
                events(Message(f"the kept workers' Ray was not started: {exc}", "warning"))

        _started(run, "rejoin-kept")

    head = bring_up_head(
        path,
        overrides,
        head_type,
        events,
        on_phase,
        ready_timeout_s,
        on_head_ready=rejoin,
        on_ray_starting=start_early,
        secret_env=secret_env,
    )
    return Replaced(head, adopted)


def _started(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread
