"""The planner without prices (on-prem, Kubernetes, most configs): every node counts the
same, so it launches as few nodes as the priced choice would at one price for all, and a
partly used node is given the smallest type that holds what it was given."""

from __future__ import annotations

from collections.abc import Mapping

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
