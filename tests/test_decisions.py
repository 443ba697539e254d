"""Pure decisions: what the updater runs on a node, and what the daemon launches."""

from __future__ import annotations

import pytest

from launcher.autoscaler.decide.broken import broken_workers
from launcher.autoscaler.decide.demand import RayNode
from launcher.autoscaler.decide.planner import NodeView, Snapshot, plan
from launcher.autoscaler.decide.view import planner_settings
from launcher.config.loader import parse_config
from launcher.pricing import load_prices
from launcher.providers.base import (
    TAG_SETUP_HASH,
    TAG_START_HASH,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeState,
    NodeStatus,
)
from launcher.providers.registry import SPECS
from launcher.updater.hashing import NodeHashes
from launcher.updater.updater import UpdateSteps, decide_steps

HASHES = NodeHashes(setup="s1", start="r1")
APPLIED = {TAG_STATUS: NodeStatus.UP_TO_DATE, TAG_SETUP_HASH: "s1", TAG_START_HASH: "r1"}


def test_new_node_gets_everything() -> None:
    assert decide_steps({}, HASHES, ray_running=False) == UpdateSteps(True, True, True)


def test_unchanged_running_node_gets_nothing() -> None:
    assert decide_steps(APPLIED, HASHES, ray_running=True).nothing


def test_dead_ray_is_restarted_without_setup() -> None:
    assert decide_steps(APPLIED, HASHES, ray_running=False) == UpdateSteps(False, False, True)


def test_changed_setup_reruns_setup_and_restarts() -> None:
    steps = decide_steps({**APPLIED, TAG_SETUP_HASH: "old"}, HASHES, ray_running=True)
    assert steps == UpdateSteps(True, True, True)


def test_no_restart_keeps_ray_running() -> None:
    steps = decide_steps(
        {**APPLIED, TAG_SETUP_HASH: "old"}, HASHES, ray_running=True, no_restart=True
    )
    assert steps == UpdateSteps(True, True, False)
    # ...but a node without Ray still gets it started.
    assert decide_steps({}, HASHES, ray_running=False, no_restart=True).start_ray


def test_restart_only_skips_setup() -> None:
    steps = decide_steps(
        {**APPLIED, TAG_SETUP_HASH: "old"}, HASHES, ray_running=True, restart_only=True
    )
    assert steps == UpdateSteps(sync_files=True, setup=False, start_ray=True)


def test_failed_setup_is_retried() -> None:
    # A failed update never tags its setup hash: the node carries none, or an older one.
    failed = {TAG_STATUS: NodeStatus.FAILED}
    assert decide_steps(failed, HASHES, ray_running=False) == UpdateSteps(True, True, True)
    steps = decide_steps({**APPLIED, **failed, TAG_SETUP_HASH: "s0"}, HASHES, ray_running=False)
    assert steps == UpdateSteps(True, True, True)


def test_a_node_whose_setup_is_on_disk_only_gets_ray_started() -> None:
    # A stopped worker started again (the autoscaler tags it uninitialized), or one whose
    # Ray failed to start after its setup succeeded.
    for status in (NodeStatus.UNINITIALIZED, NodeStatus.FAILED):
        steps = decide_steps({**APPLIED, TAG_STATUS: status}, HASHES, ray_running=False)
        assert steps == UpdateSteps(sync_files=False, setup=False, start_ray=True)


CONFIG = parse_config(
    "cluster_name: d\nmax_workers: 5\nprovider: {type: localhost}\n"
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
    "  a: {node_config: {}, resources: {CPU: 1}, min_workers: 2}\n"
    "  b: {node_config: {}, resources: {CPU: 1}, min_workers: 3}\n"
    "head_node_type: head\n",
    "inline",
)
SETTINGS = planner_settings(CONFIG, SPECS["localhost"], load_prices())
HEAD = NodeView("h", "head", is_head=True, total={"CPU": 1}, available={"CPU": 1})


def _worker(
    node_id: str,
    node_type: str,
    state: NodeState = NodeState.RUNNING,
    status: NodeStatus = NodeStatus.UP_TO_DATE,
    ip: str = "127.0.0.9",
) -> Node:
    return Node(node_id, NodeKind.WORKER, node_type, ip, state, {TAG_STATUS: status})


def _view(node: Node) -> NodeView:
    return NodeView(node.id, node.node_type, total={"CPU": 1}, available={"CPU": 1})


def test_min_workers_are_launched_per_type() -> None:
    decisions = plan(Snapshot((HEAD,)), SETTINGS)
    assert decisions.launch == {"a": 2, "b": 3}
    assert {str(d) for d in decisions.decisions} == {
        "launch 2 x a: below min_workers (0 < 2)",
        "launch 3 x b: below min_workers (0 < 3)",
    }


def test_dead_and_failed_workers_are_replaced() -> None:
    nodes = [
        _worker("w1", "a", NodeState.DEAD),
        _worker("w2", "a", status=NodeStatus.FAILED),
        _worker("w3", "b"),
        _worker("w4", "b"),
        _worker("w5", "b"),
    ]
    broken = broken_workers(CONFIG, nodes, set())
    assert {node_id for node_id, _ in broken} == {"w1", "w2"}
    kept = tuple(_view(n) for n in nodes if n.id not in {i for i, _ in broken})
    assert plan(Snapshot((HEAD, *kept)), SETTINGS).launch == {"a": 2}


def test_nodes_being_set_up_are_left_alone() -> None:
    nodes = [_worker("w2", "a", status=NodeStatus.FAILED)]
    assert broken_workers(CONFIG, nodes, {"w2"}) == ()


def test_a_worker_whose_ray_node_is_dead_in_the_gcs_is_replaced() -> None:
    # The provider sees all three machines running (an on-prem machine stays on when its
    # Ray dies); Ray's GCS knows better.
    nodes = [_worker(f"w{i}", "b", ip=f"10.0.0.{i}") for i in (1, 2, 3)]
    ray_nodes = [
        RayNode("r1", "10.0.0.1", {}, {}, 0.0, alive=False),  # died, not restarted
        RayNode("r2", "10.0.0.2", {}, {}, 0.0, alive=False),  # died, then started again
        RayNode("r2b", "10.0.0.2", {}, {}, 0.0, alive=True),
        RayNode("r3", "10.0.0.3", {}, {}, 0.0, alive=True),
    ]
    broken = broken_workers(CONFIG, nodes, set(), ray_nodes)
    assert broken == (("w1", "Ray on it stopped (Ray reports the node dead)"),)
    assert broken_workers(CONFIG, nodes, {"w1"}, ray_nodes) == ()  # being set up again


def test_the_autoscaler_stop_wait_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from launcher.cluster.head import STOP_WAIT_S, stop_wait_s
    from launcher.errors import UsageError

    monkeypatch.delenv("LAUNCHER_AUTOSCALER_STOP_WAIT_S", raising=False)
    assert stop_wait_s() == STOP_WAIT_S
    monkeypatch.setenv("LAUNCHER_AUTOSCALER_STOP_WAIT_S", "2.5")
    assert stop_wait_s() == 2.5
    monkeypatch.setenv("LAUNCHER_AUTOSCALER_STOP_WAIT_S", "soon")
    with pytest.raises(UsageError, match="not a number of seconds"):
        stop_wait_s()
