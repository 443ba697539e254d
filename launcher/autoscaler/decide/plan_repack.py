"""Without prices, the same work on fewer new nodes (pure).

The planner places work shape by shape and group by group, each choice blind to what later
shapes will need; without prices every node counts the same, so what matters in the end is
how many new nodes hold everything it put on new nodes. This module takes that content (as
items: a bundle's shape, and for a STRICT_SPREAD group's bundle the group, of which a node
may hold one) and looks for a layout with fewer nodes, two ways:

- **node by node**: while work is left, the type whose one node, filled first-fit with what
  is left (bundles needing a GPU first, then the biggest share of the node first), takes the
  largest share of what is left, each resource's share counted against all of it that is
  left (so a node is worth what it removes of the scarcest work, not how full it looks); the
  same node's contents are repeated while every item it holds has enough left;
- **thinning**: the least used nodes are taken away one at a time when everything they hold
  fits the spare room of the other new nodes.

Both keep the planner's rules: a GPU type is launched only for a node that holds work needing
a GPU (or work no CPU-only type can hold), though CPU work may use its spare room; no type
beyond its room, nor beyond the cluster's. Thinning is tried on the planner's own layout and
on the node-by-node one; the fewest nodes win, and a layout only replaces the planner's when
it has fewer nodes.

The node-by-node pass runs only while the items are few (`MAX_ITEMS`): each of its steps
fills one node per type from every item left. Thinning tries at most `MAX_THINNED` nodes.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from launcher.autoscaler.decide.packing import Resources, Shape, fits, how_many

MAX_ITEMS = 256  # distinct items above which the node-by-node pass is not tried
MAX_THINNED = 64  # nodes thinning tries to take away (the least used first)
MAX_FAILED = 8  # tries in a row that failed, after which thinning stops


class Item(NamedTuple):
    """One kind of thing a new node holds: a bundle of `shape`; `spread` names the
    STRICT_SPREAD group it belongs to (no node holds two of one group's), else -1. (A tuple:
    hashed often, and in C.)"""

    shape: Shape
    spread: int = -1


@dataclass
class Pack:
    """`copies` new nodes of `node_type`, each holding `holds`."""

    node_type: str
    holds: Counter[Item]
    copies: int = 1


@dataclass(frozen=True)
class Kind:
    """A type the layout may use: its resources and how many of its nodes it may have."""

    name: str
    resources: Resources
    room: int

    @property
    def has_gpu(self) -> bool:
        return self.resources.get("GPU", 0.0) > 0


def nodes_in(packs: Iterable[Pack]) -> int:
    return sum(p.copies for p in packs)


def fewer_nodes(first: Sequence[Pack], kinds: Sequence[Kind], total_room: int) -> list[Pack] | None:
    """A layout of everything `first` holds on fewer nodes than `first`, or None.
    `kinds`: the types that may be launched, with room counting `first`'s own nodes;
    `total_room`: how many nodes in all (the cluster's max_workers left, `first`'s counted)."""
    by_name = {k.name: k for k in kinds}
    if any(p.node_type not in by_name for p in first):
        return None  # a node of a type that may not be launched now: leave it all alone
    items: Counter[Item] = Counter()
    for pack in first:
        for item, count in pack.holds.items():
            items[item] += count * pack.copies
    needs_gpu_type = {item: _needs_gpu_type(item, kinds) for item in items}
    tries = [_thin(first, by_name, needs_gpu_type)]
    if len(items) <= MAX_ITEMS:
        greedy = _node_by_node(items, kinds, total_room, needs_gpu_type)
        if greedy is not None:
            tries.append(_thin(greedy, by_name, needs_gpu_type))
    best = min(tries, key=nodes_in)
    return best if nodes_in(best) < nodes_in(first) else None


def _needs_gpu_type(item: Item, kinds: Sequence[Kind]) -> bool:
    """Whether `item` may be the reason a GPU node is launched: it needs a GPU, or no
    CPU-only type holds it."""
    request = dict(item.shape)
    if request.get("GPU", 0.0) > 0:
        return True
    return not any(not k.has_gpu and fits(k.resources, request) for k in kinds)


def _node_by_node(
    items: Counter[Item],
    kinds: Sequence[Kind],
    total_room: int,
    needs_gpu_type: Mapping[Item, bool],
) -> list[Pack] | None:
    left = Counter({i: n for i, n in items.items() if n > 0})
    room = {k.name: k.room for k in kinds}
    packs: list[Pack] = []
    while left:
        demand: dict[str, float] = {}
        for item, count in left.items():
            for key, value in item.shape:
                demand[key] = demand.get(key, 0.0) + value * count
        best: tuple[tuple[float, float], Kind, Counter[Item]] | None = None
        for kind in kinds:
            if room[kind.name] <= 0:
                continue
            holds, free = _fill(kind.resources, left)
            if not holds or (kind.has_gpu and not any(needs_gpu_type[i] for i in holds)):
                continue
            score = (_share(holds, demand), _used(kind.resources, free))
            if best is None or score > best[0]:
                best = (score, kind, holds)
        if best is None or total_room <= 0:
            return None  # something fits no type with room: the planner's layout stands
        _, kind, holds = best
        copies = min(left[i] // n for i, n in holds.items())
        copies = max(1, min(copies, room[kind.name], total_room))
        for item, count in holds.items():
            left[item] -= count * copies
            if left[item] <= 0:
                del left[item]
        room[kind.name] -= copies
        total_room -= copies
        packs.append(Pack(kind.name, holds, copies))
    return packs


def _fill(capacity: Resources, left: Mapping[Item, int]) -> tuple[Counter[Item], dict[str, float]]:
    """One node of `capacity` filled first-fit from `left`: bundles needing a GPU first, then
    those taking the biggest share of the node; at most one of a STRICT_SPREAD group."""
    free = dict(capacity)

    def order(item: Item) -> tuple[bool, float]:
        request = dict(item.shape)
        share = max((v / capacity[k] for k, v in item.shape if capacity.get(k, 0.0) > 0), default=0)
        return request.get("GPU", 0.0) <= 0, -share

    holds: Counter[Item] = Counter()
    for item in sorted(left, key=order):
        request = dict(item.shape)
        count = min(left[item], how_many(free, request), 1 if item.spread >= 0 else left[item])
        if count > 0:
            holds[item] = count
            for key, value in item.shape:
                free[key] = free.get(key, 0.0) - value * count
    return holds, free


def _share(holds: Mapping[Item, int], demand: Mapping[str, float]) -> float:
    """How much of the work left a node takes: per bundle, its largest share of any
    resource's total left."""
    return sum(
        count * max(value / demand[key] for key, value in item.shape if demand[key] > 0)
        for item, count in holds.items()
    )


def _used(capacity: Resources, free: Mapping[str, float]) -> float:
    shares = [(v - free.get(k, 0.0)) / v for k, v in capacity.items() if v > 0]
    return sum(shares) / len(shares) if shares else 0.0


@dataclass
class _Node:
    node_type: str
    holds: Counter[Item]
    free: dict[str, float]
    copies: int


def _thin(
    packs: Sequence[Pack], kinds: Mapping[str, Kind], needs_gpu_type: Mapping[Item, bool]
) -> list[Pack]:
    """`packs` with the least used nodes taken away, one at a time, where all they hold
    fits the other nodes' spare room (and a GPU node keeps work that needs its GPU)."""
    nodes = [_node(p, kinds[p.node_type].resources) for p in packs]
    order = sorted(
        range(len(nodes)),
        key=lambda i: _used(kinds[nodes[i].node_type].resources, nodes[i].free),
    )
    hosts = _hosts(nodes, packs)
    tried = failed = 0
    for index in order:
        while nodes[index].copies > 0 and tried < MAX_THINNED and failed < MAX_FAILED:
            tried += 1
            length = len(nodes)
            if not _take_away(nodes, index, hosts, kinds, needs_gpu_type):
                failed += 1
                break
            failed = 0
            hosts.extend(range(length, len(nodes)))  # copies split off by the move
        if tried >= MAX_THINNED or failed >= MAX_FAILED:
            break
    out: list[Pack] = []
    for node in nodes:
        if node.copies > 0:
            out.append(Pack(node.node_type, node.holds, node.copies))
    return out


def _hosts(nodes: Sequence[_Node], packs: Sequence[Pack]) -> list[int]:
    """The nodes that may take anything: each resource every item needs, at least its
    smallest amount free (most nodes are full; nodes added by a move are looked at
    besides)."""
    shapes = {item.shape for pack in packs for item in pack.holds}
    needed: dict[str, float] | None = None
    for shape in shapes:
        amounts = dict(shape)
        if needed is None:
            needed = amounts
        else:
            needed = {k: min(v, amounts[k]) for k, v in needed.items() if k in amounts}
    least = needed or {}
    return [i for i, n in enumerate(nodes) if fits(n.free, least)]


def _node(pack: Pack, capacity: Resources) -> _Node:
    free = dict(capacity)
    for item, count in pack.holds.items():
        for key, value in item.shape:
            free[key] = free.get(key, 0.0) - value * count
    return _Node(pack.node_type, Counter(pack.holds), free, pack.copies)


def _take_away(
    nodes: list[_Node],
    index: int,
    hosts: Sequence[int],
    kinds: Mapping[str, Kind],
    needs_gpu_type: Mapping[Item, bool],
) -> bool:
    """Move one node of `nodes[index]`'s contents into the others' spare room; True when all
    of it moved (the node is gone), else nothing changes. A host of many copies gives up
    one copy, as a node of its own, to what it takes."""
    gone = nodes[index]
    length = len(nodes)
    saved: dict[int, tuple[int, Counter[Item], dict[str, float]]] = {
        index: (gone.copies, gone.holds, gone.free)
    }
    gone.copies -= 1
    for item, held in gone.holds.items():
        request, count = dict(item.shape), held
        for host_index in itertools.chain(hosts, range(length, len(nodes))):
            host = nodes[host_index]
            if host.copies <= 0 or not fits(host.free, request):
                continue
            if item.spread >= 0 and host.holds[item] > 0:
                continue
            fit = min(count, how_many(host.free, request), 1 if item.spread >= 0 else count)
            if host_index not in saved:
                saved[host_index] = (host.copies, host.holds, host.free)
            if host.copies > 1:  # one of its copies becomes a node of its own
                host.copies -= 1
                host = _Node(host.node_type, Counter(host.holds), dict(host.free), 1)
                nodes.append(host)
            else:  # changed in place: the saved ones stay as they were
                host.holds, host.free = Counter(host.holds), dict(host.free)
            host.holds[item] += fit
            for key, value in item.shape:
                host.free[key] = host.free.get(key, 0.0) - value * fit
            count -= fit
            if count <= 0:
                break
        if count > 0:
            _undo(nodes, length, saved)
            return False
    if not _gpu_nodes_keep_a_reason(nodes, saved, length, kinds, needs_gpu_type):
        _undo(nodes, length, saved)
        return False
    return True


def _gpu_nodes_keep_a_reason(
    nodes: Sequence[_Node],
    changed: Iterable[int],
    length: int,
    kinds: Mapping[str, Kind],
    needs_gpu_type: Mapping[Item, bool],
) -> bool:
    """Whether every GPU node changed by a move still holds work that needs a GPU type."""
    touched = [nodes[i] for i in changed] + list(nodes[length:])
    return all(
        not kinds[n.node_type].has_gpu or any(needs_gpu_type[i] for i in n.holds if n.holds[i])
        for n in touched
        if n.copies > 0
    )


def _undo(
    nodes: list[_Node],
    length: int,
    saved: Mapping[int, tuple[int, Counter[Item], dict[str, float]]],
) -> None:
    del nodes[length:]  # copies split off by the move: gone again
    for index, (copies, holds, free) in saved.items():
        if index < length:
            node = nodes[index]
            node.copies, node.holds, node.free = copies, holds, free


__all__ = [
    "MAX_FAILED",
    "MAX_ITEMS",
    "MAX_THINNED",
    "Item",
    "Kind",
    "Pack",
    "fewer_nodes",
    "nodes_in",
]
