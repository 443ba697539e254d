"""A tick's decision on one listing: what to evacuate, terminate, launch and set up. Pure.

The daemon gathers the facts (the listing with the notices nodes reported, Ray's demand,
what the executor has under way, which types are unavailable, the time) into `Facts`, and
`choose` returns a `Choice` the action side carries out; nothing here changes anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.broken import broken_workers
from launcher.autoscaler.decide.demand import Demand
from launcher.autoscaler.decide.evacuate import Evacuation, evacuations, used_resources
from launcher.autoscaler.decide.node_states import noticed
from launcher.autoscaler.decide.planner import Decision, Plan, Settings, plan
from launcher.autoscaler.decide.view import PendingLaunch, snapshot
from launcher.config.model import ClusterConfig
from launcher.providers.base import Node, NodeKind, NodeState, NodeStatus, head_of

# A noticed worker (its Ray perhaps stopped to move its work) is left to the provider's
# reclaim, not replaced as broken, until this long after the time it was to be taken.
RECLAIM_GRACE_S = 120.0


@dataclass(frozen=True)
class Facts:
    """What a tick decides from, as read (and noted) before deciding."""

    listed: Sequence[Node]  # the provider's listing
    nodes: Sequence[Node]  # the listing plus launched nodes not listed yet, with notices
    demand: Demand
    busy: AbstractSet[str]  # workers being set up now
    evacuated: AbstractSet[str]  # noticed workers whose Ray was stopped already
    pending: Sequence[PendingLaunch]
    unavailable: Mapping[str, str]  # types not to launch now -> why
    resync: bool  # file_mounts_sync_continuously: time to copy the mounts again
    now: float  # wall-clock time, as `Node.reclaim_at`


@dataclass(frozen=True)
class Choice:
    """A tick's decisions on one listing, before any is carried out."""

    nodes: Sequence[Node]  # the listing plus launched nodes not listed yet
    head: Node | None
    preempted: Sequence[Node]
    broken: tuple[tuple[str, str], ...]  # (worker, why): terminated as broken
    unavailable: Mapping[str, str]
    result: Plan
    setups: Sequence[tuple[Node, bool]]  # (worker, files only)
    evacuate: Sequence[Evacuation]

    @property
    def decisions(self) -> list[Decision]:
        """Every decision to log, in order: broken workers' terminations, then the plan's."""
        broken = [Decision(Action.TERMINATE, why, node_id=i) for i, why in self.broken]
        return broken + list(self.result.decisions)

    @property
    def terminate(self) -> list[str]:
        return [i for i, _ in self.broken] + [i for i, _ in self.result.terminate]

    @property
    def acts(self) -> bool:
        return bool(
            self.preempted
            or self.evacuate
            or self.broken
            or self.result.terminate
            or self.result.launches()
            or self.setups
        )


def choose(config: ClusterConfig, settings: Settings, facts: Facts) -> Choice:
    """What this tick does, given `facts`: decided, not done."""
    nodes = list(facts.nodes)
    head = head_of(nodes)
    preempted = [n for n in nodes if n.state is NodeState.PREEMPTED]
    leaving = [n for n in nodes if noticed(n)]
    evacuate = evacuations(leaving, facts.demand.nodes, facts.now, set(facts.evacuated))
    waiting = [n for n in nodes if not awaiting_reclaim(n, facts.now)]
    broken = broken_workers(config, waiting, set(facts.busy), facts.demand.nodes)
    # A node about to be taken back is planned as gone, and what runs on it as waiting
    # for room: its replacement is launched now, not once it has gone.
    view = snapshot(
        config,
        nodes,
        with_work_of(facts.demand, leaving),
        {i for i, _ in broken} | {n.id for n in leaving},
        facts.pending,
        facts.unavailable,
    )
    result = plan(view, settings)
    gone = {i for i, _ in broken} | {i for i, _ in result.terminate} | {n.id for n in leaving}
    listed = list(facts.listed)
    skip = set(facts.busy) | gone
    setups = [] if head is None else setups_of(listed, skip, facts.resync, facts.now)
    return Choice(nodes, head, preempted, broken, dict(facts.unavailable), result, setups, evacuate)


# Where a worker is while its setup runs (on whichever machine runs it).
IN_SETUP = frozenset(
    {NodeStatus.WAITING, NodeStatus.SYNCING, NodeStatus.SETTING_UP, NodeStatus.STARTING_RAY}
)


def setups_of(
    listed: list[Node], skip: set[str], resync: bool, now: float
) -> list[tuple[Node, bool]]:
    """(worker, files only) to set up: listed new workers (a launched node is set up once
    listed, with its address), and the file mounts of the others when `resync` is due
    (file_mounts_sync_continuously). A worker kept across its head's loss is its run
    supervisor's to start against the new head until its `rejoin_by`; past it, it is set
    up here as a new one, also one that supervisor left halfway (it stopped or died)."""
    out = []
    for node in listed:
        if node.kind is not NodeKind.WORKER or node.id in skip:
            continue
        if node.rejoin_by > now:
            continue
        if node.status is NodeStatus.UNINITIALIZED or (node.rejoin_by and node.status in IN_SETUP):
            out.append((node, False))
        elif resync and node.status is NodeStatus.UP_TO_DATE:
            out.append((node, True))
    return out


def awaiting_reclaim(node: Node, now: float) -> bool:
    """A noticed worker whose reclaim is due now or soon: the provider's to take, not ours."""
    return noticed(node) and (node.reclaim_at or 0.0) + RECLAIM_GRACE_S > now


def kept_notices(
    reported: Mapping[str, float], read: Iterable[tuple[str, float]], listed: AbstractSet[str]
) -> dict[str, float]:
    """The reclaim notices nodes reported themselves: those kept so far and those read now,
    of the nodes still listed (a tick without Ray's state must not take them back)."""
    merged = {**reported, **dict(read)}
    return {i: at for i, at in merged.items() if i in listed}


def with_notices(nodes: list[Node], notices: Iterable[tuple[str, float]]) -> list[Node]:
    """`nodes`, those that reported a reclaim notice themselves (notice_watch) with its time,
    where the provider did not list one."""
    told = dict(notices)
    return [
        dataclasses.replace(n, reclaim_at=told[n.id])
        if n.id in told and n.reclaim_at is None and n.state is not NodeState.PREEMPTED
        else n
        for n in nodes
    ]


def with_work_of(demand: Demand, leaving: list[Node]) -> Demand:
    """`demand` plus, for each of `leaving`, what Ray runs there now (its resources in use),
    as one more bundle waiting for room: the work that must move when the node goes."""
    by_ip = {n.ip: n for n in demand.nodes if n.alive}
    extra = []
    for node in leaving:
        ray = by_ip.get(node.ip or "")
        if ray is None:
            continue
        used = used_resources(ray)
        if used:
            extra.append((used, 1))
    if not extra:
        return demand
    return dataclasses.replace(demand, pending=(*demand.pending, *extra))
