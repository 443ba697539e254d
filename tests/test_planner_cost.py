"""Cost-aware planning checked from the outside: every bundle the planner calls placeable is
re-packed, where the plan put it, into the free capacity of existing nodes and the capacity
of the nodes it launches (no node over-committed, STRICT_SPREAD on distinct nodes,
STRICT_PACK on one node, max_workers respected), on random scenarios; and the LP lower
bound is exact on small cases solved by hand."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.autoscaler.decide.packing import EPS
from launcher.autoscaler.decide.plan_bound import lower_bound, shape_bound, shortfall
from launcher.autoscaler.decide.plan_tidy import cheaper_type
from launcher.autoscaler.decide.planner import (
    Gang,
    NodeView,
    Plan,
    Settings,
    Snapshot,
    TypeInfo,
    plan,
)

TYPES = (
    TypeInfo("m4", {"CPU": 4, "memory": 16}, 0, 6, price=0.19),
    TypeInfo("m16", {"CPU": 16, "memory": 64}, 0, 4, price=0.77),
    TypeInfo("c16", {"CPU": 16, "memory": 32}, 0, 5, price=0.68),
    TypeInfo("r8", {"CPU": 8, "memory": 64}, 0, 5, price=0.50),
    TypeInfo("g1", {"CPU": 4, "memory": 16, "GPU": 1}, 0, 6, price=0.53),
    TypeInfo("g4", {"CPU": 48, "memory": 192, "GPU": 4}, 0, 2, price=3.91),
)
SHAPES = (
    {"CPU": 1.0, "memory": 2.0},
    {"CPU": 4.0, "memory": 4.0},
    {"CPU": 1.0, "memory": 12.0},
    {"CPU": 2.0, "memory": 8.0},
    {"CPU": 2.0, "memory": 4.0, "GPU": 1.0},
)
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, Settings]:
    # Prices on every type, none, or some (the others unpriced).
    priced = draw(st.sampled_from(("all", "none", "some")))
    keep = {t.name: priced == "all" or (priced == "some" and draw(st.booleans())) for t in TYPES}
    types = {
        t.name: t if keep[t.name] else TypeInfo(t.name, t.resources, 0, t.max_workers)
        for t in TYPES
    }
    # A running head, so upscaling_speed (huge) rather than the minimum burst limits launches.
    nodes = [NodeView("head", "m4", is_head=True, total={"CPU": 2}, available={})]
    for i in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(sorted(types)))
        total = dict(types[kind].resources)
        free = {k: float(draw(st.integers(0, int(v)))) for k, v in total.items()}
        nodes.append(NodeView(f"n{i}", kind, total=total, available=free))
    pending = tuple(
        (dict(SHAPES[s]), n)
        for s, n in draw(
            st.dictionaries(st.integers(0, len(SHAPES) - 1), st.integers(1, 40))
        ).items()
    )
    gangs = tuple(
        Gang(tuple(dict(SHAPES[s]) for _ in range(size)), STRATEGIES[g % 4], f"g{g}")
        for g, (s, size) in enumerate(
            draw(
                st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.integers(1, 5)), max_size=8)
            )
        )
    )
    cap = draw(st.integers(3, 25))
    overhead = draw(st.sampled_from((0.0, 1.0)))
    config = Settings(types, cap, upscaling_speed=1e6, node_overhead=overhead)
    return Snapshot(tuple(nodes), pending, gangs), config


def _left_waiting(result: Plan) -> tuple[set[str], Counter[tuple[tuple[str, float], ...]]]:
    """Groups the plan says wait or are infeasible, and task bundles left waiting per shape."""
    groups: set[str] = set()
    tasks: Counter[tuple[tuple[str, float], ...]] = Counter()
    for d in result.decisions:
        if d.action not in ("wait", "infeasible"):
            continue
        if m := re.search(r"placement group (\S+) ", d.reason):
            groups.add(m.group(1))
        elif m := re.match(r"(\d+) pending bundle\(s\) of \{(.*)\}", d.reason):
            shape = tuple(sorted((k, float(v)) for k, v in re.findall(r"(\w+): ([\d.]+)", m[2])))
            tasks[shape] += int(m[1])
    return groups, tasks


def _check(snapshot: Snapshot, config: Settings, result: Plan) -> None:
    types = config.types
    # Capacity: existing nodes offer what they have free, new nodes their (final) type's.
    capacity: dict[tuple[str | None, int], dict[str, float]] = {
        (n.id, -1): dict(n.available) for n in snapshot.nodes
    }
    new_types: dict[int, str] = {}
    used: dict[tuple[str | None, int], Counter[str]] = defaultdict(Counter)
    nodes_of_group: dict[int, list[tuple[str | None, int]]] = defaultdict(list)
    placed_tasks: Counter[tuple[tuple[str, float], ...]] = Counter()
    for p in result.placements:
        key = (p.node_id, p.new)
        if p.node_id is None:
            assert new_types.setdefault(p.new, p.node_type) == p.node_type
            capacity[key] = dict(types[p.node_type].resources)
        used[key].update({k: v * p.count for k, v in p.request.items()})
        if p.group >= 0:
            nodes_of_group[p.group].extend([key] * p.count)
        else:
            placed_tasks[tuple(sorted(p.request.items()))] += p.count
    for key, amounts in used.items():
        for resource, amount in amounts.items():
            assert amount <= capacity[key].get(resource, 0.0) + EPS, (key, resource)
    # What is launched is what placements use (and min_workers, none here), within limits.
    assert Counter(new_types.values()) == Counter(result.launch)
    workers = [n for n in snapshot.nodes if not n.is_head]
    existing = Counter(n.node_type for n in workers)
    for name, count in result.launch.items():
        assert existing[name] + count <= types[name].max_workers
    assert len(workers) + sum(result.launch.values()) <= max(config.max_workers, len(workers))
    # Groups: placed whole, or said to wait; strict strategies honoured.
    waiting_groups, waiting_tasks = _left_waiting(result)
    for number, gang in enumerate(snapshot.gangs):
        where = nodes_of_group.get(number, [])
        if gang.name in waiting_groups:
            assert where == []
            continue
        if gang.strategy == "STRICT_PACK":
            assert len(where) == 1
        else:
            assert len(where) == len(gang.bundles)
        if gang.strategy == "STRICT_SPREAD":
            assert len(set(where)) == len(where)
    # Tasks: every pending bundle is placed or said to wait.
    pending: Counter[tuple[tuple[str, float], ...]] = Counter()
    for request, count in snapshot.pending:
        pending[tuple(sorted((k, float(v)) for k, v in request.items()))] += count
    for shape, count in pending.items():
        assert placed_tasks[shape] + waiting_tasks[shape] == count, shape


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_placeable_bundle_fits_free_and_launched_capacity(
    case: tuple[Snapshot, Settings],
) -> None:
    snapshot, config = case
    result = plan(snapshot, config, record=True)
    _check(snapshot, config, result)
    assert plan(snapshot, config).launch == result.launch  # recording changes nothing


def test_a_partly_used_last_node_is_resized_to_a_cheaper_type() -> None:
    # 18 {CPU: 1, memory: 2}: one c16 ($0.68) takes 16, and the 2 left need only an m4.
    types = {t.name: t for t in TYPES}
    head = NodeView("head", "m4", is_head=True, total={"CPU": 2}, available={})
    result = plan(
        Snapshot((head,), pending=(({"CPU": 1, "memory": 2}, 18),)),
        Settings(types, 20, upscaling_speed=1e6),
        record=True,
    )
    assert result.launch == {"c16": 1, "m4": 1}
    assert sum(d.count for d in result.decisions if d.action == "launch") == 2


def test_cheaper_type_keeps_cpu_work_off_gpu_types() -> None:
    caps = {"gpu": {"CPU": 8, "GPU": 1}, "cpu": {"CPU": 8}, "big": {"CPU": 32}}
    prices = {"gpu": 0.3, "cpu": 0.4, "big": 1.6}
    assert cheaper_type({"CPU": 6}, "big", caps, prices, caps) == "cpu"
    assert cheaper_type({"CPU": 6, "GPU": 0}, "cpu", caps, prices, caps) is None
    assert cheaper_type({"CPU": 6}, "big", caps, {"big": 1.6}, caps) is None  # unpriced


def test_lower_bound_is_the_lp_optimum() -> None:
    caps = {"c": {"CPU": 16, "memory": 32}, "r": {"CPU": 8, "memory": 64}}
    prices = {"c": 0.68, "r": 0.50}
    # CPU only: c at 0.0425 per CPU beats r at 0.0625: 10 c nodes.
    assert abs(lower_bound({"CPU": 160}, caps, prices).cost - 6.8) < 1e-9  # type: ignore[union-attr]
    # 160 CPU and 640 GiB: both tight, 16c + 8r = 160, 32c + 64r = 640 -> c = r = 20/3.
    bound = lower_bound({"CPU": 160, "memory": 640}, caps, prices)
    assert bound is not None and abs(bound.cost - 20 / 3 * (0.68 + 0.50)) < 1e-9
    assert lower_bound({"GPU": 1}, caps, prices) is None
    assert lower_bound({}, caps, prices).cost == 0  # type: ignore[union-attr]
    assert shortfall({"CPU": 10, "memory": 4}, {"CPU": 4, "memory": 8}) == {"CPU": 6}


def test_a_bigger_type_of_the_same_price_per_bundle_is_preferred_and_the_tail_downsized() -> None:
    # Price linear in size (0.19 for 4 CPUs, 0.76 for 16; per CPU they differ by float
    # noise): 34 {CPU: 1, memory: 4} take two n16 and the last 2 bundles one n4.
    types = {
        "n4": TypeInfo("n4", {"CPU": 4, "memory": 15}, 0, 20, price=0.19),
        "n16": TypeInfo("n16", {"CPU": 16, "memory": 60}, 0, 20, price=0.76),
    }
    head = NodeView("head", "n4", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 1, "memory": 3.5}, 34),))
    config = Settings(types, 20, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"n16": 2, "n4": 1}
    _check(snapshot, config, result)


def test_cpu_work_shares_a_gpu_node_when_that_costs_less_than_nodes_apart() -> None:
    # 4 GPU bundles and 11 {CPU: 4, memory: 8}: apart, 4 g1 ($2.12) and 3 c16 ($2.04, the
    # GPU nodes' 3 spare CPUs hold none); together one g4 ($3.91) holds them all.
    types = {t.name: t for t in TYPES}
    head = NodeView("head", "m4", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot(
        (head,),
        pending=(({"CPU": 1, "memory": 2, "GPU": 1}, 4), ({"CPU": 4, "memory": 8}, 11)),
    )
    config = Settings(types, 20, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"g4": 1}
    _check(snapshot, config, result)
    # CPU work alone still never gets a GPU node.
    alone = plan(Snapshot((head,), pending=(({"CPU": 4, "memory": 8}, 11),)), config)
    assert "g4" not in alone.launch and "g1" not in alone.launch


def test_a_group_only_a_gpu_type_holds_is_placed_first_and_shares_its_gpu() -> None:
    # A GPU group, then a STRICT_PACK sum (72 GiB) that only the big GPU type holds: placed
    # first, its node's GPU takes the GPU bundle, so one node instead of two.
    types = {
        "cpu8": TypeInfo("cpu8", {"CPU": 8, "memory": 32}, 0, 10, price=0.27),
        "g4": TypeInfo("g4", {"CPU": 4, "memory": 16, "GPU": 1}, 0, 10, price=0.71),
        "a12": TypeInfo("a12", {"CPU": 12, "memory": 85, "GPU": 1}, 0, 10, price=3.67),
    }
    head = NodeView("head", "cpu8", is_head=True, total={"CPU": 2}, available={})
    gangs = (
        Gang(({"CPU": 1, "memory": 2, "GPU": 1},), "PACK", "gpu"),
        Gang(({"CPU": 1, "memory": 24},) * 3, "STRICT_PACK", "big"),
    )
    snapshot = Snapshot((head,), gangs=gangs)
    config = Settings(types, 10, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"a12": 1}
    _check(snapshot, config, result)


def test_shape_bound_knows_which_shapes_fit_which_types() -> None:
    caps = {
        "c": {"CPU": 16, "memory": 32},
        "r": {"CPU": 8, "memory": 64},
        "g1": {"CPU": 4, "memory": 16, "GPU": 1},
        "g4": {"CPU": 48, "memory": 192, "GPU": 4},
    }
    prices = {"c": 0.68, "r": 0.50, "g1": 0.53, "g4": 3.91}
    big = (("CPU", 1.0), ("memory", 40.0))  # one per r node, none on c
    # Per resource, 10 CPUs and 400 GiB cost 6.25 r nodes; per shape, 10 r nodes.
    assert abs(lower_bound({"CPU": 10, "memory": 400}, caps, prices).cost - 3.125) < 1e-9  # type: ignore[union-attr]
    assert abs((shape_bound({big: 10}, {}, caps, prices) or 0) - 5.0) < 1e-6
    # Free capacity that fits the shape takes some of them.
    assert abs((shape_bound({big: 10}, {"CPU": 5, "memory": 200}, caps, prices) or 0) - 2.5) < 1e-6
    # A 2-GPU bundle fits only g4 (2 per node), never two g1.
    two = (("CPU", 1.0), ("GPU", 2.0))
    assert abs((shape_bound({two: 4}, {}, caps, prices) or 0) - 2 * 3.91) < 1e-6
    assert abs(lower_bound({"CPU": 4, "GPU": 8}, caps, prices).cost - 8 * 0.53) < 1e-9  # type: ignore[union-attr]
    # The plain CPU case agrees with the shape-blind bound.
    one = (("CPU", 1.0),)
    assert abs((shape_bound({one: 160}, {}, caps, prices) or 0) - 6.8) < 1e-6
    assert shape_bound({(("TPU", 1.0),): 1}, {}, caps, prices) is None


def test_node_overhead_trades_a_little_money_for_fewer_nodes() -> None:
    # small is cheaper per CPU (0.0475 vs 0.05): by price alone 8 small for 32 one-CPU
    # bundles ($1.52); with each node charged the cheapest type's price, 2 big ($1.60).
    types = {
        "small": TypeInfo("small", {"CPU": 4}, 0, 20, price=0.19),
        "big": TypeInfo("big", {"CPU": 16}, 0, 20, price=0.80),
    }
    head = NodeView("head", "small", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 1}, 32),))
    cheapest = plan(snapshot, Settings(types, 20, upscaling_speed=1e6, node_overhead=0.0))
    assert cheapest.launch == {"small": 8}
    fewer = Settings(types, 20, upscaling_speed=1e6)
    assert fewer.node_overhead == 1.0
    result = plan(snapshot, fewer, record=True)
    assert result.launch == {"big": 2}
    _check(snapshot, fewer, result)


def test_shape_bound_with_a_node_cap() -> None:
    caps = {"small": {"CPU": 4}, "big": {"CPU": 16}}
    prices = {"small": 0.19, "big": 0.80}
    one = (("CPU", 1.0),)
    assert abs((shape_bound({one: 32}, {}, caps, prices) or 0) - 8 * 0.19) < 1e-6
    assert abs((shape_bound({one: 32}, {}, caps, prices, max_nodes=2) or 0) - 1.6) < 1e-6
    # 4 nodes: 8/3 small and 4/3 big (fractional) is the least.
    capped = shape_bound({one: 32}, {}, caps, prices, max_nodes=4) or 0
    assert abs(capped - (0.19 * 8 / 3 + 0.80 * 4 / 3)) < 1e-6
    assert shape_bound({one: 32}, {}, caps, prices, max_nodes=1) == float("inf")


def test_a_free_type_is_launched_before_priced_ones() -> None:
    # On-prem machines priced 0 beside a cloud type: the free ones first, then the cloud.
    types = {
        "onprem": TypeInfo("onprem", {"CPU": 4}, 0, 2, price=0.0),
        "cloud": TypeInfo("cloud", {"CPU": 8}, 0, 10, price=0.4),
    }
    head = NodeView("head", "onprem", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 4}, 6),))
    config = Settings(types, 20, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"onprem": 2, "cloud": 2}
    _check(snapshot, config, result)


def test_a_shape_only_an_unpriced_type_holds_still_gets_it() -> None:
    # Prices for some types only: GPU work that only the unpriced type holds launches it.
    types = {
        "cpu": TypeInfo("cpu", {"CPU": 8}, 0, 10, price=0.4),
        "gpu": TypeInfo("gpu", {"CPU": 8, "GPU": 1}, 0, 10),
    }
    head = NodeView("head", "cpu", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 1, "GPU": 1}, 2), ({"CPU": 4}, 2)))
    config = Settings(types, 20, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"gpu": 2}  # the CPU bundles take their spare CPUs
    _check(snapshot, config, result)


def test_cpu_work_gets_the_cpu_type_even_when_only_the_gpu_type_is_priced() -> None:
    # Found in review: the priced mix dropped the unpriced CPU type before the CPU-only
    # rule, so CPU work launched the GPU type.
    types = {
        "cpu": TypeInfo("cpu", {"CPU": 8}, 0, 10),
        "gpu": TypeInfo("gpu", {"CPU": 8, "GPU": 1}, 0, 10, price=1.0),
    }
    head = NodeView("head", "cpu", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 1}, 4),))
    config = Settings(types, 10, upscaling_speed=1e6)
    result = plan(snapshot, config, record=True)
    assert result.launch == {"cpu": 1}
    _check(snapshot, config, result)


def test_without_prices_placement_groups_keep_ray_s_order() -> None:
    # max_workers leaves room for one node: the older group gets it, as before the priced
    # group order (a newer group must not take the room an older one waits for).
    types = {
        "cpu": TypeInfo("cpu", {"CPU": 8}, 0, 10),
        "gpu": TypeInfo("gpu", {"CPU": 8, "GPU": 1}, 0, 10),
    }
    head = NodeView("head", "cpu", is_head=True, total={"CPU": 0}, available={})
    gangs = (
        Gang(({"CPU": 8},), "PACK", "older"),
        Gang(({"CPU": 8, "GPU": 1},), "PACK", "newer"),
    )
    snapshot = Snapshot((head,), gangs=gangs)
    result = plan(snapshot, Settings(types, 1, upscaling_speed=1e6))
    assert result.launch == {"cpu": 1}


def test_the_node_overhead_ignores_the_head_s_type_and_free_types() -> None:
    # The overhead is in units of the cheapest positive price of a type that may launch: a
    # priced head type (max_workers 0) or a free on-prem type does not switch it off.
    base = {
        "small": TypeInfo("small", {"CPU": 4}, 0, 20, price=0.19),
        "big": TypeInfo("big", {"CPU": 16}, 0, 20, price=0.80),
    }
    extra = {
        "headtype": TypeInfo("headtype", {"CPU": 2}, 0, 0, price=0.01),
        "onprem": TypeInfo("onprem", {"CPU": 1, "fpga": 1}, 0, 1, price=0.0),
    }
    head = NodeView("head", "headtype", is_head=True, total={"CPU": 2}, available={})
    snapshot = Snapshot((head,), pending=(({"CPU": 1}, 32),))
    for types in (base, {**base, **extra}):
        config = Settings(types, 20, upscaling_speed=1e6)
        result = plan(snapshot, config, record=True)
        # fewer, bigger nodes still (the free on-prem node, when there, takes one bundle)
        assert result.launch["big"] == 2 and "small" not in result.launch, types.keys()
        _check(snapshot, config, result)
