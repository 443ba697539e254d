"""When the autoscaler moves the work off a worker it was given notice of (pure decision)."""

from __future__ import annotations

from launcher.autoscaler.decide.demand import RayNode
from launcher.autoscaler.decide.evacuate import EVACUATE_BEFORE_S, evacuations, used_resources
from launcher.providers.base import Node, NodeKind, NodeState

NOW = 1_000_000.0


def _ray(ip: str, total: float, free: float, alive: bool = True) -> RayNode:
    return RayNode(
        f"r-{ip}", ip, {"CPU": total, "object_store_memory": 1e9},
        {"CPU": free, "object_store_memory": 2e8}, 0.0, alive,
    )  # fmt: skip


def _noticed(ip: str, in_s: float) -> Node:
    return Node(f"w-{ip}", NodeKind.WORKER, "spot", ip, NodeState.RUNNING, reclaim_at=NOW + in_s)


def test_used_resources_are_what_ray_handed_out_not_the_object_store() -> None:
    assert used_resources(_ray("10.0.0.1", 4, 1)) == {"CPU": 3.0}
    assert used_resources(_ray("10.0.0.1", 4, 4)) == {}


def test_a_busy_noticed_node_waits_for_room_until_shortly_before_its_reclaim() -> None:
    leaving = _noticed("10.0.0.1", 60)
    full = [_ray("10.0.0.1", 4, 1), _ray("10.0.0.2", 4, 2)]  # 3 CPUs in use, 2 free elsewhere
    assert evacuations([leaving], full, NOW, set()) == []
    due = evacuations([leaving], full, NOW + 60 - EVACUATE_BEFORE_S, set())
    assert [(e.node.id, e.reason) for e in due] == [
        ("w-10.0.0.1", f"{EVACUATE_BEFORE_S:g} s or less before the reclaim")
    ]


def test_a_noticed_node_is_evacuated_once_its_work_fits_on_one_other_live_node() -> None:
    leaving = _noticed("10.0.0.1", 60)
    joined = [_ray("10.0.0.1", 4, 1), _ray("10.0.0.2", 4, 2), _ray("10.0.0.3", 4, 3)]
    (evacuation,) = evacuations([leaving], joined, NOW, set())
    assert evacuation.reason == "its work fits on 10.0.0.3 now"
    # Room on a node that is itself leaving, or on a dead one, is no room (the other
    # leaving node's own work, 1 CPU, fits on 10.0.0.2).
    other = _noticed("10.0.0.3", 90)
    both = evacuations([leaving, other], joined, NOW, set())
    assert [(e.node.id, e.reason) for e in both] == [
        ("w-10.0.0.3", "its work fits on 10.0.0.2 now")
    ]
    dead = [_ray("10.0.0.1", 4, 1), _ray("10.0.0.3", 4, 4, alive=False)]
    assert evacuations([leaving], dead, NOW, set()) == []


def test_an_idle_noticed_node_is_evacuated_at_once_and_each_node_only_once() -> None:
    leaving = _noticed("10.0.0.1", 120)
    idle = [_ray("10.0.0.1", 4, 4)]
    (evacuation,) = evacuations([leaving], idle, NOW, set())
    assert evacuation.reason == "nothing of Ray's runs on it"
    assert evacuations([leaving], idle, NOW, {leaving.id}) == []
    # Its Ray already gone (stopped, or not joined): nothing to stop.
    assert evacuations([leaving], [_ray("10.0.0.1", 4, 4, alive=False)], NOW, set()) == []


def test_the_daemon_module_imports_first_in_a_fresh_interpreter() -> None:
    """The head runs `python -m launcher.autoscaler`: the daemon is the first module of the
    package it imports, which an import cycle would break (and pytest's order would hide)."""
    import subprocess
    import sys

    for module in ("launcher.autoscaler.daemon", "launcher.autoscaler.decide.evacuate"):
        result = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
