"""The autoscaler's Prometheus metrics, named and labelled as Ray's autoscaler names them, so
Ray's Grafana panels read ours unchanged; and our own under `launcher_`.

Ray's (ray/autoscaler/_private/prom_metrics.py, Ray 2.60) that apply here, each with Ray's
`SessionName` label (the Ray session's name, read from the GCS; "" until read):
- gauges by `NodeType` (our node types, every configured type reported, 0 when none):
  `autoscaler_active_nodes` (set up and serving, the head included),
  `autoscaler_pending_nodes` (launched or setting up), `autoscaler_recently_failed_nodes`
  (nodes of the type that failed to launch or to be set up in the last
  `RECENT_FAILURE_S`);
- gauges by `resource`: `autoscaler_cluster_resources` (Ray's nodes' totals) and
  `autoscaler_pending_resources` (what the nodes being launched or set up will add, as
  Ray's: its pending launches and nodes being set up); CPU, GPU, TPU, memory and
  object_store_memory always, with the other resources the node types declare;
- `autoscaler_running_workers_nodes`, `autoscaler_updating_nodes`;
- counters: `autoscaler_started_nodes`, `autoscaler_stopped_nodes`,
  `autoscaler_failed_create_nodes`, `autoscaler_node_launch_exceptions`,
  `autoscaler_successful_updates`, `autoscaler_failed_updates`,
  `autoscaler_update_loop_exceptions`;
- histograms: `autoscaler_update_time` (a tick), `autoscaler_worker_create_node_time`
  (a launch call, once per node it made), `autoscaler_worker_update_time` (a successful
  setup), with Ray's buckets.
Ray's recovery, reset, config-validation and drain counters are left out: this autoscaler
replaces a failed node instead of recovering it, reloads no config in place and drains
through its own evacuation.

Ours: `launcher_decisions_total{action,reason}` (`reason` is a kind, see `reason_kind`),
`launcher_reclaims_total{NodeType,how}` (notice, preempted, gone),
`launcher_fallback_nodes_total{NodeType,for_type}`,
`launcher_capacity_failures_total{NodeType,zone}`, `launcher_cost_per_hour` (absent while a
node's price is unknown), `launcher_demand_resources{resource}` (what Ray waits for),
`launcher_infeasible_requests`, and `launcher_planner_seconds` (the planner's time per tick).

Everything is kept here as plain numbers under one lock and rendered at scrape time by
`collect` (a prometheus_client collector), so a scrape never sees half a tick.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

RECENT_FAILURE_S = 600.0
# The resources reported: Ray's autoscaler's three, and the memory Ray's Grafana panels ask
# for (Ray's own autoscaler leaves it out); with those the node types declare.
ALWAYS_RESOURCES = ("CPU", "GPU", "TPU", "memory", "object_store_memory")
# Ray's buckets: launches and setups from 5 s to 30 min; a tick from 10 ms to 1000 s.
NODE_TIME_BUCKETS: tuple[float, ...] = (5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 360)
NODE_TIME_BUCKETS += (480, 600, 720, 900, 1200, 1500, 1800)
UPDATE_TIME_BUCKETS = (0.01, 0.1, 1, 10, 100, 1000)
PLANNER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SESSION = "SessionName"


@dataclass(frozen=True)
class ClusterGauges:
    """The gauges, as one tick saw the cluster."""

    active: Mapping[str, int] = field(default_factory=dict)  # node type -> serving
    pending: Mapping[str, int] = field(default_factory=dict)  # node type -> launching
    running_workers: int = 0
    updating: int = 0
    cluster_resources: Mapping[str, float] = field(default_factory=dict)
    pending_resources: Mapping[str, float] = field(default_factory=dict)
    demand: Mapping[str, float] = field(default_factory=dict)
    infeasible: int = 0
    cost_per_hour: float | None = None


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.total = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.total += value * times

    def family(self, name: str, help_text: str, session: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, help_text, labels=[SESSION])
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else _le(bound), float(cumulative)))
        family.add_metric([session], buckets, self.total)
        return family


def _le(bound: float) -> str:
    return str(float(bound))


# Substrings of a decision's reason (decide/planner.py, decide/broken.py, act/executor.py)
# -> its kind, the first that matches; "other" when none does.
REASON_KINDS: tuple[tuple[str, str], ...] = (
    ("min_workers", "min_workers"),
    ("placement group", "placement_group"),
    ("pending bundle", "pending_demand"),
    ("request_resources", "request_resources"),
    ("requested ", "request_resources"),
    ("would hold", "repack"),
    ("upscaling_speed", "upscaling_speed"),
    ("idle ", "idle"),
    ("over its quota", "quota"),
    ("capacity failure", "capacity"),
    ("preempted", "preempted"),
    ("to be taken back", "notice"),
    ("setup failed", "setup_failed"),
    ("setups failed", "setup_failed"),
    ("launches failed", "launch_failed"),
    ("Ray on it stopped", "ray_stopped"),
    ("no longer in the config", "type_removed"),
    ("fits no node type", "fits_no_type"),
    ("fit no node type", "fits_no_type"),
    ("no room", "max_workers"),
)


def reason_kind(reason: str) -> str:
    """A decision's reason as one of a few kinds (a label with a bounded set of values)."""
    return next((kind for part, kind in REASON_KINDS if part in reason), "other")


class AutoscalerMetrics:
    """The metrics of one cluster's autoscaler. The daemon's thread records; a scrape's
    thread reads (`collect`), under `lock`."""

    def __init__(self, node_types: Iterable[str], resources: Iterable[str] = ()) -> None:
        self.lock = threading.Lock()
        self.node_types = tuple(node_types)
        self.resources = tuple(dict.fromkeys((*ALWAYS_RESOURCES, *resources)))
        self.session = ""
        self.gauges = ClusterGauges()
        self.counts: dict[str, float] = {}
        self.decisions: dict[tuple[str, str], int] = {}
        self.reclaims: dict[tuple[str, str], int] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.capacity_failures: dict[tuple[str, str], int] = {}
        self.failures: list[tuple[float, str]] = []  # (when, node type): recently failed
        self.update_time = _Histogram(UPDATE_TIME_BUCKETS)
        self.create_time = _Histogram(NODE_TIME_BUCKETS)
        self.setup_time = _Histogram(NODE_TIME_BUCKETS)
        self.planner_time = _Histogram(PLANNER_BUCKETS)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- recording (the daemon's thread) ---------------------------------------------
    def count(self, name: str, by: float = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + by

    def set_session(self, session: str) -> None:
        with self.lock:
            self.session = session

    def set_gauges(self, gauges: ClusterGauges) -> None:
        with self.lock:
            self.gauges = gauges

    def decision(self, action: str, reason: str) -> None:
        key = (action, reason_kind(reason))
        with self.lock:
            self.decisions[key] = self.decisions.get(key, 0) + 1

    def reclaim(self, node_type: str, how: str) -> None:
        with self.lock:
            self.reclaims[node_type, how] = self.reclaims.get((node_type, how), 0) + 1

    def fallback(self, node_type: str, for_type: str, nodes: int) -> None:
        with self.lock:
            self.fallbacks[node_type, for_type] = self.fallbacks.get((node_type, for_type), 0)
            self.fallbacks[node_type, for_type] += nodes

    def capacity_failure(self, node_type: str, zone: str | None) -> None:
        key = (node_type, zone or "")
        with self.lock:
            self.capacity_failures[key] = self.capacity_failures.get(key, 0) + 1

    def node_failed(self, node_type: str, now: float, nodes: int = 1) -> None:
        """`nodes` of `node_type` failed to launch or be set up at `now` (monotonic)."""
        with self.lock:
            self.failures += [(now, node_type)] * nodes
            self.failures = [f for f in self.failures if f[0] > now - RECENT_FAILURE_S]

    def forget_failures(self, now: float) -> None:
        """Forget failures older than RECENT_FAILURE_S (`now`: monotonic)."""
        with self.lock:
            self.failures = [f for f in self.failures if f[0] > now - RECENT_FAILURE_S]

    def observe(self, histogram: _Histogram, seconds: float, times: int = 1) -> None:
        with self.lock:
            histogram.observe(seconds, times)

    # -- a scrape (prometheus_client's thread) ---------------------------------------------
    def describe(self) -> list[Metric]:
        return []  # families are made at each scrape (`collect`)

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            families = self._families()
        yield from families

    def _families(self) -> list[Metric]:
        session, g = self.session, self.gauges
        return [
            *self._by_type(session, g),
            *self._by_resource(session, g),
            *self._scalars(session, g),
            *self._counters(session),
            *self._histograms(session),
        ]

    def _by_type(self, session: str, g: ClusterGauges) -> Iterator[Metric]:
        failed = _counted(self.failures)
        for name, help_text, values in (
            ("autoscaler_active_nodes", "Number of nodes in the cluster.", g.active),
            ("autoscaler_pending_nodes", "Number of nodes pending to be started.", g.pending),
            (
                "autoscaler_recently_failed_nodes",
                "The number of recently failed nodes. This count could reset at undefined times.",
                failed,
            ),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["NodeType", SESSION])
            for node_type in dict.fromkeys((*self.node_types, *values)):
                family.add_metric([node_type, session], values.get(node_type, 0))
            yield family

    def _by_resource(self, session: str, g: ClusterGauges) -> Iterator[Metric]:
        for name, help_text, amounts in (
            (
                "autoscaler_cluster_resources",
                "Total logical resources in the cluster.",
                g.cluster_resources,
            ),
            (
                "autoscaler_pending_resources",
                "Pending logical resources in the cluster.",
                g.pending_resources,
            ),
            (
                "launcher_demand_resources",
                "Logical resources Ray's pending tasks, actors and placement groups ask for.",
                g.demand,
            ),
        ):
            family = GaugeMetricFamily(name, help_text, labels=["resource", SESSION])
            for resource in self.resources:  # not Ray's `node:<ip>` and the like
                family.add_metric([resource, session], amounts.get(resource, 0.0))
            yield family

    def _scalars(self, session: str, g: ClusterGauges) -> Iterator[Metric]:
        values: list[tuple[str, str, float | None]] = [
            (
                "autoscaler_running_workers_nodes",
                "Number of worker nodes running.",
                g.running_workers,
            ),
            (
                "autoscaler_updating_nodes",
                "Number of nodes in the process of updating.",
                g.updating,
            ),
            (
                "launcher_infeasible_requests",
                "Pending requests no node type can hold.",
                g.infeasible,
            ),
            ("launcher_cost_per_hour", "The cluster's nodes' price per hour.", g.cost_per_hour),
        ]
        for name, help_text, value in values:
            if value is not None:  # a cost not known is left out, not said to be 0
                gauge = GaugeMetricFamily(name, help_text, labels=[SESSION])
                gauge.add_metric([session], value)
                yield gauge
        for name, help_text in COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=[SESSION])
            counter.add_metric([session], self.counts.get(name, 0))
            yield counter

    def _counters(self, session: str) -> Iterator[Metric]:
        for name, help_text, labels, table in (
            (
                "launcher_decisions",
                "Scaling decisions, by action and kind of reason.",
                ["action", "reason"],
                self.decisions,
            ),
            (
                "launcher_reclaims",
                "Workers taken back: with a notice first, listed preempted, or gone unasked.",
                ["NodeType", "how"],
                self.reclaims,
            ),
            (
                "launcher_fallback_nodes",
                "Nodes launched as a fallback for a type that could not be had.",
                ["NodeType", "for_type"],
                self.fallbacks,
            ),
            (
                "launcher_capacity_failures",
                "Launches refused for capacity or quota, by type and zone.",
                ["NodeType", "zone"],
                self.capacity_failures,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=[*labels, SESSION])
            for key, value in sorted(table.items()):
                family.add_metric([*key, session], value)
            yield family

    def _histograms(self, session: str) -> Iterator[Metric]:
        for histogram, name, help_text in (
            (self.update_time, "autoscaler_update_time_seconds", "Autoscaler update time."),
            (
                self.create_time,
                "autoscaler_worker_create_node_time_seconds",
                "Worker launch time, observed once for each node a launch made.",
            ),
            (
                self.setup_time,
                "autoscaler_worker_update_time_seconds",
                "Worker update time, for successful updates.",
            ),
            (self.planner_time, "launcher_planner_seconds", "The planner's time in a tick."),
        ):
            yield histogram.family(name, help_text, session)


def _counted(failures: Sequence[tuple[float, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, node_type in failures:
        out[node_type] = out.get(node_type, 0) + 1
    return out


STARTED = "autoscaler_started_nodes"
STOPPED = "autoscaler_stopped_nodes"
FAILED_CREATE = "autoscaler_failed_create_nodes"
LAUNCH_EXCEPTIONS = "autoscaler_node_launch_exceptions"
SUCCESSFUL_UPDATES = "autoscaler_successful_updates"
FAILED_UPDATES = "autoscaler_failed_updates"
LOOP_EXCEPTIONS = "autoscaler_update_loop_exceptions"
COUNTERS: tuple[tuple[str, str], ...] = (
    (STARTED, "Number of nodes started."),
    (STOPPED, "Number of nodes stopped."),
    (
        FAILED_CREATE,
        "Number of nodes that failed to be created due to an exception in the node "
        "provider's create_node method.",
    ),
    (LAUNCH_EXCEPTIONS, "Number of exceptions raised while launching nodes."),
    (SUCCESSFUL_UPDATES, "Number of successful worker node updates."),
    (FAILED_UPDATES, "Number of failed worker node updates."),
    (LOOP_EXCEPTIONS, "Number of exceptions raised in the update loop of the autoscaler."),
)
