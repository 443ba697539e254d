"""The pure planner: fit, cost, limits, placement groups, idle timeout, infeasible demand."""

from __future__ import annotations

from launcher.autoscaler.decide.planner import Gang, NodeView, Settings, Snapshot, TypeInfo, plan

CPU4 = TypeInfo("cpu4", {"CPU": 4}, 0, 10, price=0.2)
CPU16 = TypeInfo("cpu16", {"CPU": 16}, 0, 10, price=0.6)
GPU = TypeInfo("gpu", {"CPU": 8, "GPU": 1}, 0, 4, price=3.0)
TYPES = {t.name: t for t in (CPU4, CPU16, GPU)}
HEAD = NodeView("head", "cpu4", is_head=True, total={"CPU": 2}, available={"CPU": 0})


def settings(**kw: object) -> Settings:
    base: dict[str, object] = {"types": TYPES, "max_workers": 20, "upscaling_speed": 100.0}
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def test_demand_fits_free_capacity_first() -> None:
    idle = NodeView("w1", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=1)
    result = plan(Snapshot((HEAD, idle), pending=(({"CPU": 1}, 4),)), settings())
    assert result.launch == {}


def test_cheapest_per_bundle_type_is_launched() -> None:
    # 16 one-CPU bundles: one cpu16 ($0.6) beats four cpu4 ($0.8).
    result = plan(Snapshot((HEAD,), pending=(({"CPU": 1}, 16),)), settings())
    assert result.launch == {"cpu16": 1}
    assert any("16 pending bundle(s) of {CPU: 1}" in str(d) for d in result.decisions)


def test_cpu_work_never_lands_on_gpu_nodes() -> None:
    only_gpu_fits_big = plan(
        Snapshot((HEAD,), pending=(({"CPU": 2}, 1),)), settings(types={"gpu": GPU, "cpu4": CPU4})
    )
    assert only_gpu_fits_big.launch == {"cpu4": 1}
    gpu_work = plan(Snapshot((HEAD,), pending=(({"GPU": 1}, 2),)), settings())
    assert gpu_work.launch == {"gpu": 2}


def test_per_type_and_global_maxima() -> None:
    small = TypeInfo("cpu4", {"CPU": 4}, 0, 2, price=0.2)
    result = plan(Snapshot((HEAD,), pending=(({"CPU": 4}, 10),)), settings(types={"cpu4": small}))
    assert result.launch == {"cpu4": 2}
    assert any(d.action == "wait" for d in result.decisions)
    capped = plan(
        Snapshot((HEAD,), pending=(({"CPU": 4}, 10),)),
        settings(types={"cpu4": CPU4}, max_workers=3),
    )
    assert capped.launch == {"cpu4": 3}


def test_infeasible_demand_launches_nothing() -> None:
    result = plan(Snapshot((HEAD,), pending=(({"CPU": 64}, 1), ({"TPU": 1}, 3))), settings())
    assert result.launch == {}
    assert {"CPU": 64.0} in result.infeasible and {"TPU": 1.0} in result.infeasible


def test_strict_spread_gets_distinct_nodes_or_nothing() -> None:
    gang = Gang(({"CPU": 1}, {"CPU": 1}, {"CPU": 1}), "STRICT_SPREAD")
    idle = NodeView("w1", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=0)
    result = plan(Snapshot((HEAD, idle), gangs=(gang,)), settings(types={"cpu4": CPU4}))
    assert result.launch == {"cpu4": 2}  # one bundle on w1, two on new distinct nodes
    limited = TypeInfo("cpu4", {"CPU": 4}, 0, 2, price=0.2)
    none = plan(Snapshot((HEAD,), gangs=(gang,)), settings(types={"cpu4": limited}))
    assert none.launch == {}  # 3 distinct nodes needed, only 2 allowed: all or nothing


def test_strict_pack_needs_one_node_for_the_sum() -> None:
    gang = Gang(({"CPU": 3}, {"CPU": 3}), "STRICT_PACK")
    result = plan(Snapshot((HEAD,), gangs=(gang,)), settings())
    assert result.launch == {"cpu16": 1}
    too_big = plan(
        Snapshot((HEAD,), gangs=(Gang(({"CPU": 10}, {"CPU": 10}), "STRICT_PACK"),)), settings()
    )
    assert too_big.launch == {} and too_big.infeasible


def test_request_resources_sizes_total_capacity() -> None:
    busy = NodeView("w1", "cpu4", total={"CPU": 4}, available={"CPU": 0}, idle_s=None)
    result = plan(
        Snapshot((HEAD, busy), constraints=({"CPU": 4}, {"CPU": 4})), settings(types={"cpu4": CPU4})
    )
    assert result.launch == {"cpu4": 1}  # w1's total counts even though it is busy


def test_upscaling_speed_limits_nodes_starting_at_once() -> None:
    result = plan(
        Snapshot((HEAD,), pending=(({"CPU": 4}, 40),)),
        settings(
            types={"cpu4": TypeInfo("cpu4", {"CPU": 4}, 0, 40)}, max_workers=40, upscaling_speed=1.0
        ),
    )
    assert result.launch == {"cpu4": 5}
    launches = [d for d in result.decisions if d.action == "launch"]
    assert sum(d.count for d in launches) == 5  # the log says what really launches
    assert any("at most 5 may start at once" in str(d) for d in result.decisions)


def test_min_workers_come_up_in_one_wave_and_count_as_starting() -> None:
    """The floor the config asks for is not capped (8 at once, not 5 then 3), and it uses
    up the cap for demand: none of the 40 pending bundles' nodes launch in this round."""
    cpu4 = TypeInfo("cpu4", {"CPU": 4}, 8, 40)
    result = plan(
        Snapshot((HEAD,), pending=(({"CPU": 4}, 40),)),
        settings(types={"cpu4": cpu4}, max_workers=40, upscaling_speed=1.0),
    )
    assert result.launch == {"cpu4": 8}
    launches = [d for d in result.decisions if d.action == "launch"]
    assert [d.count for d in launches] == [8] and "min_workers" in launches[0].reason
    assert any("launching 8 of" in str(d) for d in result.decisions)


def test_idle_workers_go_but_never_below_min() -> None:
    typed = TypeInfo("cpu4", {"CPU": 4}, 1, 10)
    nodes = (
        HEAD,
        NodeView("w1", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=400),
        NodeView("w2", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=500),
        NodeView("w3", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=10),
    )
    result = plan(Snapshot(nodes), settings(types={"cpu4": typed}, idle_timeout_s=300))
    assert [node_id for node_id, _ in result.terminate] == ["w2", "w1"]
    assert result.terminate[0][1] == "idle 500 s > 300 s"
    all_idle = (
        *nodes[:3],
        NodeView("w3", "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=350),
    )
    kept = plan(Snapshot(all_idle), settings(types={"cpu4": typed}, idle_timeout_s=300))
    assert [node_id for node_id, _ in kept.terminate] == ["w2", "w1"]  # w3 stays: min 1


def test_min_workers_launched_first() -> None:
    typed = TypeInfo("cpu4", {"CPU": 4}, 2, 10)
    result = plan(Snapshot((HEAD,), pending=(({"CPU": 4}, 1),)), settings(types={"cpu4": typed}))
    assert result.launch == {"cpu4": 2}  # the pending bundle fits on a min_workers node


def test_head_type_without_workers_is_never_launched() -> None:
    head_type = TypeInfo("head", {"CPU": 4}, 0, 0, price=0.1)
    gpu = TypeInfo("gpu", {"CPU": 4, "GPU": 1}, 0, 4, price=0.3)
    head = NodeView("h", "head", is_head=True, total={"CPU": 4}, available={"CPU": 0})
    result = plan(
        Snapshot((head,), pending=(({"CPU": 1}, 8),)),
        settings(types={"head": head_type, "gpu": gpu}),
    )
    # Only GPU nodes can take more CPU work: they are used rather than waiting forever.
    assert result.launch == {"gpu": 2}
    custom = plan(
        Snapshot(
            (NodeView("h", "head", True, False, {"CPU": 4, "disk": 1}, {"CPU": 4, "disk": 0}),),
            pending=(({"disk": 1}, 1),),
        ),
        settings(types={"head": head_type, "gpu": gpu}),
    )
    assert custom.infeasible == () and custom.launch == {}  # it fits the head, when free


def test_group_nodes_are_chosen_for_all_pending_bundles_of_their_shape() -> None:
    # 16 one-CPU bundles in 4 groups: one cpu16, as for 16 tasks (cheapest per bundle), not
    # the cpu4 that a single bundle would pick, one per group.
    gangs = tuple(Gang(({"CPU": 1},) * 4, "PACK", f"g{i}") for i in range(4))
    assert plan(Snapshot((HEAD,), gangs=gangs), settings()).launch == {"cpu16": 1}
    # Without prices: the fewest nodes for all 32 pending {CPU: 2}. STRICT_SPREAD needs 4
    # distinct nodes, and the other groups share them, so 4 x cpu64 rather than 16 x cpu4.
    unpriced = {
        "cpu4": TypeInfo("cpu4", {"CPU": 4}, 0, 100),
        "cpu64": TypeInfo("cpu64", {"CPU": 64}, 0, 100),
    }
    spread = tuple(Gang(({"CPU": 2},) * 4, "STRICT_SPREAD", f"s{i}") for i in range(8))
    result = plan(Snapshot((HEAD,), gangs=spread), settings(types=unpriced))
    assert result.launch == {"cpu64": 4}


def _gpu_node(node_id: str, idle_s: float = 0, gpus_free: float = 1) -> NodeView:
    return NodeView(
        node_id,
        "gpu",
        total={"CPU": 8, "GPU": 1},
        available={"CPU": 8, "GPU": gpus_free},
        idle_s=idle_s,
    )


def _cpu4_node(node_id: str, idle_s: float = 0) -> NodeView:
    return NodeView(node_id, "cpu4", total={"CPU": 4}, available={"CPU": 4}, idle_s=idle_s)


def test_cpu_only_group_leaves_a_gpu_nodes_cpus_to_gpu_work() -> None:
    # The GPU node is listed first; the group's CPUs go to the CPU node, so the GPU task
    # that needs all 8 CPUs of the GPU node still fits there and nothing is launched.
    group = Gang(({"CPU": 2}, {"CPU": 2}), "PACK", "cpu-group")
    snapshot = Snapshot(
        (HEAD, _gpu_node("g1"), _cpu4_node("c1")),
        pending=(({"CPU": 8, "GPU": 1}, 1),),
        gangs=(group,),
    )
    assert plan(snapshot, settings()).launch == {}


def test_cpu_tasks_fill_cpu_nodes_before_the_spare_cpus_of_gpu_nodes() -> None:
    # Both idle past the timeout: the CPU task keeps the CPU node, the GPU node goes.
    nodes = (HEAD, _gpu_node("g1", idle_s=400), _cpu4_node("c1", idle_s=400))
    result = plan(Snapshot(nodes, pending=(({"CPU": 4}, 1),)), settings(idle_timeout_s=300))
    assert result.launch == {}
    assert [node_id for node_id, _ in result.terminate] == ["g1"]
    # A CPU node this plan launches (for min_workers) also comes before the GPU node's CPUs.
    typed = {"cpu4": TypeInfo("cpu4", {"CPU": 4}, 1, 10), "gpu": GPU}
    launched = plan(
        Snapshot((HEAD, _gpu_node("g1", idle_s=400)), pending=(({"CPU": 4}, 1),)),
        settings(types=typed, idle_timeout_s=300),
    )
    assert launched.launch == {"cpu4": 1}
    assert [node_id for node_id, _ in launched.terminate] == ["g1"]


def test_cpu_tasks_use_a_gpu_nodes_spare_cpus_when_nothing_else_has_room() -> None:
    # No CPU node has room: the GPU node's idle CPUs are used rather than launching.
    busy_gpu = _gpu_node("g1", gpus_free=0)
    result = plan(Snapshot((HEAD, busy_gpu), pending=(({"CPU": 4}, 2),)), settings())
    assert result.launch == {}
