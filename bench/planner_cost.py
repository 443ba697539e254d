"""Cost scenarios for `bench_planner.py`: node types of real instance sizes (CPU, GPU and
memory in GiB), priced from the launcher's price table (or by prices a config gives),
partly busy existing nodes, pending bundles of five shapes drawn per seed, with and without
a few hundred placement groups of all four strategies. For each scenario: time, nodes and
hourly cost of ours, Ray v1 and Ray v2, and two LP lower bounds on the cost
(`launcher.autoscaler.plan_bound`): per resource, demand minus free capacity; and per shape,
knowing which bundle shapes fit which node types (`shape_bound`, tighter).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from bench_planner import (
    STRATEGIES,
    Result,
    Workload,
    measure,
    ours_input,
    ours_setup,
    progress,
)

from launcher.autoscaler.decide.packing import Shape, fits, shape_of
from launcher.autoscaler.decide.plan_bound import lower_bound, shape_bound, shortfall
from launcher.autoscaler.decide.planner import plan
from launcher.pricing import load_prices

try:
    import planner_milp
except ImportError:  # highspy missing: the MILP columns say n/a
    planner_milp = None  # type: ignore[assignment]

# Type sets: (provider, instance types). Resources and prices come from the price table.
TYPE_SETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "aws": (
        "aws",
        (
            "m5.xlarge",
            "m5.4xlarge",
            "c5.4xlarge",
            "r5.2xlarge",
            "g4dn.xlarge",
            "g4dn.12xlarge",
            "p3.8xlarge",
        ),
    ),
    "gcp": (
        "gcp",
        (
            "n1-standard-4",
            "n1-standard-16",
            "n1-highmem-8",
            "e2-standard-8",
            "n2-standard-16",
            "g2-standard-4",
            "a2-highgpu-1g",
        ),
    ),
}
CPUS = (0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 8.0)
MEMORY = (1.0, 2.0, 4.0, 4.0, 8.0, 16.0, 24.0)


@dataclass(frozen=True)
class Family:
    name: str
    type_set: str
    groups: int  # placement groups among the bundles
    config_prices: bool  # spot prices given as the config's own prices


FAMILIES = (
    Family("aws", "aws", 0, False),
    Family("aws + groups", "aws", 300, False),
    Family("gcp", "gcp", 0, False),
    Family("gcp + groups", "gcp", 300, False),
    Family("aws spot prices in config + groups", "aws", 300, True),
)


def node_types(family: Family) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    provider, names = TYPE_SETS[family.type_set]
    table = load_prices()
    types, prices = {}, {}
    for name in names:
        machine = table.machine(provider, name)
        assert machine is not None, name
        res = {"CPU": float(machine.vcpus), "memory": float(machine.memory_gib)}
        if machine.gpus:
            res["GPU"] = float(machine.gpus)
        types[name] = res
        spot = machine.price.spot if family.config_prices else None
        prices[name] = spot if spot is not None else machine.price.on_demand
    return types, prices


def shapes(rng: random.Random, types: Mapping[str, Mapping[str, float]]) -> list[dict[str, float]]:
    """Five bundle shapes, each fitting some type; one or two of them with GPUs."""
    out: list[dict[str, float]] = []
    gpus = rng.choice((1, 2))
    while len(out) < 5:
        shape = {"CPU": rng.choice(CPUS), "memory": rng.choice(MEMORY)}
        if len(out) >= 5 - gpus:
            shape["GPU"] = float(rng.choice((1, 1, 1, 2)))
        if any(fits(t, shape) for t in types.values()) and shape not in out:
            out.append(shape)
    return out


def scenario(family: Family, seed: int, bundles: int, nodes: int) -> Workload:
    rng = random.Random(f"cost-{family.name}-{seed}-{bundles}-{nodes}")
    types, prices = node_types(family)
    kinds = list(types)
    existing = []
    for i in range(nodes):
        kind = rng.choice(kinds)
        total = dict(types[kind])
        free = {
            k: float(rng.randint(0, int(v))) if k != "memory" else round(v * rng.random())
            for k, v in total.items()
        }
        existing.append((f"node-{i:05d}", kind, total, free))
    pool = shapes(rng, types)
    weights = [rng.random() + 0.1 for _ in pool]
    gangs = []
    in_groups = 0
    for g in range(family.groups):
        strategy = STRATEGIES[g % 4]
        shape = rng.choices(pool, weights)[0]
        size = rng.randint(2, 6)
        if strategy == "STRICT_PACK":  # the sum must fit one node of some type
            while size > 1 and not any(
                fits(t, {k: v * size for k, v in shape.items()}) for t in types.values()
            ):
                size -= 1
        gangs.append((strategy, tuple(dict(shape) for _ in range(size))))
        in_groups += size
    drawn = Counter(rng.choices(range(len(pool)), weights, k=max(0, bundles - in_groups)))
    pending = tuple((dict(pool[i]), n) for i, n in sorted(drawn.items()))
    return Workload(
        f"{family.name} seed {seed}: {bundles} bundles x {nodes} nodes",
        f"{family.groups} groups",
        tuple(existing),
        pending,
        tuple(gangs),
        types=types,
        prices=prices,
    )


def bound(w: Workload) -> float | None:
    """The LP lower bound on the hourly cost of the nodes to launch for `w`'s demand."""
    demand: Counter[str] = Counter()
    every = [(s, n) for s, n in w.pending] + [(b, 1) for _, g in w.gangs for b in g]
    for shape, count in every:
        if any(fits(t, shape) for t in w.types.values()):  # infeasible demand launches nothing
            demand.update({k: v * count for k, v in shape.items()})
    free: Counter[str] = Counter()
    for _, _, _, available in w.nodes:
        free.update(available)
    result = lower_bound(shortfall(demand, free), w.types, w.prices or {})
    return None if result is None else result.cost


def shaped_bound(w: Workload, max_nodes: int | None = None) -> float | None:
    """The tighter bound that knows which shapes fit which types (`shape_bound`); a
    STRICT_PACK group counts as one bundle of its sum. With `max_nodes`: the least any plan
    launching at most that many nodes can cost (inf when none can)."""
    demand: Counter[Shape] = Counter()
    for shape, count in w.pending:
        demand[shape_of(shape)] += count
    for strategy, bundles in w.gangs:
        if strategy == "STRICT_PACK":
            total: Counter[str] = Counter()
            for b in bundles:
                total.update(b)
            demand[shape_of(total)] += 1
        else:
            demand.update(shape_of(b) for b in bundles)
    feasible = {s: n for s, n in demand.items() if any(fits(t, dict(s)) for t in w.types.values())}
    free: Counter[str] = Counter()
    for _, _, _, available in w.nodes:
        free.update(available)
    return shape_bound(feasible, free, w.types, w.prices or {}, max_nodes)


def cost(w: Workload, r: Result) -> float | None:
    if r.launched is None or w.prices is None:
        return None
    return sum(w.prices[t] * n for t, n in r.launched.items())


@dataclass
class Row:
    family: str
    seed: int
    workload: Workload
    results: dict[str, Result]
    costs: dict[str, float | None]
    nodes: dict[str, int | None]
    lp: float | None
    shaped: float | None  # the bound that knows which shapes fit which types
    capped: float | None  # ... for plans launching no more nodes than the fewer of Ray's
    cheapest: tuple[int, float | None]  # ours with node_overhead 0: nodes, cost
    milp: Milp | None = None


@dataclass(frozen=True)
class Milp:
    best: planner_milp.Answer  # the least cost of any plan
    capped: planner_milp.Answer | None  # ... launching no more nodes than the fewer of Ray's
    mine: planner_milp.Answer | None  # ... launching no more nodes than ours
    patterns: int
    seconds: float  # building and solving both


def run_scenario(
    family: Family,
    seed: int,
    bundles: int,
    nodes: int,
    timeout: float,
    repeat: int,
    milp_time: float = 0.0,
) -> Row:
    w = scenario(family, seed, bundles, nodes)
    results = {}
    for who in ("ours", "ray_v1", "ray_v2"):
        progress(f"  {w.label}: {who} ...")
        results[who] = measure(who, w, repeat if who == "ours" else 1, 10.0, timeout)
    counts = {who: None if r.launched is None else r.launched.total() for who, r in results.items()}
    fewest = _best_of_ray(counts)
    costs = {who: cost(w, r) for who, r in results.items()}
    milp = None
    if milp_time > 0 and planner_milp is not None:
        progress(f"  {w.label}: MILP ...")
        launched = counts["ours"]
        milp = _milp(w, None if fewest is None else int(fewest), launched, milp_time)
        for who, value in costs.items():  # no plan costs less than the bound: else a bug
            if value is not None and value < milp.best.bound - 1e-6 * max(1.0, value):
                progress(f"  !! {who} costs {value:.4f} < the MILP bound {milp.best.bound:.4f}")
    return Row(
        family.name,
        seed,
        w,
        results,
        costs,
        counts,
        bound(w),
        shaped_bound(w),
        None if fewest is None else shaped_bound(w, int(fewest)),
        _by_price_alone(w),
        milp,
    )


def _milp(w: Workload, fewest: int | None, ours: int | None, time_limit: float) -> Milp:
    """The integer optimum, and those with at most `fewest` and `ours` new nodes (HiGHS in
    forked children, `time_limit` seconds per solve)."""
    assert planner_milp is not None
    started = time.perf_counter()
    model = planner_milp.Model(planner_milp.problem_of(w))
    known = plan(*ours_setup(w), record=True).placements  # HiGHS starts from our plan

    def solve(cap: int | None) -> planner_milp.Answer:
        assert planner_milp is not None
        return planner_milp.solve_guarded(model, cap, time_limit, known)

    best = solve(None)
    capped = None if fewest is None else solve(fewest)
    mine = None if ours is None else solve(ours)
    return Milp(best, capped, mine, model.patterns, time.perf_counter() - started)


def _by_price_alone(w: Workload) -> tuple[int, float | None]:
    """Our plan with node_overhead 0 (cheapest, most nodes): nodes and cost, untimed."""
    launched = ours_input(replace(w, node_overhead=0.0))()
    return launched.total(), cost(w, Result([], launched))


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else float("inf")
    return a / b


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _best_of_ray(values: Mapping[str, float | int | None]) -> float | None:
    theirs = [v for k, v in values.items() if k != "ours" and v is not None]
    return min(theirs) if theirs else None


def report(rows: list[Row]) -> None:
    print("\n### Cost scenarios: nodes launched and hourly cost ($) per scenario\n")
    print(
        "| family | seed | bundles (groups) | nodes | time ours / v1 / v2 "
        "| nodes ours / v1 / v2 | cost ours / v1 / v2 | LP bound | ours / LP "
        "| shape LP | ours / shape LP | shape LP with <= fewer of Ray's nodes "
        "| ours <= fewer nodes? | ours <= cheaper? | MILP opt (gap) | ours / MILP "
        "| MILP with <= fewer of Ray's nodes | both targets reachable? "
        "| MILP with <= our nodes | ours / that |"
    )
    print(
        "| --- | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: "
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"
    )
    for row in rows:
        w, r, c, n = row.workload, row.results, row.costs, row.nodes
        times = " / ".join(r[k].time() for k in ("ours", "ray_v1", "ray_v2"))
        counts = " / ".join(str(n[k]) if n[k] is not None else "n/a" for k in n)
        money = " / ".join(_fmt(c[k]) for k in ("ours", "ray_v1", "ray_v2"))
        fewest, cheapest = _best_of_ray(n), _best_of_ray(c)
        fewer = _verdict(n["ours"], fewest, lambda d: f"+{d:.0f}")
        cheaper = _verdict(c["ours"], cheapest, lambda d: f"+${d:.2f}")
        print(
            f"| {row.family} | {row.seed} | {w.bundles:,} ({len(w.gangs)}) | {len(w.nodes):,} "
            f"| {times} | {counts} | {money} | {_fmt(row.lp)} "
            f"| {_fmt(_ratio(c['ours'], row.lp), 3)} | {_fmt(row.shaped)} "
            f"| {_fmt(_ratio(c['ours'], row.shaped), 3)} | {_capped(row.capped, cheapest)} "
            f"| {fewer} | {cheaper} | {_milp_cells(row)} |"
        )
    print("\n### Per family: ratios (mean, worst) over its scenarios\n")
    print(
        "| family | scenarios | nodes ours / fewer of Ray | cost ours / cheaper of Ray "
        "| cost ours / LP | cost Ray v1 / LP | cost Ray v2 / LP | cost ours / shape LP "
        "| node_overhead 0: nodes / fewer of Ray | node_overhead 0: cost / shape LP "
        "| cost ours / MILP | node_overhead 0: cost / MILP | cost ours / MILP with <= our nodes "
        "| both targets: yes / no / unknown |"
    )
    print("| --- | ---: |" + " --- |" * 12)
    for family in dict.fromkeys(row.family for row in rows):
        mine = [row for row in rows if row.family == family]
        cells = [
            _summary([_ratio(row.nodes["ours"], _best_of_ray(row.nodes)) for row in mine]),
            _summary([_ratio(row.costs["ours"], _best_of_ray(row.costs)) for row in mine]),
            *(_summary([_ratio(row.costs[k], row.lp) for row in mine]) for k in row.costs),
            _summary([_ratio(row.costs["ours"], row.shaped) for row in mine]),
            _summary([_ratio(row.cheapest[0], _best_of_ray(row.nodes)) for row in mine]),
            _summary([_ratio(row.cheapest[1], row.shaped) for row in mine]),
            _summary([_ratio(row.costs["ours"], _optimum(row.milp)) for row in mine]),
            _summary([_ratio(row.cheapest[1], _optimum(row.milp)) for row in mine]),
            _summary([_ratio(row.costs["ours"], _optimum(row.milp, True)) for row in mine]),
            _tally([_both(row) for row in mine]),
        ]
        print(f"| {family} | {len(mine)} | {' | '.join(cells)} |")
    solved = [row.milp for row in rows if row.milp is not None]
    if solved:
        columns = [m.best.columns for m in solved]
        optimal = sum(m.best.achievable and (m.best.gap or 0.0) < 1e-7 for m in solved)
        print(
            f"\nMILP: {sum(m.seconds for m in solved):.0f} s for {len(solved)} scenarios "
            f"(building the model and its three solves; {min(columns):,} to {max(columns):,} "
            f"columns); the least cost proven optimal on {optimal}."
        )


def _optimum(milp: Milp | None, ours: bool = False) -> float | None:
    """The least cost of a real plan the MILP found (the optimum when its gap is 0); with
    `ours`, of one launching no more nodes than ours."""
    answer = None if milp is None else milp.mine if ours else milp.best
    if answer is None or not answer.achievable:
        return None
    return answer.cost


def _both(row: Row) -> str | None:
    """Whether some plan launches no more nodes than the fewer of Ray's and costs no more
    than the cheaper of Ray's: "yes" when one of the three plans does (it is the witness) or
    the node-capped MILP finds one; "no" when that MILP's bound proves none does."""
    fewest, cheapest = _best_of_ray(row.nodes), _best_of_ray(row.costs)
    if fewest is None or cheapest is None:
        return None
    for who, nodes in row.nodes.items():
        value = row.costs[who]
        if nodes is None or value is None:
            continue
        if nodes <= fewest and value <= cheapest + 1e-9:
            return "yes"
    if row.milp is None or row.milp.capped is None or planner_milp is None:
        return None
    return planner_milp.both_targets(row.milp.capped, cheapest)


def _tally(verdicts: list[str | None]) -> str:
    known = Counter(v for v in verdicts if v is not None)
    if not known:
        return "n/a"
    return f"{known['yes']} / {known['no']} / {known['unknown']}"


def _milp_cells(row: Row) -> str:
    """The MILP columns: optimum (gap), ours / optimum, the optimum with the fewer of Ray's
    nodes, whether a plan meets both of Ray's marks, the optimum with our node count and
    ours / that (what our cost is off by, our node count given)."""
    milp, ours = row.milp, row.costs["ours"]
    if milp is None:
        return " | ".join(["n/a"] * 6)
    best = milp.best
    ratio = _versus(ours, best)
    if ours is not None and ours < best.bound - 1e-6 * max(1.0, ours):
        ratio = f"**{ratio}: below the bound**"
    both = _both(row)
    verdict = "n/a" if both is None else ("**no**" if both == "no" else both)
    capped = "n/a" if milp.capped is None else _answer(milp.capped)
    mine, versus = "n/a", "n/a"
    if milp.mine is not None:
        mine, versus = _answer(milp.mine), _versus(ours, milp.mine)
    return f"{_answer(best)} | {ratio} | {capped} | {verdict} | {mine} | {versus}"


def _versus(ours: float | None, a: planner_milp.Answer) -> str:
    """Our cost over an answer's: over its plan's cost, and "<= x" over its bound (the most
    ours can be off) when the plan is not proven optimal or none was found."""
    off = _fmt(_ratio(ours, a.bound), 3)
    if not a.achievable:
        return f"<= {off}"
    if (a.gap or 0.0) >= 1e-7:
        return f"{_fmt(_ratio(ours, a.cost), 3)} (<= {off})"
    return _fmt(_ratio(ours, a.cost), 3)


def _answer(a: planner_milp.Answer) -> str:
    """An optimum with its gap and node count, or the bound alone when no real plan was
    found (and what was relaxed)."""
    if a.bound == float("inf"):
        return "none fit"
    note = f"; {a.relaxed} relaxed" if a.relaxed else ""
    killed = f"; {a.status}" if a.status.startswith("killed") else ""
    if not a.achievable or a.cost is None:
        return f">= {a.bound:.2f} (no plan found{note}{killed})"
    gap = a.gap or 0.0
    shown = "0 %" if gap < 1e-7 else f"{100 * gap:.2f} %, >= {a.bound:.2f}"
    return f"{a.cost:.2f} ({shown}; {a.nodes} nodes{note}{killed})"


def _capped(value: float | None, cheapest: float | None) -> str:
    """The node-capped bound, marked when it proves no plan is both as small and as cheap."""
    if value is None:
        return "n/a"
    if value == float("inf"):
        return "none fit"
    mark = " (**both impossible**)" if cheapest is not None and value > cheapest + 1e-6 else ""
    return f"{value:.2f}{mark}"


def _verdict(ours: float | None, theirs: float | None, show: Callable[[float], str]) -> str:
    if ours is None or theirs is None:
        return "n/a"
    return "yes" if ours <= theirs + 1e-9 else f"**no, {show(ours - theirs)}**"


def _summary(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    return f"{statistics.mean(known):.3f}, {max(known):.3f}"


def cost_scenarios(
    seeds: int,
    sizes: list[tuple[int, int]],
    timeout: float,
    repeat: int,
    milp_time: float = 0.0,
) -> list[Row]:
    rows = [
        run_scenario(family, seed, bundles, nodes, timeout, repeat, milp_time)
        for family in FAMILIES
        for bundles, nodes in sizes
        for seed in range(1, seeds + 1)
    ]
    report(rows)
    return rows


def at_scale(bundles: int, nodes: int, timeout: float, repeat: int) -> None:
    """Our planner alone on one large priced scenario of each family: time and memory."""
    print(f"\n### Our planner at {bundles:,} bundles x {nodes:,} nodes (priced scenarios)\n")
    print("| family | groups | time (median) | peak memory of a call | nodes | cost / LP |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for family in FAMILIES:
        w = scenario(family, 1, bundles, nodes)
        w = Workload(
            w.label, w.detail, w.nodes, w.pending, w.gangs, 10 * bundles, w.types, w.prices
        )
        progress(f"  {w.label}: ours ...")
        r = measure("ours", w, repeat, 10.0, timeout, memory=True)
        peak = "n/a" if r.peak_bytes is None else f"{r.peak_bytes / 2**20:.0f} MiB"
        launched = "n/a" if r.launched is None else f"{r.launched.total():,}"
        ratio = _ratio(cost(w, r), bound(w))
        print(
            f"| {family.name} | {len(w.gangs)} | {r.time()} | {peak} | {launched} "
            f"| {_fmt(ratio, 3)} |"
        )
