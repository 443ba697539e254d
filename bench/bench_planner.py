"""Time our autoscaling planner (`launcher.autoscaler.planner.plan`) against the two
schedulers of the installed Ray (2.60): autoscaler v2's `ResourceDemandScheduler.schedule`
and autoscaler v1's `ResourceDemandScheduler.get_nodes_to_launch`, on the same synthetic
snapshots (fixed seed), and print Markdown tables: time per call, the ratio Ray / ours, and
the nodes each one launches. Then how our planner's time grows with 1,000 -> 10,000 ->
100,000 pending bundles (plain mix, many distinct shapes, many placement groups).

    .venv/bin/python bench/bench_planner.py            # full run (about 10 minutes, 2 cores)
    .venv/bin/python bench/bench_planner.py --quick    # a small subset (about a minute)

No Ray cluster is needed: all three are pure Python over in-memory inputs. Every call runs
in a forked child, so a call that exceeds `--timeout` (`--growth-timeout` in the growth
part) is killed and reported as such; Ray v2 needs about 6 minutes at 10,000 bundles x 1,000
nodes, hence the long default.
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import pairwise
from multiprocessing.connection import Connection
from typing import Any

from launcher.autoscaler.decide.planner import Gang, NodeView, Settings, Snapshot, TypeInfo, plan

SEED = 20261122
MAX_WORKERS = 10_000  # per type and in total: nobody is capped
UPSCALING_SPEED = 1e6  # so that no upscaling limit trims a launch
TYPES: dict[str, dict[str, float]] = {
    "cpu4": {"CPU": 4.0},
    "cpu16": {"CPU": 16.0},
    "cpu64": {"CPU": 64.0},
    "gpu": {"CPU": 8.0, "GPU": 1.0},
}
NODE_MIX = {"cpu4": 0.4, "cpu16": 0.3, "cpu64": 0.15, "gpu": 0.15}
SHAPE_MIX: list[tuple[dict[str, float], float]] = [
    ({"CPU": 1.0}, 0.55),
    ({"CPU": 2.0}, 0.2),
    ({"CPU": 4.0}, 0.2),
    ({"CPU": 1.0, "GPU": 1.0}, 0.05),
]
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class Workload:
    """One snapshot in neutral form; each scheduler gets it converted to its own input."""

    label: str  # what it is, for progress lines
    detail: str  # what grows besides the bundles, for the growth table
    nodes: tuple[tuple[str, str, dict[str, float], dict[str, float]], ...]  # id, type, total, free
    pending: tuple[tuple[dict[str, float], int], ...]  # shape, count
    gangs: tuple[tuple[str, tuple[dict[str, float], ...]], ...]  # strategy, bundles
    max_workers: int = MAX_WORKERS
    types: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: TYPES)
    prices: Mapping[str, float] | None = None  # per type, given to our planner only
    node_overhead: float | None = None  # our planner's Settings.node_overhead, if not default

    @property
    def bundles(self) -> int:
        return sum(c for _, c in self.pending) + sum(len(b) for _, b in self.gangs)


def make_nodes(
    rng: random.Random, count: int
) -> list[tuple[str, str, dict[str, float], dict[str, float]]]:
    """`count` running workers of the mixed types, each partially used (whole CPUs/GPUs)."""
    names = list(NODE_MIX)
    kinds = rng.choices(names, weights=[NODE_MIX[n] for n in names], k=count)
    nodes = []
    for i, kind in enumerate(kinds):
        total = dict(TYPES[kind])
        free = {k: float(rng.randint(0, int(v))) for k, v in total.items()}
        nodes.append((f"node-{i:05d}", kind, total, free))
    return nodes


def mixed(bundles: int, nodes: int, seed: int = SEED) -> Workload:
    """The comparison's workload: 4 % of the bundles in placement groups of 4 (all four
    strategies in turn), the rest tasks/actors of four shapes."""
    rng = random.Random(f"{seed}-{bundles}-{nodes}")
    groups = bundles // 100
    gangs = []
    for g in range(groups):
        shape = {"CPU": float(rng.choice((1, 2)))}
        gangs.append((STRATEGIES[g % 4], tuple(dict(shape) for _ in range(4))))
    shapes = rng.choices(
        range(len(SHAPE_MIX)), weights=[w for _, w in SHAPE_MIX], k=bundles - 4 * groups
    )
    pending = tuple((dict(SHAPE_MIX[i][0]), n) for i, n in sorted(Counter(shapes).items()))
    return Workload(
        f"{bundles} bundles x {nodes} nodes",
        f"{groups:,} groups",
        tuple(make_nodes(rng, nodes)),
        pending,
        tuple(gangs),
    )


def distinct_shapes(bundles: int, nodes: int, seed: int = SEED) -> Workload:
    """Tasks only, each shape drawn from ~800 distinct ones (CPU in hundredths, some GPU)."""
    rng = random.Random(f"{seed}-shapes-{bundles}-{nodes}")
    shapes: Counter[tuple[tuple[str, float], ...]] = Counter()
    for _ in range(bundles):
        cpu = rng.randint(1, 400) / 100
        shape = (("CPU", cpu), ("GPU", 1.0)) if rng.random() < 0.1 else (("CPU", cpu),)
        shapes[shape] += 1
    pending = tuple((dict(s), n) for s, n in sorted(shapes.items()))
    return Workload(
        f"{bundles} bundles ({len(shapes)} shapes) x {nodes} nodes",
        f"{len(shapes):,} shapes",
        tuple(make_nodes(rng, nodes)),
        pending,
        (),
    )


def many_groups(bundles: int, nodes: int, seed: int = SEED) -> Workload:
    """Every bundle in a placement group of 4 (strategies in turn), so bundles / 4 groups."""
    rng = random.Random(f"{seed}-groups-{bundles}-{nodes}")
    gangs = []
    for g in range(bundles // 4):
        shape = {"CPU": float(rng.choice((1, 2)))}
        gangs.append((STRATEGIES[g % 4], tuple(dict(shape) for _ in range(4))))
    return Workload(
        f"{bundles} bundles ({len(gangs)} groups) x {nodes} nodes",
        f"{len(gangs):,} groups",
        tuple(make_nodes(rng, nodes)),
        (),
        tuple(gangs),
    )


# --- our planner -------------------------------------------------------------------------


def ours_input(w: Workload) -> Callable[[], Counter[str]]:
    snapshot, settings = ours_setup(w)

    def call() -> Counter[str]:
        return Counter(plan(snapshot, settings).launch)

    return call


def ours_setup(w: Workload) -> tuple[Snapshot, Settings]:
    """Our planner's input for a workload."""
    snapshot = Snapshot(
        nodes=tuple(NodeView(i, t, total=tot, available=free) for i, t, tot, free in w.nodes),
        pending=w.pending,
        gangs=tuple(
            Gang(bundles, strategy, f"pg{n}") for n, (strategy, bundles) in enumerate(w.gangs)
        ),
    )
    settings = Settings(
        types={
            name: TypeInfo(name, res, 0, w.max_workers, (w.prices or {}).get(name))
            for name, res in w.types.items()
        },
        max_workers=w.max_workers,
        upscaling_speed=UPSCALING_SPEED,
    )
    if w.node_overhead is not None:
        settings = replace(settings, node_overhead=w.node_overhead)
    return snapshot, settings


# --- Ray autoscaler v2 -------------------------------------------------------------------


def v2_input(w: Workload) -> Callable[[], Counter[str]]:
    from ray.autoscaler.v2.instance_manager.config import NodeTypeConfig
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
    from ray.autoscaler.v2.schema import AutoscalerInstance
    from ray.autoscaler.v2.utils import ResourceRequestUtil
    from ray.core.generated.autoscaler_pb2 import (  # type: ignore[attr-defined]
        GangResourceRequest,
        NodeState,
        NodeStatus,
        ResourceRequestByCount,
    )
    from ray.core.generated.instance_manager_pb2 import (  # type: ignore[attr-defined]
        Instance,
        NodeKind,
    )

    kind = ResourceRequestUtil.PlacementConstraintType
    instances = [
        AutoscalerInstance(
            cloud_instance_id=f"cloud-{node_id}",
            im_instance=Instance(
                instance_id=node_id,
                cloud_instance_id=f"cloud-{node_id}",
                node_id=node_id,
                instance_type=node_type,
                status=Instance.RAY_RUNNING,
                node_kind=NodeKind.WORKER,
            ),
            ray_node=NodeState(
                node_id=node_id.encode(),
                instance_id=f"cloud-{node_id}",
                ray_node_type_name=node_type,
                total_resources=total,
                available_resources=free,
                status=NodeStatus.RUNNING,
                idle_duration_ms=0,
            ),
        )
        for node_id, node_type, total, free in w.nodes
    ]
    gangs = []
    for n, (strategy, bundles) in enumerate(w.gangs):
        # As Ray's GCS reports placement groups: STRICT_PACK bundles share an affinity
        # label, STRICT_SPREAD bundles an anti-affinity label, PACK/SPREAD have neither.
        constraints = None
        if strategy == "STRICT_PACK":
            constraints = [(kind.AFFINITY, f"_PG_{n:x}", "")]
        elif strategy == "STRICT_SPREAD":
            constraints = [(kind.ANTI_AFFINITY, f"_PG_{n:x}", "")]
        gangs.append(
            GangResourceRequest(
                requests=[ResourceRequestUtil.make(b, constraints) for b in bundles]
            )
        )
    request = SchedulingRequest(
        disable_launch_config_check=True,
        node_type_configs={
            name: NodeTypeConfig(name, 0, w.max_workers, resources=dict(res))
            for name, res in w.types.items()
        },
        max_num_nodes=w.max_workers,
        resource_requests=[
            ResourceRequestByCount(request=ResourceRequestUtil.make(shape), count=count)
            for shape, count in w.pending
        ],
        gang_resource_requests=gangs,
        current_instances=instances,
    )

    def call() -> Counter[str]:
        reply = ResourceDemandScheduler().schedule(request)
        launched: Counter[str] = Counter()
        for launch in reply.to_launch:
            launched[launch.instance_type] += launch.count
        return launched

    return call


# --- Ray autoscaler v1 -------------------------------------------------------------------


class _Provider:
    """The two NodeProvider methods v1's scheduler calls."""

    def __init__(self, nodes: dict[str, str]) -> None:
        from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

        self._tags = {
            n: {TAG_RAY_NODE_KIND: "worker", TAG_RAY_USER_NODE_TYPE: t} for n, t in nodes.items()
        }

    def node_tags(self, node_id: str) -> dict[str, str]:
        return self._tags[node_id]

    def internal_ip(self, node_id: str) -> str:
        return f"ip-{node_id}"


def v1_input(w: Workload) -> Callable[[], Counter[str]]:
    from ray.autoscaler._private.node_provider_availability_tracker import (
        NodeAvailabilitySummary,
    )
    from ray.autoscaler._private.resource_demand_scheduler import ResourceDemandScheduler
    from ray.core.generated.common_pb2 import (  # type: ignore[attr-defined]
        Bundle,
        PlacementStrategy,
    )
    from ray.core.generated.gcs_pb2 import PlacementGroupTableData  # type: ignore[attr-defined]

    node_types = {
        name: {
            "resources": dict(res),
            "min_workers": 0,
            "max_workers": w.max_workers,
            "node_config": {},
        }
        for name, res in w.types.items()
    }
    provider = _Provider({node_id: node_type for node_id, node_type, _, _ in w.nodes})
    demands = [dict(shape) for shape, count in w.pending for _ in range(count)]
    groups = [
        PlacementGroupTableData(
            placement_group_id=n.to_bytes(18, "big"),
            strategy=PlacementStrategy.Value(strategy),
            bundles=[Bundle(unit_resources=b) for b in bundles],
        )
        for n, (strategy, bundles) in enumerate(w.gangs)
    ]
    kwargs: dict[str, Any] = {
        "nodes": [node_id for node_id, _, _, _ in w.nodes],
        "launching_nodes": {},
        "resource_demands": demands,
        "unused_resources_by_ip": {f"ip-{i}": dict(free) for i, _, _, free in w.nodes},
        "pending_placement_groups": groups,
        "max_resources_by_ip": {f"ip-{i}": dict(total) for i, _, total, _ in w.nodes},
        "ensure_min_cluster_size": [],
        "node_availability_summary": NodeAvailabilitySummary(node_availabilities={}),
    }

    def call() -> Counter[str]:
        scheduler = ResourceDemandScheduler(
            provider,  # type: ignore[arg-type]
            node_types,
            w.max_workers,
            head_node_type="head",  # not among the types: these snapshots have no head
            upscaling_speed=UPSCALING_SPEED,
        )
        launched, _ = scheduler.get_nodes_to_launch(**kwargs)
        return Counter({k: v for k, v in launched.items() if v})

    return call


BUILDERS: dict[str, Callable[[Workload], Callable[[], Counter[str]]]] = {
    "ours": ours_input,
    "ray_v2": v2_input,
    "ray_v1": v1_input,
}


# --- running and timing ------------------------------------------------------------------


@dataclass
class Result:
    times: list[float]
    launched: Counter[str] | None
    timeout: float | None = None  # set when a call was killed after this many seconds
    peak_bytes: int | None = None  # Python memory allocated at the peak of one more call

    def time(self) -> str:
        if not self.times:
            return f"> {self.timeout:.0f} s (killed)"
        return seconds(statistics.median(self.times))

    def launches(self) -> str:
        if self.launched is None:
            return "n/a"
        order = [t for t in TYPES if t in self.launched] + sorted(set(self.launched) - set(TYPES))
        per_type = ", ".join(f"{t} {self.launched[t]}" for t in order if self.launched[t])
        return f"{sum(self.launched.values())} ({per_type})" if per_type else "0"


def seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def _child(
    conn: Connection, who: str, w: Workload, repeat: int, budget: float, memory: bool
) -> None:
    logging.disable(logging.CRITICAL)  # Ray's schedulers log warnings on unplaced work
    call = BUILDERS[who](w)  # building each one's input is not timed
    conn.send("ready")
    spent = last = 0.0
    for _ in range(repeat):
        if spent and spent + last > budget:
            break
        gc.collect()
        started = time.perf_counter()
        launched = call()
        last = time.perf_counter() - started
        spent += last
        conn.send((last, dict(launched)))
    if memory:  # one more call, traced (slower), for its peak allocation
        tracemalloc.start()
        call()
        conn.send(("peak", tracemalloc.get_traced_memory()[1]))
        tracemalloc.stop()
    conn.send(None)
    conn.close()


def measure(
    who: str, w: Workload, repeat: int, budget: float, timeout: float, memory: bool = False
) -> Result:
    """Up to `repeat` calls in a forked child, fewer once they have taken `budget` seconds;
    the child is killed if one call takes more than `timeout` seconds."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, who, w, repeat, budget, memory), daemon=True)
    proc.start()
    sender.close()
    times: list[float] = []
    launched: Counter[str] | None = None
    peak: int | None = None
    killed = False
    wait = 600.0  # for the input to be built
    while True:
        if not receiver.poll(wait):
            proc.kill()
            killed = True
            break
        try:
            message = receiver.recv()
        except EOFError:
            break
        if message is None:
            break
        wait = timeout
        if isinstance(message, tuple) and message[0] == "peak":
            peak = message[1]
        elif message != "ready":
            times.append(message[0])
            launched = Counter(message[1])
    proc.join()
    receiver.close()
    return Result(times, launched, timeout if killed else None, peak)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def against_ray(sizes: list[tuple[int, int]], repeat: int, budget: float, timeout: float) -> None:
    rows = []
    for bundles, nodes in sizes:
        w = mixed(bundles, nodes)
        results = {}
        for who in BUILDERS:
            progress(f"  {w.label}: {who} ...")
            results[who] = measure(who, w, repeat, budget, timeout)
        rows.append((w, results))
    print("\n### Time per call (median) and ratio Ray / ours\n")
    print("| pending bundles | nodes | ours | Ray v2 | Ray v1 | v2 / ours | v1 / ours |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w, r in rows:
        print(
            f"| {w.bundles:,} | {len(w.nodes):,} | {r['ours'].time()} | {r['ray_v2'].time()} "
            f"| {r['ray_v1'].time()} | {ratio(r['ray_v2'], r['ours'])} "
            f"| {ratio(r['ray_v1'], r['ours'])} |"
        )
    print("\n### Nodes launched: total (per type)\n")
    print("| pending bundles | nodes | ours | Ray v2 | Ray v1 | ours <= both Ray? |")
    print("| ---: | ---: | --- | --- | --- | --- |")
    for w, r in rows:
        print(
            f"| {w.bundles:,} | {len(w.nodes):,} | {r['ours'].launches()} "
            f"| {r['ray_v2'].launches()} | {r['ray_v1'].launches()} | {no_more(r)} |"
        )


def ratio(ray: Result, ours: Result) -> str:
    if not ours.times:
        return "n/a"
    mine = statistics.median(ours.times)
    if not ray.times:
        return f"> {(ray.timeout or 0) / mine:,.0f}x"
    return f"{statistics.median(ray.times) / mine:,.0f}x"


def no_more(r: dict[str, Result]) -> str:
    ours = r["ours"].launched
    if ours is None:
        return "n/a"
    verdicts = []
    for who, name in (("ray_v2", "v2"), ("ray_v1", "v1")):
        theirs = r[who].launched
        if theirs is None:
            verdicts.append(f"{name}: n/a")
            continue
        diff = sum(ours.values()) - sum(theirs.values())
        verdicts.append(f"{name}: yes" if diff <= 0 else f"{name}: **no, +{diff}**")
    return ", ".join(verdicts)


def growth(counts: list[int], nodes: int, repeat: int, budget: float, timeout: float) -> None:
    print(f"\n### Our planner's time as pending bundles grow ({nodes:,} nodes)\n")
    header = " | ".join(f"{c:,} bundles" for c in counts)
    steps = " | ".join(f"{a:,} -> {b:,}: time x" for a, b in pairwise(counts))
    print(f"| workload | {header} | {steps} |")
    print("| --- |" + " ---: |" * (2 * len(counts) - 1))
    for name, make in (
        ("mixed (4 % in placement groups)", mixed),
        ("many distinct shapes", distinct_shapes),
        ("many placement groups (all bundles)", many_groups),
    ):
        results = []
        details: list[str] = []
        for count in counts:
            w = replace(make(count, nodes), max_workers=10 * max(counts))
            progress(f"  {w.label}: ours ...")
            results.append(measure("ours", w, repeat, budget, timeout))
            if w.detail:
                details.append(w.detail)
        cells = [f"{r.time()}" for r in results]
        factors = []
        for a, b in pairwise(results):
            if a.times and b.times:
                factors.append(f"{statistics.median(b.times) / statistics.median(a.times):.1f}")
            elif a.times:
                factors.append(f"> {(b.timeout or 0) / statistics.median(a.times):.0f}")
            else:
                factors.append("n/a")
        title = f"{name}: {' / '.join(details)}" if details else name
        print(f"| {title} | {' | '.join(cells)} | {' | '.join(factors)} |")


def unpriced(sizes: list[tuple[int, int]], seeds: int, timeout: float, repeat: int) -> None:
    """Nodes launched without prices (on-prem, Kubernetes, most configs), ours against Ray
    v1 and v2, per family: the three above (this file's CPU/GPU types) and, with the cost
    scenarios' real instance sizes (CPU, GPU, memory) but no prices, none, 300 and 200
    placement groups (`--unpriced`)."""
    from planner_cost import FAMILIES, Family, scenario  # next to this file

    makers: list[tuple[str, Callable[[int, int, int], Workload]]] = [
        ("mixed (4 % in groups)", lambda b, n, s: mixed(b, n, SEED + s - 1)),
        ("many distinct shapes", lambda b, n, s: distinct_shapes(b, n, SEED + s - 1)),
        ("many placement groups", lambda b, n, s: many_groups(b, n, SEED + s - 1)),
    ]
    families = [f for f in FAMILIES if not f.config_prices]
    families += [Family(f"{t} + 200 groups", t, 200, False) for t in ("aws", "gcp")]

    def without_prices(family: Family) -> Callable[[int, int, int], Workload]:
        return lambda b, n, s: replace(scenario(family, s, b, n), prices=None)

    makers += [(f"{f.name}, no prices", without_prices(f)) for f in families]
    print("\n### Without prices: nodes launched, ours against Ray\n")
    print(
        "| family | seed | bundles (groups) | nodes | ours | Ray v1 | Ray v2 "
        "| ours <= fewer of Ray? | time ours |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    tally = [0, 0]
    for name, make in makers:
        for bundles, nodes in sizes:
            for seed in range(1, seeds + 1):
                w = make(bundles, nodes, seed)
                r = {}
                for who in BUILDERS:
                    progress(f"  {name} seed {seed} {w.label}: {who} ...")
                    r[who] = measure(who, w, repeat if who == "ours" else 1, 10.0, timeout)
                counts = {
                    k: (v.launched.total() if v.launched is not None else None)
                    for k, v in r.items()
                }
                theirs = [c for k, c in counts.items() if k != "ours" and c is not None]
                ours = counts["ours"]
                if ours is None or not theirs:
                    verdict = "n/a"
                elif ours <= min(theirs):
                    verdict, tally[0] = "yes", tally[0] + 1
                else:
                    verdict, tally[1] = f"**no, +{ours - min(theirs)}**", tally[1] + 1
                cells = " | ".join(
                    "n/a" if counts[k] is None else f"{counts[k]:,}"
                    for k in ("ours", "ray_v1", "ray_v2")
                )
                print(
                    f"| {name} | {seed} | {w.bundles:,} ({len(w.gangs)}) | {len(w.nodes):,} "
                    f"| {cells} | {verdict} | {r['ours'].time()} |",
                    flush=True,
                )
    print(f"\nours <= fewer of Ray's: {tally[0]} yes, {tally[1]} no")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a small subset, about a minute")
    parser.add_argument("--repeat", type=int, default=5, help="calls per scheduler and size")
    parser.add_argument(
        "--budget", type=float, default=10.0, help="stop repeating after this many seconds"
    )
    parser.add_argument(
        "--timeout", type=float, default=420.0, help="kill a call against Ray after this"
    )
    parser.add_argument(
        "--growth-timeout", type=float, default=60.0, help="kill a call of the growth part"
    )
    parser.add_argument(
        "--cost-only", action="store_true", help="only the cost scenarios and the scale run"
    )
    parser.add_argument(
        "--unpriced",
        action="store_true",
        help="only the unpriced families: nodes ours against Ray v1 and v2",
    )
    parser.add_argument(
        "--unpriced-sizes",
        default="",
        help="with --unpriced: BUNDLESxNODES,... (default 1000x50,4000x200; 1000x50 with --quick)",
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per cost scenario family")
    parser.add_argument(
        "--milp-time",
        type=float,
        default=20.0,
        help="seconds per MILP solve in the cost scenarios (0: no MILP; needs highspy)",
    )
    args = parser.parse_args()
    timeout, growth_timeout = args.timeout, args.growth_timeout
    if args.quick:
        sizes = [(b, n) for b in (100, 1000) for n in (10, 100)]
        counts, nodes = [1_000, 10_000], 100
        timeout, growth_timeout = min(timeout, 30.0), min(growth_timeout, 30.0)
    else:
        sizes = [(b, n) for b in (100, 1_000, 10_000) for n in (10, 100, 1_000)]
        counts, nodes = [1_000, 10_000, 100_000], 1_000
    import ray
    from planner_cost import at_scale, cost_scenarios  # next to this file

    print(
        f"seed {SEED}; Ray {ray.__version__}; Python {platform.python_version()}; "
        f"{os.cpu_count()} cores; repeat up to {args.repeat} (median), "
        f"{args.budget:g} s budget; a call is killed after {timeout:g} s "
        f"({growth_timeout:g} s in the growth part)"
    )
    started = time.monotonic()
    if args.unpriced:
        unpriced_sizes = [(1_000, 50)] if args.quick else [(1_000, 50), (4_000, 200)]
        if args.unpriced_sizes:
            pairs = (size.split("x") for size in args.unpriced_sizes.split(","))
            unpriced_sizes = [(int(b), int(n)) for b, n in pairs]
        unpriced(unpriced_sizes, args.seeds, timeout, args.repeat)
        print(f"\n(total {time.monotonic() - started:.0f} s)")
        return
    if not args.cost_only:
        against_ray(sizes, args.repeat, args.budget, timeout)
        growth(counts, nodes, args.repeat, args.budget, growth_timeout)
    cost_sizes = [(1_000, 50)] if args.quick else [(1_000, 50), (4_000, 200)]
    cost_scenarios(args.seeds, cost_sizes, timeout, args.repeat, args.milp_time)
    scale = (10_000, 1_000) if args.quick else (100_000, 10_000)
    at_scale(*scale, growth_timeout, args.repeat)
    print(f"\n(total {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
