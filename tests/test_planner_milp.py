"""The benchmark's integer-programming bound (`bench/planner_milp.py`) on small cases whose
optimum is obvious by hand, and on small benchmark scenarios against our planner's plan and
the shape LP. Skipped without `highspy` (a dev dependency)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

pytest.importorskip("highspy")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import planner_milp as milp

from launcher.autoscaler.decide.packing import fits

CPU4 = {"CPU": 4.0}
ONE = {"CPU": 1.0}


def solve(
    types: Mapping[str, Mapping[str, float]],
    prices: Mapping[str, float],
    pending: Sequence[tuple[Mapping[str, float], int]] = (),
    gangs: Sequence[tuple[str, Sequence[Mapping[str, float]]]] = (),
    free: Sequence[tuple[str, Mapping[str, float]]] = (),
    max_nodes: int | None = None,
    type_max: Mapping[str, int] | None = None,
    exact_spread: bool = True,
    cap: int = milp.PATTERN_CAP,
) -> milp.Answer:
    nodes = [(f"n{i}", t, dict(types[t]), dict(f)) for i, (t, f) in enumerate(free)]
    p = milp.problem(nodes, pending, gangs, types, prices, 100, type_max, exact_spread)
    return milp.Model(p, cap).solve(max_nodes, time_limit=20.0)


def optimal(answer: milp.Answer, cost: float, launch: Mapping[str, int] | None = None) -> None:
    assert answer.status == "Optimal", answer
    assert answer.cost == pytest.approx(cost)
    assert answer.bound == pytest.approx(cost)
    assert answer.achievable
    if launch is not None:
        assert answer.launch == Counter(launch)


def test_one_shape_picks_the_cheapest_mix_of_types() -> None:
    types = {"small": CPU4, "big": {"CPU": 8.0}}
    # 10 CPUs: small + big (12) for 2.5 beats three small (3.0) or two big (3.0).
    optimal(solve(types, {"small": 1.0, "big": 1.5}, [(ONE, 10)]), 2.5, {"small": 1, "big": 1})


def test_fragmentation_the_shape_lp_cannot_see() -> None:
    # Two 3-CPU bundles and a 4-CPU one on 5-CPU nodes: no two share a node, so 3 nodes,
    # where the fractional shape LP pays for 2.
    answer = solve({"five": {"CPU": 5.0}}, {"five": 1.0}, [({"CPU": 3.0}, 2), (CPU4, 1)])
    optimal(answer, 3.0, {"five": 3})


def test_shapes_share_a_node_when_they_fit_together() -> None:
    types = {"box": {"CPU": 4.0, "memory": 4.0}}
    pending = [({"CPU": 3.0, "memory": 1.0}, 1), ({"CPU": 1.0, "memory": 3.0}, 1)]
    optimal(solve(types, {"box": 1.0}, pending), 1.0, {"box": 1})


def test_free_capacity_counts_per_node_not_pooled() -> None:
    types = {"four": CPU4}
    free = [("four", {"CPU": 2.0}), ("four", {"CPU": 2.0})]
    # 4 free CPUs in all, but a 3-CPU bundle fits neither node.
    optimal(solve(types, {"four": 1.0}, [({"CPU": 3.0}, 1)], free=free), 1.0, {"four": 1})
    # Two 2-CPU bundles fit the free room: nothing to launch.
    optimal(solve(types, {"four": 1.0}, [({"CPU": 2.0}, 2)], free=free), 0.0, {})


def test_strict_pack_blocks_are_not_split() -> None:
    types = {"three": {"CPU": 3.0}, "six": {"CPU": 6.0}}
    prices = {"three": 1.0, "six": 4.0}
    gangs = [("STRICT_PACK", [ONE, ONE])] * 3
    # A block of 2 CPUs per 3-CPU node: 3 nodes; the six bundles loose would need 2.
    optimal(solve(types, prices, gangs=gangs), 3.0, {"three": 3})
    optimal(solve(types, prices, [(ONE, 6)]), 2.0, {"three": 2})
    # Blocks and loose bundles of one shape share nodes: 3 + 1 on each of 2 nodes.
    gangs = [("STRICT_PACK", [ONE] * 3)] * 2
    optimal(solve({"four": CPU4}, {"four": 1.0}, [(ONE, 2)], gangs), 2.0, {"four": 2})


def test_strict_pack_of_mixed_shapes_is_one_bundle_of_their_sum() -> None:
    types = {"gpu": {"CPU": 2.0, "GPU": 1.0}, "cpu": CPU4}
    gangs = [("STRICT_PACK", [ONE, {"CPU": 1.0, "GPU": 1.0}])]
    optimal(solve(types, {"gpu": 2.0, "cpu": 0.5}, gangs=gangs), 2.0, {"gpu": 1})


def test_a_block_no_type_holds_is_left_out() -> None:
    nodes: list[tuple[str, str, dict[str, float], dict[str, float]]] = []
    gangs = [("STRICT_PACK", [CPU4, CPU4])]
    p = milp.problem(nodes, [(ONE, 1)], gangs, {"four": CPU4}, {"four": 1.0}, 10)
    assert p.dropped == 2
    optimal(milp.Model(p).solve(), 1.0, {"four": 1})


def test_strict_spread_is_exact_and_can_be_relaxed() -> None:
    types, prices = {"four": CPU4}, {"four": 1.0}
    group = [("STRICT_SPREAD", [ONE, ONE, ONE])]
    optimal(solve(types, prices, gangs=group), 3.0, {"four": 3})
    relaxed = solve(types, prices, gangs=group, exact_spread=False)
    assert relaxed.cost == pytest.approx(1.0)
    assert relaxed.bound == pytest.approx(1.0)
    # An existing node's free room holds one of the three.
    optimal(solve(types, prices, gangs=group, free=[("four", CPU4)]), 2.0, {"four": 2})
    # Two groups of 2 on 2-CPU nodes: one bundle of each group per node.
    two = [("STRICT_SPREAD", [ONE, ONE])] * 2
    optimal(solve({"two": {"CPU": 2.0}}, {"two": 1.0}, gangs=two), 2.0, {"two": 2})


def test_strict_spread_beside_strict_pack_blocks_of_its_shape() -> None:
    types, prices = {"four": CPU4}, {"four": 1.0}
    blocks = [("STRICT_PACK", [ONE] * 3)] * 2
    # Each node: a block of 3 and one bundle of the group of 2.
    spread = [("STRICT_SPREAD", [ONE, ONE])]
    optimal(solve(types, prices, gangs=blocks + spread), 2.0, {"four": 2})
    # Blocks of 2 and a group of 3: two nodes hold 7 CPUs, but the group needs a third.
    blocks = [("STRICT_PACK", [ONE, ONE])] * 2
    spread = [("STRICT_SPREAD", [ONE, ONE, ONE])]
    optimal(solve(types, prices, gangs=blocks + spread), 3.0, {"four": 3})
    relaxed = solve(types, prices, gangs=blocks + spread, exact_spread=False)
    assert relaxed.bound == pytest.approx(2.0)
    # Full 4-CPU blocks leave no room: the group of 2 takes 2 more nodes (10 CPUs fit 3).
    blocks = [("STRICT_PACK", [ONE] * 4)] * 2
    spread = [("STRICT_SPREAD", [ONE, ONE])]
    optimal(solve(types, prices, gangs=blocks + spread), 4.0, {"four": 4})


def test_node_cap() -> None:
    types, prices = {"small": CPU4, "big": {"CPU": 16.0}}, {"small": 1.0, "big": 5.0}
    optimal(solve(types, prices, [(ONE, 16)]), 4.0, {"small": 4})
    optimal(solve(types, prices, [(ONE, 16)], max_nodes=1), 5.0, {"big": 1})
    none = solve(types, prices, [(ONE, 16)], max_nodes=0)
    assert none.bound == float("inf")
    assert none.cost is None


def test_per_type_max_workers_counts_existing_nodes() -> None:
    types, prices = {"small": CPU4, "mid": {"CPU": 8.0}}, {"small": 1.0, "mid": 2.5}
    # At most 3 small: 2 small + 1 mid (16 CPUs) for 4.5.
    optimal(solve(types, prices, [(ONE, 16)], type_max={"small": 3}), 4.5)
    # One small exists (full) under a max of 2: 1 small + 1 mid holds only 12, so 2 mid.
    full = [("small", {"CPU": 0.0})]
    answer = solve(types, prices, [(ONE, 16)], free=full, type_max={"small": 2})
    optimal(answer, 5.0, {"mid": 2})


def test_patterns_are_the_maximal_fits() -> None:
    capacity = {"CPU": 4.0, "memory": 8.0}
    requests = [
        {"CPU": 1.0, "memory": 1.0},
        {"CPU": 2.0, "memory": 4.0},
        {"CPU": 0.5, "memory": 3.0},
    ]
    found = milp.patterns(capacity, requests)
    assert found is not None

    def load(counts: Sequence[int]) -> dict[str, float]:
        return {k: sum(n * r[k] for n, r in zip(counts, requests, strict=True)) for k in capacity}

    expected = set()
    for counts in itertools.product(range(9), repeat=3):
        if not fits(capacity, load(counts)):
            continue
        if all(
            not fits(capacity, load([n + (i == j) for j, n in enumerate(counts)])) for i in range(3)
        ):
            expected.add(counts)
    assert sorted(found) == sorted(expected)
    assert milp.patterns(capacity, requests, cap=2) is None


def test_fallback_when_patterns_explode_is_a_bound_not_a_plan() -> None:
    types, prices = {"five": {"CPU": 5.0}}, {"five": 1.0}
    pending = [({"CPU": 3.0}, 2), (CPU4, 1)]
    nodes: list[tuple[str, str, dict[str, float], dict[str, float]]] = []
    p = milp.problem(nodes, pending, [], types, prices, 100)
    answer = milp.Model(p, cap=1).solve()
    assert answer.relaxed
    assert not answer.achievable
    assert answer.bound <= 3.0 + 1e-9  # the exact optimum is 3


def test_both_targets_verdict() -> None:
    def answer(bound: float, cost: float | None, realized: bool = True) -> milp.Answer:
        launch = None if cost is None else Counter({"t": 1})
        return milp.Answer("Optimal", bound, cost, launch, realized, 0.0, 1)

    assert milp.both_targets(answer(9.0, 10.0), 10.0) == "yes"
    assert milp.both_targets(answer(9.0, 10.0, realized=False), 10.0) == "unknown"
    assert milp.both_targets(answer(10.5, 11.0), 10.0) == "no"
    assert milp.both_targets(answer(float("inf"), None), 10.0) == "no"
    assert milp.both_targets(answer(9.0, 11.0), 10.0) == "unknown"


def test_guarded_solves_in_children_check_strict_spread_on_the_first_plan() -> None:
    # In a fresh interpreter: HiGHS's threads in this one would not survive the fork.
    script = """
import sys
sys.path.insert(0, sys.argv[1])
import planner_milp as milp
one = {"CPU": 1.0}
types, prices = {"four": {"CPU": 4.0}}, {"four": 1.0}
def run(gangs, max_nodes=None):
    p = milp.problem([], [(one, 2)], gangs, types, prices, 100)
    a = milp.solve_guarded(milp.Model(p), max_nodes, 10.0)
    print(a.status, a.cost, a.bound, a.realized, repr(a.relaxed))
run([("STRICT_SPREAD", [one, one])])  # the first plan (1 node) breaks it: 2 nodes
run([("STRICT_SPREAD", [one, one])], max_nodes=1)  # no plan
run([("PACK", [one, one])])
"""
    bench = str(Path(milp.__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", script, bench],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Optimal 2.0 2.0 True ''",
        "Infeasible None inf False ''",
        "Optimal 1.0 1.0 True ''",
    ]


@pytest.mark.parametrize("family", [0, 1, 3])
def test_small_scenarios_bound_our_plan_and_beat_the_shape_lp(family: int) -> None:
    from bench_planner import Result, ours_input
    from planner_cost import FAMILIES, cost, scenario, shaped_bound

    w = scenario(FAMILIES[family], 1, 150, 8)
    answer = milp.Model(milp.problem_of(w)).solve(time_limit=20.0)
    ours = cost(w, Result([], ours_input(w)()))
    shaped = shaped_bound(w)
    assert ours is not None
    assert shaped is not None
    assert answer.achievable
    assert answer.bound >= shaped - 1e-6
    assert ours >= answer.bound - 1e-6
    assert answer.cost is not None
    assert answer.cost <= ours + 1e-6


@pytest.mark.parametrize("family", [1, 3, 4])
def test_our_plan_maps_onto_the_model_as_a_real_plan(family: int) -> None:
    from bench_planner import ours_setup
    from planner_cost import FAMILIES, scenario

    from launcher.autoscaler.decide.planner import plan

    w = scenario(FAMILIES[family], 2, 300, 10)
    ours = plan(*ours_setup(w), record=True)
    assert w.prices is not None
    model = milp.Model(milp.problem_of(w))
    for spread in (True, False):
        start = model.start(ours.placements, spread)
        assert start is not None
        answer = model.answer(spread, None, "start", 0.0, start, 0.0)
        assert answer.realized
        assert answer.launch == Counter({t: n for t, n in ours.launch.items() if n})
        assert answer.cost == pytest.approx(sum(w.prices[t] * n for t, n in ours.launch.items()))
