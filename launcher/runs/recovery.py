"""Replacing a lost head, keeping the workers that live.

1. The lost head goes for good (terminated through the provider: a machine that no longer
   answers may still run an autoscaler, which must not act beside the new head's).
2. Every worker still running is marked to be set up again (status uninitialized): its
   machine, files and setup stay (their hashes are on it), and the new head's autoscaler,
   which sets up what is so marked, only starts its Ray again, against the new head. No new
   machine is bought for it. Workers taken back (preempted) are left to that autoscaler,
   which replaces them as it replaces any.
3. A new head is brought up as `launcher up` does (the same steps, the same autoscaler),
   of the type `decide.new_head_type` chose.
4. Wait until the kept workers have rejoined (or failed, or gone).

Each step is idempotent, with the provider's listing as the truth: a supervisor killed
halfway and started again does the steps again and finds the done ones done (a new head
it made before is the head `up` finds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.cluster import lifecycle
from launcher.cluster.lock import ClusterLock
from launcher.config.loader import Overrides
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, EventSink, Message, NodeProgress
from launcher.providers.base import (
    TAG_STATUS,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
    wait_unlisted,
)

OLD_HEAD_GONE_S = 300.0

PhaseSink = Callable[[str], None]


@dataclass(frozen=True)
class Replaced:
    head: Node
    adopted: tuple[str, ...]
    rejoined: tuple[str, ...]


def retire_head(
    config: ClusterConfig, provider: NodeProvider, lost_head: str, events: EventSink
) -> tuple[str, ...]:
    """Steps 1 and 2: the lost head terminated, the running workers marked to rejoin.
    Returns the ids of those workers. A head other than `lost_head` that runs (one a
    supervisor made before it was stopped) is kept: it is the new head."""
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
        for node in kept:
            if node.status is not NodeStatus.UNINITIALIZED:
                provider.set_tags(node.id, {TAG_STATUS: NodeStatus.UNINITIALIZED})
        return tuple(n.id for n in kept)


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


def bring_up_head(
    path: str,
    overrides: Overrides,
    head_type: str,
    events: EventSink,
    on_phase: PhaseSink,
    ready_timeout_s: float = 300.0,
) -> Node:
    """Step 3: `up`, with a head of `head_type` if a head must be made."""
    seen_head = False

    def sink(event: Event) -> None:
        nonlocal seen_head
        if isinstance(event, NodeProgress) and event.kind == NodeKind.HEAD.value:
            if not seen_head:
                seen_head = True
                on_phase("head_launched")
            if event.done:
                on_phase("ray_up")
        events(event)

    options = lifecycle.UpOptions(
        wait_for_workers=False, head_type=head_type, ready_timeout_s=ready_timeout_s
    )
    result = lifecycle.up(path, overrides, options, sink, lambda _: True)
    return result.head


def wait_rejoined(
    provider: NodeProvider,
    adopted: Sequence[str],
    events: EventSink,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, ...]:
    """Step 4: until every kept worker is up to date against the new head, failed or gone.
    Returns those that rejoined."""
    deadline = time.monotonic() + timeout_s
    wanted = set(adopted)
    while True:
        workers = {n.id: n for n in provider.workers() if n.id in wanted}
        waiting = [
            n
            for n in workers.values()
            if n.status not in (NodeStatus.UP_TO_DATE, NodeStatus.FAILED)
            and n.state in (NodeState.RUNNING, NodeState.PENDING)
        ]
        if not waiting:
            break
        if time.monotonic() > deadline:
            events(
                Message(
                    f"{len(waiting)} kept worker(s) have not rejoined after {timeout_s:g} s "
                    f"({', '.join(n.id for n in waiting)}); going on without them",
                    "warning",
                )
            )
            break
        sleep(1.0)
    # min_workers are the new autoscaler's to keep (a fallback may stand in for a type
    # that was just taken back): the run goes on with what rejoined.
    return tuple(i for i, n in workers.items() if n.status is NodeStatus.UP_TO_DATE)


def replace_head(
    path: str,
    overrides: Overrides,
    config: ClusterConfig,
    provider: NodeProvider,
    lost_head: str,
    head_type: str,
    events: EventSink,
    on_phase: PhaseSink,
    workers_timeout_s: float = 600.0,
    ready_timeout_s: float = 300.0,
) -> Replaced:
    """Steps 1 to 4 (see the module). `ready_timeout_s`: how long the new head may take to
    accept commands."""
    adopted = retire_head(config, provider, lost_head, events)
    on_phase("old_head_gone")
    if adopted:
        events(Message(f"keeping {len(adopted)} worker(s): {', '.join(adopted)}"))
    head = bring_up_head(path, overrides, head_type, events, on_phase, ready_timeout_s)
    rejoined = wait_rejoined(provider, adopted, events, workers_timeout_s)
    on_phase("workers_rejoined")
    return Replaced(head, adopted, rejoined)
