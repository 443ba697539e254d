"""`wait_unlisted`: the one wait, shared by autostop and kill-random-node, for removed
nodes to leave the provider's listing."""

from __future__ import annotations

from typing import cast

from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState, wait_unlisted


class _Listing:
    """A provider whose listing is given per call; the clock moves only when it sleeps."""

    def __init__(self, listings: list[list[Node]]) -> None:
        self.listings = listings
        self.now = 0.0
        self.calls = 0

    def nodes(self) -> list[Node]:
        self.calls += 1
        return self.listings[min(self.calls, len(self.listings)) - 1]

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _node(node_id: str, state: NodeState = NodeState.RUNNING) -> Node:
    return Node(node_id, NodeKind.WORKER, "w", "10.0.0.1", state)


def _wait(fake: _Listing, gone_states: tuple[NodeState, ...] = ()) -> list[Node]:
    provider = cast(NodeProvider, fake)
    return wait_unlisted(
        provider,
        ["a", "b"],
        10.0,
        clock=lambda: fake.now,
        sleep=fake.sleep,
        gone_states=gone_states,
    )


def test_returns_once_none_of_the_nodes_is_listed() -> None:
    fake = _Listing([[_node("a"), _node("b"), _node("c")], [_node("b"), _node("c")], [_node("c")]])
    assert _wait(fake) == []
    assert fake.calls == 3 and fake.now == 4.0


def test_a_node_in_a_gone_state_counts_as_gone_only_when_asked() -> None:
    preempted = [_node("a", NodeState.PREEMPTED)]
    assert _wait(_Listing([preempted]), gone_states=(NodeState.PREEMPTED,)) == []
    left = _wait(_Listing([preempted]))
    assert [n.id for n in left] == ["a"]


def test_gives_the_nodes_still_listed_after_the_timeout() -> None:
    fake = _Listing([[_node("a"), _node("c")]])
    left = _wait(fake)
    assert [n.id for n in left] == ["a"]
    assert fake.now == 10.0  # polled every 2 s until the deadline, then one last look
