"""The table of a worker's states in the daemon (decide/node_states.py): the moves it allows,
the one place that makes them, and which moves a listing calls for."""

from __future__ import annotations

import dataclasses

import pytest

from launcher.autoscaler.decide.node_states import (
    TRANSITIONS,
    InvalidTransition,
    NodeLife,
    NodeStates,
    Transition,
    follow,
)
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState

L = NodeLife
WORKER = Node(
    "w1", NodeKind.WORKER, "cpu", "10.0.0.1", NodeState.RUNNING, {TAG_STATUS: "up-to-date"}
)
NOTICED = dataclasses.replace(WORKER, reclaim_at=1_000.0)
PREEMPTED = dataclasses.replace(WORKER, state=NodeState.PREEMPTED)


def test_every_state_has_its_moves_and_gone_is_the_end() -> None:
    assert set(TRANSITIONS) == set(NodeLife)
    assert TRANSITIONS[L.GONE] == frozenset()
    for state, allowed in TRANSITIONS.items():
        assert state not in allowed  # staying is no move
        if state is not L.GONE:
            assert L.GONE in allowed  # any node may stop being listed


def test_the_table_allows_the_life_of_a_noticed_worker() -> None:
    assert TRANSITIONS[L.ACTIVE] == {L.NOTICED, L.PREEMPTED, L.GONE}
    assert TRANSITIONS[L.NOTICED] == {L.EVACUATED, L.RECLAIMED, L.ACTIVE, L.GONE}
    assert TRANSITIONS[L.EVACUATED] == {L.RECLAIMED, L.ACTIVE, L.GONE}
    assert TRANSITIONS[L.PREEMPTED] == {L.NOTICED, L.ACTIVE, L.GONE}
    assert TRANSITIONS[L.RECLAIMED] == {L.NOTICED, L.ACTIVE, L.GONE}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b, a)
        for b in NodeLife
        for a in NodeLife
        if b is not L.GONE and a not in TRANSITIONS[b] and a is not b
    ],
)
def test_a_move_the_table_does_not_allow_is_refused(before: NodeLife, after: NodeLife) -> None:
    states = NodeStates()
    _reach(states, "w1", before)
    with pytest.raises(InvalidTransition):
        states.move("w1", after)
    assert states["w1"] is before


def test_a_node_gone_is_forgotten_not_held_as_gone() -> None:
    states = NodeStates()
    states.move("w1", L.PREEMPTED)
    states.move("w1", L.GONE)
    assert states["w1"] is L.ACTIVE and L.GONE not in {s for _, s in states.items()}


def _reach(states: NodeStates, node_id: str, target: NodeLife) -> None:
    path = {
        L.ACTIVE: [],
        L.NOTICED: [L.NOTICED],
        L.EVACUATED: [L.NOTICED, L.EVACUATED],
        L.PREEMPTED: [L.PREEMPTED],
        L.RECLAIMED: [L.NOTICED, L.RECLAIMED],
    }[target]
    for step in path:
        states.move(node_id, step)


def test_an_unknown_node_is_active_and_active_or_gone_nodes_are_forgotten() -> None:
    states = NodeStates()
    assert states["nobody"] is L.ACTIVE
    states.move("w1", L.NOTICED)
    states.move("w1", L.EVACUATED)
    assert states.in_state(L.EVACUATED) == {"w1"}
    states.move("w1", L.GONE)
    assert list(states.items()) == []
    assert states["w1"] is L.ACTIVE  # listed again: followed anew


def test_a_notice_is_told_once_and_its_reclaim_not_again() -> None:
    states = NodeStates()
    (noticed,) = follow(states, [NOTICED])
    assert (noticed.before, noticed.after, noticed.tells) == (L.ACTIVE, L.NOTICED, True)
    states.apply(noticed)
    assert follow(states, [NOTICED]) == []  # the same notice next tick: nothing new
    states.move("w1", L.EVACUATED)
    assert follow(states, [NOTICED]) == []
    (reclaimed,) = follow(states, [PREEMPTED])
    assert (reclaimed.after, reclaimed.tells) == (L.RECLAIMED, None)
    states.apply(reclaimed)
    (gone,) = follow(states, [])
    assert gone == Transition("w1", L.RECLAIMED, L.GONE)
    states.apply(gone)
    assert list(states.items()) == []


def test_a_preemption_without_notice_is_told_once_until_the_node_runs_again() -> None:
    states = NodeStates()
    (preempted,) = follow(states, [PREEMPTED])
    assert (preempted.after, preempted.tells) == (L.PREEMPTED, False)
    states.apply(preempted)
    assert follow(states, [PREEMPTED]) == []
    (running,) = follow(states, [WORKER])
    assert (running.after, running.tells) == (L.ACTIVE, None)
    states.apply(running)
    assert follow(states, [PREEMPTED])[0].tells is False  # preempted again: told again


def test_a_withdrawn_notice_makes_the_node_active_and_a_new_one_is_told() -> None:
    states = NodeStates()
    states.apply(follow(states, [NOTICED])[0])
    states.apply(follow(states, [WORKER])[0])
    assert states["w1"] is L.ACTIVE
    assert follow(states, [NOTICED])[0].tells is True


def test_a_head_is_never_noticed_but_may_be_preempted() -> None:
    head = dataclasses.replace(NOTICED, id="h", kind=NodeKind.HEAD)
    assert follow(NodeStates(), [head]) == []
    (taken,) = follow(NodeStates(), [dataclasses.replace(head, state=NodeState.PREEMPTED)])
    assert taken.after is L.PREEMPTED


def test_applying_a_move_made_stale_by_another_is_refused() -> None:
    states = NodeStates()
    (noticed,) = follow(states, [NOTICED])
    states.apply(noticed)
    with pytest.raises(InvalidTransition):
        states.apply(noticed)  # the node is NOTICED already, not ACTIVE
