"""What a Prometheus scrape of the autoscaler's metrics endpoint costs at 1,000 nodes
(issue 30, part 3), with the state generated in process, and Ray's own exporter at the same
size in the same run.

    .venv/bin/python bench/bench_metrics.py [--nodes 1000] [--repeats 51]

Measured, each the median of `--repeats`:
- ours, rendered: `generate_latest` over our registry (what the endpoint's thread does per
  scrape), and scraped: a real HTTP GET of /metrics from our endpoint on 127.0.0.x;
- ours, per tick: what the daemon adds to each tick for them at that size (`sample_of`,
  `gauges_of` over 1,000 listed nodes and 1,000 Ray nodes, then `set_gauges`);
- Ray's exporter (`AutoscalerPrometheusMetrics`, filled by Ray's own `Monitor.emit_metrics`
  from Ray's summaries) rendered, twice: as Ray's autoscaler fills it (the same node types
  as ours), and as Ray's read-only monitor on our heads filled it before this change (each
  node its own type `node_<id>`: what our heads served at this address until now).
No Ray cluster is needed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client import generate_latest

from bench.common import show_time
from launcher.autoscaler.decide.demand import Demand, RayNode
from launcher.autoscaler.endpoint import MetricsEndpoint
from launcher.autoscaler.metrics import AutoscalerMetrics
from launcher.autoscaler.telemetry import gauges_of, sample_of
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState, NodeStatus

SEED = 20261206
TYPES: dict[str, dict[str, float]] = {
    "head": {"CPU": 8.0},
    "cpu4-spot": {"CPU": 4.0},
    "cpu4": {"CPU": 4.0},
    "cpu16-spot": {"CPU": 16.0},
    "cpu16": {"CPU": 16.0},
    "cpu64": {"CPU": 64.0},
    "gpu-spot": {"CPU": 8.0, "GPU": 1.0},
    "gpu": {"CPU": 8.0, "GPU": 1.0},
}
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
SESSION = "session_2026-12-06_08-00-00_000000_1"


def generated(count: int, rng: random.Random) -> tuple[list[Node], Demand]:
    """`count` listed nodes (a head, the rest workers, a tenth of them setting up) and the
    Ray nodes of those that serve, with pending demand."""
    workers = [t for t in TYPES if t != "head"]
    nodes, ray_nodes = [], []
    for index in range(count):
        node_type = "head" if index == 0 else rng.choice(workers)
        status = NodeStatus.SETTING_UP if rng.random() < 0.1 else NodeStatus.UP_TO_DATE
        ip = f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"
        kind = NodeKind.HEAD if index == 0 else NodeKind.WORKER
        tags = {TAG_STATUS: status.value}
        zone = rng.choice(ZONES)
        nodes.append(Node(f"i-{index:08x}", kind, node_type, ip, NodeState.RUNNING, tags, 0, zone))
        if status is NodeStatus.UP_TO_DATE:
            total = {**TYPES[node_type], "memory": 16e9, "object_store_memory": 4e9}
            ray_nodes.append(RayNode(f"{index:056x}", ip, total, total, 0.0, True))
    pending = tuple(({"CPU": float(rng.choice((1, 2, 4)))}, rng.randint(1, 50)) for _ in range(20))
    return nodes, Demand(pending=pending, nodes=tuple(ray_nodes), session=SESSION)


def ours(nodes: list[Node], demand: Demand, rng: random.Random) -> AutoscalerMetrics:
    """Our metrics after a day of such a cluster: counters and histograms filled too."""
    declared = {name: dict(r) for name, r in TYPES.items()}
    metrics = AutoscalerMetrics(TYPES, (r for d in declared.values() for r in d))
    metrics.set_session(SESSION)
    tick(metrics, nodes, demand, declared)
    reasons = ("below min_workers (0 < 2)", "3 pending bundle(s) of {CPU: 2}", "idle 61 s > 60 s")
    for _ in range(10_000):
        metrics.decision(rng.choice(("launch", "terminate", "fallback")), rng.choice(reasons))
    for name in TYPES:
        metrics.reclaim(name, "preempted")
        metrics.fallback("cpu4", name, 3)
        for zone in ZONES:
            metrics.capacity_failure(name, zone)
        metrics.node_failed(name, time.monotonic())
    for histogram in (metrics.update_time, metrics.planner_time):
        for _ in range(1000):
            metrics.observe(histogram, rng.random())
    metrics.observe(metrics.create_time, 40.0, 1000)
    metrics.observe(metrics.setup_time, 90.0, 1000)
    return metrics


def tick(
    metrics: AutoscalerMetrics,
    nodes: list[Node],
    demand: Demand,
    declared: dict[str, dict[str, float]],
) -> None:
    """What the daemon does for the metrics in a tick (the timeline's sample included)."""
    prices = dict.fromkeys(TYPES, 0.2)
    spot = {name: name.endswith("-spot") for name in TYPES}
    sample = sample_of(time.time(), nodes, [("cpu4", 10)], demand, 0, prices, spot)
    metrics.set_gauges(gauges_of(sample, nodes, demand, declared, 100))


def rays(nodes: list[Node], per_node_types: bool) -> Any:
    """Ray's exporter, filled by Ray's own Monitor.emit_metrics from Ray's summaries of the
    same nodes: by node type, or (Ray's read-only monitor) each node its own type."""
    from ray.autoscaler._private.autoscaler import AutoscalerSummary
    from ray.autoscaler._private.monitor import Monitor
    from ray.autoscaler._private.prom_metrics import AutoscalerPrometheusMetrics
    from ray.autoscaler._private.util import LoadMetricsSummary

    def type_of(node: Node) -> str:
        return f"node_{int(node.id[2:], 16):056x}" if per_node_types else node.node_type

    active: dict[str, int] = {}
    pending = []
    for node in nodes:
        if node.status is NodeStatus.UP_TO_DATE:
            active[type_of(node)] = active.get(type_of(node), 0) + 1
        else:
            pending.append((node.ip, type_of(node), "setting-up"))
    cpus = sum(TYPES[n.node_type]["CPU"] for n in nodes)
    usage = {"CPU": (0.0, cpus), "GPU": (0.0, 100.0)}
    summary = AutoscalerSummary(active, {}, pending, {"cpu4": 10}, [], pending_resources={})
    load = LoadMetricsSummary(usage, [], [], [], [])

    class _Self:
        prom_metrics = AutoscalerPrometheusMetrics(session_name=SESSION)

    types = {type_of(n) for n in nodes}
    Monitor.emit_metrics(_Self(), load, summary, types)  # type: ignore[arg-type]
    return _Self.prom_metrics.registry


def median_s(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    nodes, demand = generated(args.nodes, rng)
    metrics = ours(nodes, demand, rng)
    declared = {name: dict(r) for name, r in TYPES.items()}
    endpoint = MetricsEndpoint(metrics.registry, 0, lambda text: None)
    address = endpoint.serve_on("127.0.0.3")
    if address is None:
        raise SystemExit("bench_metrics: could not serve on 127.0.0.3")

    def scrape() -> bytes:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as reply:
            body: bytes = reply.read()
            return body

    try:
        rows = [
            ("ours: render (generate_latest)", lambda: generate_latest(metrics.registry)),
            ("ours: HTTP scrape of /metrics", scrape),
            ("ours: per tick (sample, gauges)", lambda: tick(metrics, nodes, demand, declared)),
        ]
        ray_typed, ray_per_node = rays(nodes, False), rays(nodes, True)
        rows += [
            ("Ray's exporter, by node type", lambda: generate_latest(ray_typed)),
            ("Ray's read-only monitor (node_<id>)", lambda: generate_latest(ray_per_node)),
        ]
        sizes = [
            len(generate_latest(metrics.registry)),
            len(scrape()),
            0,
            len(generate_latest(ray_typed)),
            len(generate_latest(ray_per_node)),
        ]
        results = [median_s(call, args.repeats) for _, call in rows]
    finally:
        endpoint.close()
    print(f"{args.nodes} nodes ({len(TYPES)} node types), median of {args.repeats}:\n")
    print("| what | time | bytes | / ours rendered |")
    print("|---|---:|---:|---:|")
    for (what, _), seconds, size in zip(rows, results, sizes, strict=True):
        shown = f"{size:,}" if size else "-"
        print(f"| {what} | {show_time(seconds)} | {shown} | {seconds / results[0]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
