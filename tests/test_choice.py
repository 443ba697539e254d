"""The daemon's tick decision (decide/choice.py): pure, typed, and the same text as logged."""

from __future__ import annotations

import copy
import dataclasses

from launcher.autoscaler.decide.actions import RECORDED, Action
from launcher.autoscaler.decide.choice import RECLAIM_GRACE_S, Facts, choose, kept_notices
from launcher.autoscaler.decide.demand import Demand, RayNode
from launcher.autoscaler.decide.view import planner_settings
from launcher.config.loader import parse_config
from launcher.pricing import load_prices
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState, NodeStatus
from launcher.providers.registry import SPECS

CONFIG = parse_config(
    "cluster_name: c\nmax_workers: 5\nprovider: {type: localhost}\n"
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
    "  a: {node_config: {}, resources: {CPU: 2}, min_workers: 1}\n"
    "head_node_type: head\n",
    "inline",
)
SETTINGS = planner_settings(CONFIG, SPECS["localhost"], load_prices())
UP = {TAG_STATUS: NodeStatus.UP_TO_DATE}
HEAD = Node("h", NodeKind.HEAD, "head", "127.0.0.1", NodeState.RUNNING, UP)
NOW = 1_000_000.0


NO_DEMAND = Demand()


def _facts(nodes: list[Node], demand: Demand = NO_DEMAND) -> Facts:
    return Facts(nodes, nodes, demand, frozenset(), frozenset(), (), {}, False, NOW)


def test_choosing_twice_gives_the_same_choice_and_changes_nothing() -> None:
    failed = Node(
        "w1", NodeKind.WORKER, "a", "127.0.0.2", NodeState.RUNNING, {TAG_STATUS: NodeStatus.FAILED}
    )
    new = Node("w2", NodeKind.WORKER, "a", "127.0.0.3", NodeState.RUNNING, {})
    facts = _facts([HEAD, failed, new])
    before = copy.deepcopy(facts)
    first, second = choose(CONFIG, SETTINGS, facts), choose(CONFIG, SETTINGS, facts)
    assert first == second
    assert facts == before
    assert first.broken == (("w1", first.broken[0][1]),)
    assert [n.id for n, files_only in first.setups if not files_only] == ["w2"]
    assert first.acts


def test_decisions_are_typed_and_render_as_the_log_always_showed() -> None:
    failed = Node(
        "w1", NodeKind.WORKER, "a", "127.0.0.2", NodeState.RUNNING, {TAG_STATUS: NodeStatus.FAILED}
    )
    choice = choose(CONFIG, SETTINGS, _facts([HEAD, failed]))
    terminate, *rest = choice.decisions
    assert terminate.action is Action.TERMINATE and terminate.action == "terminate"
    assert str(terminate) == f"terminate w1: {choice.broken[0][1]}"
    assert choice.terminate[0] == "w1"
    launch = next(d for d in rest if d.action is Action.LAUNCH)
    assert str(launch).startswith("launch 1 x a: ")
    assert Action.LAUNCH in RECORDED and Action.WAIT not in RECORDED


def test_a_noticed_worker_is_planned_as_gone_and_not_replaced_as_broken() -> None:
    noticed = Node(
        "w1", NodeKind.WORKER, "a", "127.0.0.2", NodeState.RUNNING, UP, reclaim_at=NOW + 60
    )
    ray = RayNode("r1", "127.0.0.2", {"CPU": 2}, {"CPU": 2}, 0.0, True)
    choice = choose(CONFIG, SETTINGS, _facts([HEAD, noticed], Demand(nodes=(ray,))))
    assert choice.broken == ()
    assert [e.node.id for e in choice.evacuate] == ["w1"]  # nothing of Ray's runs on it
    assert choice.result.launches() == [("a", 1, None)]  # its replacement, now
    done = dataclasses.replace(_facts([HEAD, noticed], Demand(nodes=(ray,))), evacuated={"w1"})
    assert choose(CONFIG, SETTINGS, done).evacuate == []


def test_a_noticed_worker_past_its_reclaim_and_grace_is_replaced_as_broken() -> None:
    dead = Node(
        "w1",
        NodeKind.WORKER,
        "a",
        "127.0.0.2",
        NodeState.RUNNING,
        UP,
        reclaim_at=NOW - RECLAIM_GRACE_S - 1,
    )
    ray = RayNode("r1", "127.0.0.2", {"CPU": 2}, {"CPU": 2}, 0.0, False)
    choice = choose(CONFIG, SETTINGS, _facts([HEAD, dead], Demand(nodes=(ray,))))
    assert [i for i, _ in choice.broken] == ["w1"]


def test_reported_notices_are_kept_while_their_node_is_listed() -> None:
    kept = kept_notices({"w1": 5.0, "gone": 6.0}, [("w2", 7.0)], {"w1", "w2"})
    assert kept == {"w1": 5.0, "w2": 7.0}
