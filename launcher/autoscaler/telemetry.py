"""What the daemon tells beyond its log: the timeline's records (timeline.py) and the
Prometheus metrics (metrics.py), from the facts it learns in a tick. The daemon calls one
method per fact; this module turns them into records and numbers, and never raises into
the tick.

`sample_of` and `gauges_of` are pure: the cluster as one tick saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.demand import Demand
from launcher.autoscaler.decide.plan_types import Decision as PlanDecision
from launcher.autoscaler.metrics import (
    FAILED_CREATE,
    FAILED_UPDATES,
    LAUNCH_EXCEPTIONS,
    STARTED,
    STOPPED,
    SUCCESSFUL_UPDATES,
    AutoscalerMetrics,
    ClusterGauges,
)
from launcher.autoscaler.timeline import (
    Decision,
    Event,
    Failure,
    Reclaim,
    ReclaimHow,
    Sample,
    TimelineWriter,
    TypeCount,
)
from launcher.providers.base import Node, NodeKind, NodeState, NodeStatus


def pending_resources(demand: Demand) -> dict[str, float]:
    """Resources Ray waits for: pending requests and placement groups' bundles, summed."""
    out: dict[str, float] = {}
    for request, count in demand.pending:
        for name, amount in request.items():
            out[name] = out.get(name, 0.0) + float(amount) * count
    for gang in demand.gangs:
        for bundle in gang.bundles:
            for name, amount in bundle.items():
                out[name] = out.get(name, 0.0) + float(amount)
    return out


def serving(node: Node) -> bool:
    return node.status is NodeStatus.UP_TO_DATE and node.state in (
        NodeState.RUNNING,
        NodeState.PENDING,
    )


def by_type(nodes: Sequence[Node]) -> tuple[dict[str, int], dict[str, int]]:
    """How many of `nodes` of each type are running (set up, Ray started) and how many are
    launching (the rest); taken-back, dead and stopped nodes, and those whose setup failed,
    are neither."""
    running: dict[str, int] = {}
    launching: dict[str, int] = {}
    for node in nodes:
        gone = node.state in (NodeState.PREEMPTED, NodeState.DEAD, NodeState.STOPPED)
        if gone or node.status is NodeStatus.FAILED:  # a failed setup: not on its way
            continue
        into = running if serving(node) else launching
        into[node.node_type] = into.get(node.node_type, 0) + 1
    return running, launching


def sample_of(
    t: float,
    nodes: Sequence[Node],
    pending: Sequence[tuple[str, int]],
    demand: Demand,
    infeasible: int,
    prices: Mapping[str, float | None],
    spot: Mapping[str, bool],
) -> Sample:
    """The cluster at wall-clock time `t`: `nodes` as listed (and launched, not listed yet)
    by type, running (set up, Ray started) or launching (the rest, and `pending`: (type,
    count) of launches under way); taken-back and dead nodes, and those whose setup failed, are
    not counted. The cost is their prices' sum, None when one is not known."""
    running, launching = by_type(nodes)
    for node_type, count in pending:
        launching[node_type] = launching.get(node_type, 0) + count
    cost: float | None = 0.0
    for name, count in (*running.items(), *launching.items()):
        price = prices.get(name)
        cost = None if cost is None or price is None else cost + price * count
    types = sorted(set(running) | set(launching))
    counts = {
        n: TypeCount(running.get(n, 0), launching.get(n, 0), spot.get(n, False)) for n in types
    }
    return Sample(
        t, counts, pending_resources(demand), infeasible, None if cost is None else round(cost, 6)
    )


def gauges_of(
    sample: Sample,
    nodes: Sequence[Node],
    demand: Demand,
    declared: Mapping[str, Mapping[str, float]],
    updating: int,
) -> ClusterGauges:
    """The metrics' gauges from a tick's `sample` (its `nodes` and Ray's `demand`):
    Ray's nodes' total resources, and what the launching nodes' types declare."""
    total: dict[str, float] = {}
    for ray_node in demand.nodes:
        if ray_node.alive:
            for name, amount in ray_node.total.items():
                total[name] = total.get(name, 0.0) + float(amount)
    coming: dict[str, float] = {}
    for node_type, counts in sample.nodes.items():
        for name, amount in declared.get(node_type, {}).items():
            coming[name] = coming.get(name, 0.0) + float(amount) * counts.launching
    workers = sum(1 for n in nodes if n.kind is NodeKind.WORKER and serving(n))
    return ClusterGauges(
        active={t: c.running for t, c in sample.nodes.items()},
        pending={t: c.launching for t, c in sample.nodes.items()},
        running_workers=workers,
        updating=updating,
        cluster_resources=total,
        pending_resources=coming,
        demand=dict(sample.pending),
        infeasible=sample.infeasible,
        cost_per_hour=sample.cost_per_hour,
    )


@dataclass
class Telemetry:
    """Records the daemon's facts in the timeline and the metrics. Reclaims wait for the
    end of the tick that learned them (`acted`), to say what that tick launched in their
    place. Called from the daemon's thread, and from launch and setup threads for
    `launched` and `setup_finished` (the metrics lock; the timeline is not written there)."""

    timeline: TimelineWriter
    metrics: AutoscalerMetrics
    wall_clock: Callable[[], float]
    clock: Callable[[], float]  # monotonic: how recent a failure is
    fallbacks: Mapping[str, Sequence[str]] = field(default_factory=dict)
    _reclaims: list[Reclaim] = field(default_factory=list)
    _listed: dict[str, str] = field(default_factory=dict)  # worker id -> type, last listing
    _known: set[str] = field(default_factory=set)  # reclaimed or terminated by us

    def decision(
        self,
        action: str,
        reason: str,
        node_type: str | None = None,
        count: int | None = None,
        *,
        recorded: bool = True,
    ) -> None:
        """A decision logged (each once while it holds); `recorded`: one of the kinds the
        state file and the timeline keep."""
        self.metrics.decision(action, reason)
        if recorded:
            self._write(Decision(self.wall_clock(), action, reason, node_type, count or None))

    def planned(self, decisions: Iterable[PlanDecision]) -> None:
        """A tick's plan, as carried out: the fallbacks it launched."""
        for d in decisions:
            if d.action is Action.FALLBACK and d.node_type and d.stands_in_for:
                self.metrics.fallback(d.node_type, d.stands_in_for, d.count)

    def failure(self, node_type: str, zone: str | None, reason: str) -> None:
        self.metrics.capacity_failure(node_type, zone)
        self._write(Failure(self.wall_clock(), node_type, reason, zone or None))

    def launched(self, node_type: str, asked: int, made: int, seconds: float, failed: bool) -> None:
        """A launch collected: `made` of `asked` nodes, in `seconds`."""
        self.metrics.count(STARTED, made)
        if made:
            self.metrics.observe(self.metrics.create_time, seconds, made)
        if failed:
            self.metrics.count(LAUNCH_EXCEPTIONS)
            self.metrics.count(FAILED_CREATE, asked - made)
            self.metrics.node_failed(node_type, self.clock(), asked - made)

    def setup_finished(self, node: Node, ok: bool, seconds: float) -> None:
        self.metrics.count(SUCCESSFUL_UPDATES if ok else FAILED_UPDATES)
        if ok:
            self.metrics.observe(self.metrics.setup_time, seconds)
        else:
            self.metrics.node_failed(node.node_type, self.clock())

    def reclaim(self, node: Node, how: ReclaimHow) -> None:
        """`node` taken back (or noticed to be): recorded at the end of this tick."""
        self._known.add(node.id)
        self._reclaims.append(Reclaim(self.wall_clock(), node.id, node.node_type, how))

    def terminating(self, node_ids: Iterable[str]) -> None:
        """Workers the autoscaler itself stops: their leaving the listing is no reclaim."""
        self._known.update(node_ids)

    def stopped(self, count: int) -> None:
        self.metrics.count(STOPPED, count)

    def listed(self, nodes: Sequence[Node]) -> None:
        """A fresh listing: workers listed last time and gone from it, that nobody here
        stopped or already reported, were taken away ("gone")."""
        now = {n.id: n.node_type for n in nodes if n.kind is NodeKind.WORKER}
        for node_id, node_type in self._listed.items():
            if node_id not in now and node_id not in self._known:
                self._reclaims.append(Reclaim(self.wall_clock(), node_id, node_type, "gone"))
        self._known &= set(now)
        self._listed = now

    def acted(
        self,
        launches: Sequence[tuple[str, int, str | None]],
        sample: Sample,
        gauges: ClusterGauges,
    ) -> None:
        """The end of a tick: its reclaims (with what it launched in their place), its
        sample when due, and the metrics' gauges."""
        reclaims, self._reclaims = self._reclaims, []
        done = [
            Reclaim(r.t, r.node_id, r.node_type, r.how, self._replacement(r.node_type, launches))
            for r in reclaims
        ]
        for reclaim in done:
            self.metrics.reclaim(reclaim.node_type, reclaim.how)
        self.metrics.set_gauges(gauges)
        self.metrics.forget_failures(self.clock())
        self._write(*done)
        try:
            self.timeline.sample(sample)
        except Exception as exc:  # a bug here must not fail the tick
            self.timeline.log(f"could not write the timeline's sample: {exc}")

    def _replacement(
        self, node_type: str, launches: Sequence[tuple[str, int, str | None]]
    ) -> str | None:
        """The type launched in place of a `node_type` node: a stand-in for it, else the
        same type, else one of its fallbacks; None when none was launched."""
        for name, _, stands_in_for in launches:
            if stands_in_for == node_type:
                return name
        names = [name for name, _, _ in launches]
        if node_type in names:
            return node_type
        return next((n for n in self.fallbacks.get(node_type, ()) if n in names), None)

    def _write(self, *events: Event) -> None:
        try:
            self.timeline.append(*events)
        except Exception as exc:  # a bug here must not fail the tick
            self.timeline.log(f"could not write the timeline: {exc}")
