"""Replay a workload trace against the planner, with a simulated provider, clock and Ray
scheduler, and report what the cluster would have cost and how long work waited.

The planner and the memory of capacity failures are the same ones the head's daemon runs;
only the world around them is simulated: nodes become ready `launch_delay_s` after launch, a
simple scheduler places tasks and placement groups on ready nodes first-fit, spot nodes are
preempted at random (their running tasks go back to the queue, as Ray retries them), and a
type given a capacity holds at most that many nodes (launches beyond it fail as a cloud out
of capacity does). Preemptions and capacity failures make the type unavailable for a while,
so its fallbacks are launched instead, as on a real cluster.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher.autoscaler.decide.backoff import CapacityMemory
from launcher.autoscaler.decide.planner import (
    Gang,
    NodeView,
    Plan,
    Resources,
    Settings,
    Snapshot,
    fits,
    plan,
)
from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError, UsageError
from launcher.providers.base import NodeKind
from launcher.testing.memory import MemoryProvider

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
STALL_S = 3600.0  # simulated time without any change after which queued work is given up
ZONE = "simulated"


@dataclass(frozen=True)
class TraceEvent:
    t: float
    duration_s: float
    resources: Resources | None = None  # tasks
    count: int = 1
    gang: Gang | None = None  # a placement group


def read_trace(path: str) -> list[TraceEvent]:
    """Parse a JSONL trace; bad lines raise UsageError naming the line."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the trace ({exc.strerror})") from exc
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(_event(json.loads(line)))
        except (ValueError, TypeError, KeyError) as exc:
            raise UsageError(
                f"{path}:{number}: {exc}; lines look like "
                '{"t": 0, "resources": {"CPU": 1}, "count": 10, "duration_s": 60}'
            ) from None
    return sorted(events, key=lambda e: e.t)


def _event(raw: object) -> TraceEvent:
    if not isinstance(raw, dict):
        raise ValueError("each line must be a JSON object")
    t, duration = float(raw["t"]), float(raw["duration_s"])
    if t < 0 or duration < 0:
        raise ValueError("t and duration_s must be 0 or more")
    if "placement_group" in raw:
        group = raw["placement_group"]
        strategy = str(group.get("strategy", "PACK")).upper()
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy {strategy!r} is not one of {', '.join(_STRATEGIES)}")
        bundles = tuple(_resources(b) for b in group["bundles"])
        if not bundles:
            raise ValueError("a placement group needs at least one bundle")
        return TraceEvent(t, duration, gang=Gang(bundles, strategy))
    count = int(raw.get("count", 1))
    if count < 1:
        raise ValueError("count must be 1 or more")
    return TraceEvent(t, duration, _resources(raw["resources"]), count)


def _resources(raw: object) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError('resources must be a non-empty object such as {"CPU": 1}')
    values = {str(k): float(v) for k, v in raw.items()}
    if any(v < 0 for v in values.values()):
        raise ValueError("resource amounts must be 0 or more")
    return values


@dataclass
class _Work:
    submitted: float
    duration: float
    request: Resources | None = None
    gang: Gang | None = None
    started: float | None = None
    ends: float | None = None
    placed_on: list[tuple[_Node, Resources]] = field(default_factory=list)


@dataclass(eq=False)
class _Node:
    id: str
    node_type: str
    total: dict[str, float]
    ready_at: float
    spot: bool
    is_head: bool = False
    stands_in_for: str | None = None
    available: dict[str, float] = field(default_factory=dict)
    running: int = 0
    idle_since: float = 0.0

    def __post_init__(self) -> None:
        self.available = dict(self.total)


@dataclass(frozen=True)
class SimulationReport:
    duration_s: float
    node_hours: Mapping[str, float]
    cost: Mapping[str, float | None]
    total_cost: float | None
    peak_nodes: int
    wait_p50_s: float | None
    wait_p95_s: float | None
    wait_max_s: float | None
    tasks_total: int
    tasks_never_placed: int
    preemptions: int
    capacity_failures: int
    fallback_launches: Mapping[str, int]  # nodes of a type launched as another's fallback
    planner_ms_mean: float
    planner_ms_p95: float
    planner_ms_max: float
    ticks: int

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


class Simulation:
    """The cloud is the in-memory provider (launcher.testing.memory) on `config`'s node
    types, one zone, each type holding at most its `capacity` at once (unlimited where not
    given); what the simulator adds is per node: when it is ready, what runs on it."""

    def __init__(
        self,
        config: ClusterConfig,
        settings: Settings,
        spot_types: Iterable[str],
        launch_delay_s: float,
        preempt_rate: float,
        seed: int = 0,
        tick_s: float = 1.0,
        capacity: Mapping[str, int] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        limits = dict(capacity or {})  # type -> most nodes it may have at once
        unlimited = config.max_workers + 1
        room = {(name, ZONE): limits.get(name, unlimited) for name in config.node_types}
        self.cloud = MemoryProvider(config, room, default_zones=(ZONE,))
        self.memory = CapacityMemory()
        self.capacity_failures = 0
        self.fallback_launches: Counter[str] = Counter()
        self.spot = set(spot_types)
        self.launch_delay_s = launch_delay_s
        self.preempt_rate = preempt_rate  # preemptions per spot node per hour
        self.random = random.Random(seed)
        self.tick_s = tick_s
        head_type = config.head_node_type
        (head,) = self.cloud.create_nodes(config.head_type, NodeKind.HEAD, 1, {})
        resources = dict(settings.types[head_type].resources)
        self.nodes = [_Node(head.id, head_type, resources, 0.0, False, True)]
        self.queue: list[_Work] = []
        self.running: list[_Work] = []
        self.done: list[_Work] = []
        self.node_seconds: dict[str, float] = {}
        self.last_change = 0.0
        self.peak = 1
        self.preemptions = 0
        self.planner_ms: list[float] = []

    def run(self, trace: Sequence[TraceEvent], max_s: float | None = None) -> SimulationReport:
        last = max((e.t for e in trace), default=0.0)
        limit = max_s if max_s is not None else last + 24 * 3600
        events = list(trace)
        now = 0.0
        while now <= limit:
            while events and events[0].t <= now:
                self._submit(events.pop(0), now)
            self._finish(now)
            self._preempt(now)
            self._schedule(now)
            self._autoscale(now)
            self._account()
            if (
                not events
                and not self.running
                and self._settled(now)
                and (not self.queue or self._hopeless() or now - self.last_change > STALL_S)
            ):
                break  # all done, or what is left can never be placed
            now += self.tick_s
        return self._report(now)

    # -- the simulated world ---------------------------------------------------------
    def _submit(self, event: TraceEvent, now: float) -> None:
        if event.gang is not None:
            self.queue.append(_Work(now, event.duration_s, gang=event.gang))
        else:
            for _ in range(event.count):
                self.queue.append(_Work(now, event.duration_s, request=event.resources))

    def _ready(self, now: float) -> list[_Node]:
        return [n for n in self.nodes if n.ready_at <= now]

    def _finish(self, now: float) -> None:
        still = []
        for work in self.running:
            if work.ends is not None and work.ends <= now:
                self._release(work, now)
                self.done.append(work)
            else:
                still.append(work)
        self.running = still

    def _release(self, work: _Work, now: float) -> None:
        for node, request in work.placed_on:
            for key, value in request.items():
                node.available[key] = node.available.get(key, 0.0) + value
            node.running -= 1
            if node.running == 0:
                node.idle_since = now
        work.placed_on = []

    def _preempt(self, now: float) -> None:
        chance = self.preempt_rate * self.tick_s / 3600.0
        for node in list(self.nodes):
            if node.spot and node.ready_at <= now and self.random.random() < chance:
                self.preemptions += 1
                self.memory.failed(node.node_type, ZONE, now, "preempted")
                self._remove(node, now)

    def _remove(self, node: _Node, now: float) -> None:
        for work in [w for w in self.running if any(n is node for n, _ in w.placed_on)]:
            self._release(work, now)
            work.started = work.ends = None
            self.running.remove(work)
            self.queue.insert(0, work)  # Ray retries the lost work
        self.nodes.remove(node)
        self.cloud.terminate_nodes([node.id])

    def _schedule(self, now: float) -> None:
        ready = self._ready(now)
        waiting = []
        for work in self.queue:
            placement = self._place(work, ready)
            if placement is None:
                waiting.append(work)
                continue
            for node, request in placement:
                for key, value in request.items():
                    node.available[key] = node.available.get(key, 0.0) - value
                node.running += 1
            work.placed_on = placement
            work.started, work.ends = now, now + work.duration
            self.last_change = now
            self.running.append(work)
        self.queue = waiting

    @staticmethod
    def _place(work: _Work, ready: list[_Node]) -> list[tuple[_Node, Resources]] | None:
        if work.request is not None:
            node = next((n for n in ready if fits(n.available, work.request)), None)
            return None if node is None else [(node, work.request)]
        assert work.gang is not None
        bundles = work.gang.bundles
        if work.gang.strategy == "STRICT_PACK":
            total: Counter[str] = Counter()
            for bundle in bundles:
                total.update(bundle)
            node = next((n for n in ready if fits(n.available, total)), None)
            return None if node is None else [(node, dict(total))]
        used: list[tuple[_Node, Resources]] = []
        trial = {id(n): dict(n.available) for n in ready}
        for bundle in bundles:
            taken = {id(n) for n, _ in used}
            node = next(
                (
                    n
                    for n in ready
                    if fits(trial[id(n)], bundle)
                    and not (work.gang.strategy == "STRICT_SPREAD" and id(n) in taken)
                ),
                None,
            )
            if node is None:
                return None
            for key, value in bundle.items():
                trial[id(node)][key] = trial[id(node)].get(key, 0.0) - value
            used.append((node, bundle))
        return used

    def _autoscale(self, now: float) -> None:
        snapshot = self._snapshot(now)
        started = time.perf_counter()
        result: Plan = plan(snapshot, self.settings)
        self.planner_ms.append((time.perf_counter() - started) * 1000)
        gone = {node_id for node_id, _ in result.terminate}
        if gone or result.launch:
            self.last_change = now
        for node in [n for n in self.nodes if n.id in gone]:
            self._remove(node, now)
        for decision in result.decisions:
            if decision.action == "fallback" and decision.node_type:
                self.fallback_launches[decision.node_type] += decision.count
        for type_name, count, stands_in_for in result.launches():
            self._launch(type_name, count, now, stands_in_for)
        self.peak = max(self.peak, len(self.nodes))

    def _launch(self, type_name: str, count: int, now: float, stands_in_for: str | None) -> None:
        if count <= 0:
            return
        try:
            made = self.cloud.create_nodes(
                self.config.node_types[type_name], NodeKind.WORKER, count, {}
            )
        except CapacityError as exc:
            self.capacity_failures += 1
            self.memory.failed(type_name, ZONE, now, "capacity failure")
            made = exc.created
        resources = dict(self.settings.types[type_name].resources)
        for launched in made:
            self.nodes.append(
                _Node(
                    launched.id,
                    type_name,
                    dict(resources),
                    now + self.launch_delay_s,
                    type_name in self.spot,
                    stands_in_for=stands_in_for,
                    idle_since=now + self.launch_delay_s,
                )
            )

    def _snapshot(self, now: float) -> Snapshot:
        views = tuple(
            NodeView(
                n.id,
                n.node_type,
                n.is_head,
                n.ready_at > now,
                n.total,
                n.available,
                None if n.ready_at > now or n.running else max(0.0, now - n.idle_since),
                n.stands_in_for,
            )
            for n in self.nodes
        )
        shapes: Counter[tuple[tuple[str, float], ...]] = Counter()
        gangs = []
        for work in self.queue:
            if work.request is not None:
                shapes[tuple(sorted(work.request.items()))] += 1
            elif work.gang is not None:
                gangs.append(work.gang)
        pending = tuple((dict(shape), count) for shape, count in shapes.items())
        zones = dict.fromkeys(self.settings.types, (ZONE,))
        unavailable = self.memory.unavailable(zones, now)
        return Snapshot(views, pending, tuple(gangs), (), unavailable)

    def _account(self) -> None:
        for node in self.nodes:
            self.node_seconds[node.node_type] = (
                self.node_seconds.get(node.node_type, 0.0) + self.tick_s
            )

    def _hopeless(self) -> bool:
        """Every queued piece of work fits no node type and no existing node."""
        shapes: list[Resources] = []
        for work in self.queue:
            if work.request is not None:
                shapes.append(work.request)
            elif work.gang is not None:
                shapes.extend(work.gang.bundles)
        candidates = [t.resources for t in self.settings.types.values() if t.max_workers > 0]
        candidates += [n.total for n in self.nodes]
        return all(not any(fits(c, shape) for c in candidates) for shape in shapes)

    def _settled(self, now: float) -> bool:
        """Nothing left to do: every worker beyond min_workers has been removed."""
        counts = Counter(n.node_type for n in self.nodes if not n.is_head)
        return all(counts[name] <= info.min_workers for name, info in self.settings.types.items())

    def _report(self, now: float) -> SimulationReport:
        hours = {name: seconds / 3600 for name, seconds in self.node_seconds.items()}
        cost: dict[str, float | None] = {}
        for name, node_hours in hours.items():
            price = self.settings.types[name].price
            cost[name] = None if price is None else round(price * node_hours, 4)
        known = [c for c in cost.values() if c is not None]
        total = round(sum(known), 4) if len(known) == len(cost) else None
        waits = sorted(
            w.started - w.submitted for w in self.done + self.running if w.started is not None
        )
        planner = sorted(self.planner_ms) or [0.0]
        return SimulationReport(
            duration_s=now,
            node_hours={k: round(v, 4) for k, v in hours.items()},
            cost=cost,
            total_cost=total,
            peak_nodes=self.peak,
            wait_p50_s=statistics.median(waits) if waits else None,
            wait_p95_s=_percentile(waits, 0.95),
            wait_max_s=waits[-1] if waits else None,
            tasks_total=len(self.done) + len(self.running) + len(self.queue),
            tasks_never_placed=len(self.queue),
            preemptions=self.preemptions,
            capacity_failures=self.capacity_failures,
            fallback_launches=dict(self.fallback_launches),
            planner_ms_mean=statistics.fmean(planner),
            planner_ms_p95=_percentile(planner, 0.95) or 0.0,
            planner_ms_max=planner[-1],
            ticks=len(self.planner_ms),
        )


def _percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    index = min(len(values) - 1, max(0, math.ceil(fraction * len(values)) - 1))
    return values[index]
