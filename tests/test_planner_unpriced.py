"""The planner without prices (on-prem, Kubernetes, most configs): every node counts the
same, so it launches as few nodes as the priced choice would at one price for all, and a
partly used node is given the smallest type that holds what it was given."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.autoscaler.decide import planner
from launcher.autoscaler.decide.packing import fits, shape_of
from launcher.autoscaler.decide.plan_repack import Item, Kind, Pack, fewer_nodes, nodes_in
from launcher.autoscaler.decide.planner import (
    Gang,
    NodeView,
    Settings,
    Snapshot,
    TypeInfo,
    _sizes,
    _unit_prices,
    plan,
)
from tests.test_planner_cost import _check, scenarios

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def unpriced(types: Mapping[str, Mapping[str, float]]) -> Settings:
    return Settings(
        types={n: TypeInfo(n, dict(r), 0, 100) for n, r in types.items()},
        max_workers=100,
        upscaling_speed=100.0,
    )


CPU = {"cpu4": {"CPU": 4.0}, "cpu16": {"CPU": 16.0}, "cpu64": {"CPU": 64.0}}


def test_placement_groups_share_the_room_of_a_node_launched_for_an_earlier_one() -> None:
    # Group a alone fits one `small` node exactly; the choice per shape used to launch it,
    # and group b then needed a `big` of its own. One `big` holds both groups.
    types = {"small": {"CPU": 4.0, "memory": 4.0}, "big": {"CPU": 8.0, "memory": 8.0}}
    gangs = (
        Gang(({"CPU": 2.0, "memory": 1.0},) * 2, "PACK", "a"),
        Gang(({"CPU": 1.0, "memory": 3.0},) * 2, "PACK", "b"),
    )
    result = plan(Snapshot((), gangs=gangs), unpriced(types))
    assert result.launch == {"big": 1}


def test_distinct_shapes_share_one_node_instead_of_one_small_node_each() -> None:
    # Each shape alone needs one node of any type, and the least waste was a cpu4 each:
    # five cpu4. Together they fill 13.5 of one cpu16's 16 CPUs.
    pending = tuple(({"CPU": c}, 1) for c in (2.5, 2.6, 2.7, 2.8, 2.9))
    result = plan(Snapshot((), pending=pending), unpriced(CPU))
    assert result.launch == {"cpu16": 1}


def test_among_equally_many_nodes_the_smaller_type() -> None:
    one = plan(Snapshot((), pending=(({"CPU": 1.0}, 1),)), unpriced(CPU))
    assert one.launch == {"cpu4": 1}
    five = plan(Snapshot((), pending=(({"CPU": 1.0}, 5),)), unpriced(CPU))
    assert five.launch == {"cpu16": 1}
    more = plan(Snapshot((), pending=(({"CPU": 1.0}, 68),)), unpriced(CPU))
    assert more.launch == {"cpu64": 1, "cpu4": 1}


def test_free_capacity_still_comes_first_and_cpu_work_stays_off_gpu_types() -> None:
    types = {**CPU, "gpu": {"CPU": 8.0, "GPU": 1.0}}
    idle = NodeView("w1", "cpu4", total={"CPU": 4.0}, available={"CPU": 3.0}, idle_s=1)
    result = plan(Snapshot((idle,), pending=(({"CPU": 1.0}, 3),)), unpriced(types))
    assert result.launch == {}
    cpu_only = plan(Snapshot((), pending=(({"CPU": 2.0}, 3),)), unpriced(types))
    assert cpu_only.launch == {"cpu16": 1}
    gpu = plan(Snapshot((), pending=(({"CPU": 1.0, "GPU": 1.0}, 2),)), unpriced(types))
    assert gpu.launch == {"gpu": 2}


def test_strict_spread_still_gets_distinct_nodes() -> None:
    gang = Gang(({"CPU": 1.0},) * 3, "STRICT_SPREAD", "s")
    result = plan(Snapshot((), gangs=(gang,)), unpriced(CPU))
    assert result.launch == {"cpu4": 3}


def test_prices_given_are_left_as_they_are() -> None:
    priced = Settings(
        types={
            "cpu4": TypeInfo("cpu4", {"CPU": 4.0}, 0, 10, price=0.2),
            "cpu16": TypeInfo("cpu16", {"CPU": 16.0}, 0, 10),  # one type without a price
        },
        max_workers=20,
    )
    assert _unit_prices(priced) is priced
    unit = _unit_prices(unpriced(CPU))
    assert {t.price for t in unit.types.values()} == {1.0}
    sizes = _sizes(unpriced(CPU).types)
    assert sizes["cpu4"] < sizes["cpu16"] < sizes["cpu64"]  # type: ignore[operator]


def test_work_a_cpu_type_cannot_hold_shares_the_gpu_nodes_it_needs() -> None:
    # Neither shape fits `cpu4` (8 CPUs; 24 GiB), so both need the GPU type (12 CPUs, 85
    # GiB), which holds one {8, 16} and two {2, 24}. Placed shape by shape, the last {2, 24}
    # bundles took a node of their own (5 nodes); laid out again, 4 hold it all.
    types = {"gpu": {"CPU": 12.0, "memory": 85.0, "GPU": 1.0}, "cpu4": {"CPU": 4.0, "memory": 16.0}}
    pending = (({"CPU": 2.0, "memory": 24.0}, 4), ({"CPU": 8.0, "memory": 16.0}, 4))
    snapshot = Snapshot((), pending=pending)
    result = plan(snapshot, unpriced(types), record=True)
    assert result.launch == {"gpu": 4}
    _check(snapshot, unpriced(types), result)
    # Each node's launch is told by the work it holds that was planned first.
    launches = [d for d in result.decisions if d.action == "launch"]
    assert {d.node_type for d in launches} == {"gpu"} and sum(d.count for d in launches) == 4
    assert {d.reason for d in launches} <= {
        "4 pending bundle(s) of {CPU: 2, memory: 24}",
        "4 pending bundle(s) of {CPU: 8, memory: 16}",
    }


def test_thinning_moves_a_nodes_work_into_the_others_spare_room() -> None:
    cap = {"CPU": 8.0}
    half = Item(shape_of({"CPU": 4.0}))
    small = Item(shape_of({"CPU": 1.0}))
    # Five nodes (four half full, one with four small bundles) hold 20 CPUs: three will do.
    first = [Pack("cpu8", Counter({half: 1}), 4), Pack("cpu8", Counter({small: 4}), 1)]
    layout = fewer_nodes(first, [Kind("cpu8", cap, 10)], total_room=10)
    assert layout is not None and nodes_in(layout) == 3
    held: Counter[Item] = Counter()
    for pack in layout:
        assert sum(dict(i.shape)["CPU"] * n for i, n in pack.holds.items()) <= 8.0
        for item, count in pack.holds.items():
            held[item] += count * pack.copies
    assert held == {half: 4, small: 4}
    # Already as few as can be: nothing to offer.
    assert fewer_nodes([Pack("cpu8", Counter({half: 2}), 2)], [Kind("cpu8", cap, 10)], 10) is None


def test_a_move_that_fails_after_using_a_split_off_copy_is_undone_whole() -> None:
    # Two nodes alike (x each). Taking the other node away: `a` splits one x node off as a
    # node of its own, `b` goes one to each x node, `c` fits nowhere: all of it is undone.
    cap = {"CPU": 8.0, "memory": 64.0}
    x = Item(shape_of({"CPU": 4.0, "memory": 40.0}))
    a = Item(shape_of({"CPU": 1.0, "memory": 1.0}))
    b = Item(shape_of({"CPU": 2.5, "memory": 1.0}))
    c = Item(shape_of({"CPU": 0.5, "memory": 30.0}))
    first = [Pack("cpu8", Counter({x: 1}), 2), Pack("cpu8", Counter({a: 1, b: 2, c: 1}), 1)]
    assert fewer_nodes(first, [Kind("cpu8", cap, 10)], total_room=10) is None


def test_a_strict_spread_groups_bundles_never_share_a_node_when_laid_out_again() -> None:
    cap = {"CPU": 8.0}
    spread = Item(shape_of({"CPU": 1.0}), spread=0)
    loose = Item(shape_of({"CPU": 1.0}))
    # Three nodes each with one of the group's bundles and little else: the loose bundles
    # may move, the group's may not join another of its own.
    first = [Pack("cpu8", Counter({spread: 1, loose: 1}), 3)]
    layout = fewer_nodes(first, [Kind("cpu8", cap, 10)], total_room=10)
    assert layout is None  # three nodes are needed for the group's three bundles


def test_a_gpu_node_is_launched_only_for_work_that_needs_one() -> None:
    gpu = {"CPU": 16.0, "GPU": 1.0}
    cpu = {"CPU": 4.0}
    gpu_work = Item(shape_of({"CPU": 1.0, "GPU": 1.0}))
    cpu_work = Item(shape_of({"CPU": 4.0}))
    kinds = [Kind("gpu", gpu, 10), Kind("cpu4", cpu, 10)]
    # One GPU node's spare CPUs may take the CPU work of three cpu4 nodes...
    first = [Pack("gpu", Counter({gpu_work: 1}), 1), Pack("cpu4", Counter({cpu_work: 1}), 3)]
    layout = fewer_nodes(first, kinds, total_room=10)
    assert layout is not None and nodes_in(layout) == 1
    # ...but no GPU node holding only CPU work is made to save nodes.
    cpu_only = [Pack("cpu4", Counter({cpu_work: 1}), 4)]
    assert fewer_nodes(cpu_only, kinds, total_room=10) is None


def test_a_layout_keeps_to_each_types_room() -> None:
    small = Item(shape_of({"CPU": 1.0}))
    first = [Pack("cpu4", Counter({small: 4}), 4)]
    kinds = [Kind("cpu4", {"CPU": 4.0}, 4), Kind("cpu16", {"CPU": 16.0}, 0)]
    assert fewer_nodes(first, kinds, total_room=4) is None  # no cpu16 may be launched
    roomy = [Kind("cpu4", {"CPU": 4.0}, 4), Kind("cpu16", {"CPU": 16.0}, 1)]
    layout = fewer_nodes(first, roomy, total_room=4)
    assert layout is not None and [(p.node_type, p.copies) for p in layout] == [("cpu16", 1)]


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_laid_out_again_never_more_nodes_and_every_rule_holds(
    case: tuple[Snapshot, Settings],
) -> None:
    snapshot, priced_config = case
    config = replace(
        priced_config,
        types={n: replace(t, price=None) for n, t in priced_config.types.items()},
    )
    result = plan(snapshot, config, record=True)
    _check(snapshot, config, result)
    with mock.patch.object(planner, "_relayout", lambda *args: None):
        before = plan(snapshot, config)
    assert sum(result.launch.values()) <= sum(before.launch.values())
    launches = [d for d in result.decisions if d.action == "launch"]
    assert sum(d.count for d in launches) == sum(result.launch.values())
    # A new GPU node holds work needing a GPU, or work no CPU-only type holds.
    types = config.types
    cpu_types = [t.resources for t in types.values() if not t.has_gpu and t.max_workers > 0]
    held: dict[int, list[Mapping[str, float]]] = {}
    for p in result.placements:
        if p.node_id is None:
            held.setdefault(p.new, []).append(p.request)
    for new, requests in held.items():
        node_type = next(p.node_type for p in result.placements if p.new == new and not p.node_id)
        if types[node_type].has_gpu:
            assert any(
                r.get("GPU", 0) > 0 or not any(fits(c, r) for c in cpu_types) for r in requests
            ), (node_type, requests)


# Ray 2.60's nodes on bench/bench_planner.py --unpriced's snapshots at 1,000 bundles x 50
# nodes (docs/benchmarks.md, "Without prices"): the fewer of its v1 and v2 schedulers'.
RAY_AT_1000 = {
    ("mixed (4 % in groups)", 1): 82,
    ("mixed (4 % in groups)", 2): 64,
    ("many distinct shapes", 1): 106,
    ("many distinct shapes", 2): 97,
    ("many placement groups", 1): 21,
    ("many placement groups", 2): 18,
    ("aws", 1): 164,
    ("aws", 2): 57,
    ("aws + groups", 1): 265,
    ("aws + groups", 2): 269,
    ("gcp", 1): 405,
    ("gcp", 2): 341,
    ("gcp + groups", 1): 436,
    ("gcp + groups", 2): 425,
    ("aws + 200 groups", 1): 120,
    ("aws + 200 groups", 2): 153,
    ("gcp + 200 groups", 1): 450,
    ("gcp + 200 groups", 2): 217,
}


@pytest.mark.parametrize(("family", "seed"), sorted(RAY_AT_1000))
def test_no_more_nodes_than_rays_fewer_on_the_benchs_unpriced_snapshots(
    family: str, seed: int
) -> None:
    # Before the layout again and the packing order of groups, four of these launched more
    # (gcp seed 2: 362, many placement groups seed 2: 19, aws + groups seed 1: 273,
    # gcp + 200 groups seed 2: 218).
    bench = pytest.importorskip("bench_planner")
    cost = pytest.importorskip("planner_cost")
    if family == "mixed (4 % in groups)":
        w = bench.mixed(1000, 50, bench.SEED + seed - 1)
    elif family == "many distinct shapes":
        w = bench.distinct_shapes(1000, 50, bench.SEED + seed - 1)
    elif family == "many placement groups":
        w = bench.many_groups(1000, 50, bench.SEED + seed - 1)
    else:
        base, _, groups = family.partition(" + ")
        count = {"": 0, "groups": 300, "200 groups": 200}[groups]
        kind = cost.Family(family, base, count, False)
        w = replace(cost.scenario(kind, seed, 1000, 50), prices=None)
    snapshot, config = bench.ours_setup(w)
    result = plan(snapshot, config, record=True)
    assert sum(result.launch.values()) <= RAY_AT_1000[family, seed]
    _check(snapshot, config, result)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[Pack], list[Kind]]:
    kinds = [
        Kind("cpu8", {"CPU": 8.0, "memory": 32.0}, draw(st.integers(0, 12))),
        Kind("cpu16", {"CPU": 16.0, "memory": 64.0}, draw(st.integers(0, 12))),
        Kind("gpu", {"CPU": 8.0, "memory": 64.0, "GPU": 1.0}, draw(st.integers(0, 12))),
    ]
    shapes = [
        {"CPU": 1.0, "memory": 1.0},
        {"CPU": 2.5, "memory": 8.0},
        {"CPU": 0.5, "memory": 30.0},
        {"CPU": 4.0, "memory": 4.0},
        {"CPU": 1.0, "memory": 4.0, "GPU": 1.0},
    ]
    packs = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(kinds))
        free = dict(kind.resources)
        holds: Counter[Item] = Counter()
        for _ in range(draw(st.integers(1, 6))):
            request = draw(st.sampled_from(shapes))
            spread = draw(st.sampled_from((-1, -1, 0, 1)))
            item = Item(shape_of(request), spread)
            if fits(free, request) and not (spread >= 0 and holds[item]):
                holds[item] += 1
                free = {k: v - request.get(k, 0.0) for k, v in free.items()}
        if kind.has_gpu and not any(dict(i.shape).get("GPU", 0) for i in holds):
            continue  # the planner launches no GPU node without GPU work
        if holds:
            copies = 1 if any(i.spread >= 0 for i in holds) else draw(st.integers(1, 3))
            packs.append(Pack(kind.name, holds, copies))
    return packs, kinds


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_a_new_layout_holds_the_same_bundles_within_every_limit(
    case: tuple[list[Pack], list[Kind]],
) -> None:
    packs, kinds = case
    if not packs:
        return
    # Room as the planner gives it: at least the first layout's own nodes.
    used = Counter[str]()
    for pack in packs:
        used[pack.node_type] += pack.copies
    kinds = [replace(k, room=k.room + used[k.name]) for k in kinds]
    total = nodes_in(packs) + 3
    layout = fewer_nodes(packs, kinds, total)
    if layout is None:
        return
    assert nodes_in(layout) < nodes_in(packs)
    assert nodes_in(layout) <= total

    def bundles(of: list[Pack]) -> Counter[Item]:
        out: Counter[Item] = Counter()
        for pack in of:
            for item, count in pack.holds.items():
                out[item] += count * pack.copies
        return out

    assert bundles(layout) == bundles(packs)
    by_name = {k.name: k for k in kinds}
    per_type = Counter[str]()
    for pack in layout:
        per_type[pack.node_type] += pack.copies
        resources = by_name[pack.node_type].resources
        for key in resources:
            assert sum(dict(i.shape).get(key, 0.0) * n for i, n in pack.holds.items()) <= (
                resources[key] + 1e-9
            )
        # at most one bundle of a STRICT_SPREAD group per node
        assert all(n == 1 for i, n in pack.holds.items() if i.spread >= 0)
        if by_name[pack.node_type].has_gpu:
            assert any(dict(i.shape).get("GPU", 0) for i in pack.holds)
    assert all(per_type[name] <= by_name[name].room for name in per_type)
