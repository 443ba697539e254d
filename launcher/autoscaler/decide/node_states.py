"""A worker's life as the daemon follows it: one table of states and the moves it allows.

Every listed worker is ACTIVE unless the daemon has noted something about it:
- NOTICED: its provider (or the node itself) gave notice it takes it back; the executor
  was told (its type and zone are avoided) and it is planned as gone;
- EVACUATED: a noticed worker whose Ray the daemon stopped so its work moves now;
- PREEMPTED: listed as taken back without a notice first; the executor was told;
- RECLAIMED: a noticed worker since taken back: its notice and its reclaim count once,
  so the executor is not told again;
- GONE: no longer listed; the table forgets it (listed again, it starts ACTIVE anew).

`TRANSITIONS` maps each state to the states it may move to, and `NodeStates.move` is the
one place a move is made: it refuses one the table does not allow. `follow` says, from a
listing, which moves to make; the daemon applies them (and tells the executor of each move
whose `tells` says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from launcher.providers.base import Node, NodeKind, NodeState


class NodeLife(StrEnum):
    ACTIVE = "active"
    NOTICED = "noticed"
    EVACUATED = "evacuated"
    PREEMPTED = "preempted"
    RECLAIMED = "reclaimed"
    GONE = "gone"


_L = NodeLife
TRANSITIONS: Mapping[NodeLife, frozenset[NodeLife]] = {
    _L.ACTIVE: frozenset({_L.NOTICED, _L.PREEMPTED, _L.GONE}),
    # A notice may be withdrawn (the node listed again without one): ACTIVE.
    _L.NOTICED: frozenset({_L.EVACUATED, _L.RECLAIMED, _L.ACTIVE, _L.GONE}),
    _L.EVACUATED: frozenset({_L.RECLAIMED, _L.ACTIVE, _L.GONE}),
    # A preempted node listed running again (or with a notice) is followed anew.
    _L.PREEMPTED: frozenset({_L.NOTICED, _L.ACTIVE, _L.GONE}),
    _L.RECLAIMED: frozenset({_L.NOTICED, _L.ACTIVE, _L.GONE}),
    _L.GONE: frozenset(),
}


class InvalidTransition(ValueError):
    """A move the table does not allow (a bug in the daemon, not a state of the cluster)."""


@dataclass(frozen=True)
class Transition:
    node_id: str
    before: NodeLife
    after: NodeLife
    node: Node | None = None  # as listed (None for a node gone)

    @property
    def tells(self) -> bool | None:
        """Whether the executor is told of this move: True for a notice, False for a
        preemption without one, None when it is not told (already told, or no news)."""
        if self.after is NodeLife.NOTICED and self.before in (NodeLife.ACTIVE, _L.PREEMPTED):
            return True
        if self.after is NodeLife.PREEMPTED and self.before is NodeLife.ACTIVE:
            return False
        return None


def noticed(node: Node) -> bool:
    """A worker the provider has given notice it takes back, not taken yet."""
    return (
        node.kind is NodeKind.WORKER
        and node.reclaim_at is not None
        and node.state is not NodeState.PREEMPTED
    )


def seen(node: Node) -> NodeLife:
    """What a listing says of `node`: PREEMPTED, NOTICED or ACTIVE."""
    if node.state is NodeState.PREEMPTED:
        return NodeLife.PREEMPTED
    return NodeLife.NOTICED if noticed(node) else NodeLife.ACTIVE


def _target(before: NodeLife, shown: NodeLife) -> NodeLife:
    """Where a node in state `before` goes when a listing shows it as `shown`."""
    if shown is NodeLife.PREEMPTED:
        noticed_before = before in (NodeLife.NOTICED, NodeLife.EVACUATED, NodeLife.RECLAIMED)
        return NodeLife.RECLAIMED if noticed_before else NodeLife.PREEMPTED
    if shown is NodeLife.NOTICED and before in (NodeLife.NOTICED, NodeLife.EVACUATED):
        return before
    return shown


class NodeStates:
    """The state of each worker the daemon noted something about (the others are ACTIVE)."""

    def __init__(self) -> None:
        self._states: dict[str, NodeLife] = {}
        self.moves = 0  # moves made so far: the table is as it was while this stays

    def __getitem__(self, node_id: str) -> NodeLife:
        return self._states.get(node_id, NodeLife.ACTIVE)

    def in_state(self, *states: NodeLife) -> set[str]:
        return {i for i, s in self._states.items() if s in states}

    def items(self) -> Iterable[tuple[str, NodeLife]]:
        return self._states.items()

    def move(self, node_id: str, to: NodeLife) -> None:
        """Move `node_id` to `to`; refuse a move `TRANSITIONS` does not allow."""
        now = self[node_id]
        if to not in TRANSITIONS[now]:
            raise InvalidTransition(f"{node_id}: {now} cannot become {to}")
        self.moves += 1
        if to in (NodeLife.ACTIVE, NodeLife.GONE):
            self._states.pop(node_id, None)
        else:
            self._states[node_id] = to

    def apply(self, transition: Transition) -> None:
        """Make a move `follow` gave; refuse it if the node has moved since."""
        now = self[transition.node_id]
        if now is not transition.before:
            raise InvalidTransition(f"{transition.node_id}: is {now}, not {transition.before}")
        self.move(transition.node_id, transition.after)


def follow(states: NodeStates, listed: Iterable[Node]) -> list[Transition]:
    """The moves a listing calls for (pure: `states` is only read). `listed` are the nodes
    listed now; a node the table holds that is not among them goes GONE."""
    out = []
    ids = set()
    for node in listed:
        ids.add(node.id)
        before = states[node.id]
        after = _target(before, seen(node))
        if after is not before:
            out.append(Transition(node.id, before, after, node))
    out += [Transition(i, s, NodeLife.GONE) for i, s in states.items() if i not in ids]
    return out
