"""Which node type to launch for a shape when prices are known, and what else it can hold
(pure): a node is worth what its bundles would cost on their own, and the type chosen is the
one whose node, filled with the lead shape and then with other pending shapes, is worth the
most per dollar.

A bundle's worth is its price per bundle on the type that holds its shape most cheaply, full
nodes of that shape only. A node of type t holding k_s bundles of each shape s is worth
sum_s k_s * worth_s, and its score is that over t's price: 1.0 means it costs what those
bundles would cost apart, above 1.0 that packing them together saves money (a GPU node's
spare CPUs taking CPU work). Within a family whose price is linear in size, a small and a big
node score the same; such ties (within TIE, relative) go to the node worth the most, the
bigger one, so the same money buys fewer nodes. A mix is repeated on as many nodes as the
pending counts fill completely, so choosing costs a few steps per shape, not one per node.

The prices given here include the planner's per-node overhead (`Settings.node_overhead`), so
that a node's worth is weighed against what it really costs to run one more node.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from launcher.autoscaler.decide.packing import Resources, Shape, fits, how_many, needs_gpu

# What a node costs besides its price (Ray's daemons, its disk and address, one more machine
# to start and lose), as a share of the cheapest type's price: the default of
# `Settings.node_overhead`. Measured on bench/planner_cost.py: 0 gives the cheapest plans and
# the most nodes; 1.0 cuts nodes (2.1x -> 1.1x Ray's on the aws family) for 1-5 % more cost
# per family (against the shape-aware bound).
NODE_OVERHEAD = 1.0
TIE = 1e-6  # scores this close (relative) are equal: float noise in prices linear in size
MAX_OTHERS = 8  # other shapes offered to fill a node, the most valuable pending first


@dataclass(frozen=True)
class Offer:
    """A launchable type: its capacity, hourly price, priority and how many may launch."""

    name: str
    resources: Resources
    price: float
    room: int
    priority: int = 0


@dataclass(frozen=True)
class Mix:
    """`nodes` nodes of `node_type`, each holding `lead` bundles of the shape launched for
    and `others` (shape, bundles) of other pending shapes."""

    node_type: str
    lead: int
    others: tuple[tuple[Shape, int], ...]
    nodes: int


def worth(request: Resources, offers: Sequence[Offer]) -> float | None:
    """The least price per bundle of `request` on full nodes of one type (CPU-only work on
    CPU-only types when one fits); None when no type holds it."""
    fitting = [o for o in offers if fits(o.resources, request)]
    if not needs_gpu(request):
        fitting = [o for o in fitting if o.resources.get("GPU", 0) <= 0] or fitting
    if not fitting:
        return None
    return min(o.price / max(1, how_many(o.resources, request)) for o in fitting)


# Another pending shape offered to fill a node: its shape, request, how many are unplaced,
# and its worth (`worth`).
Candidate = tuple[Shape, Resources, int, float]


def top_others(
    left: Iterable[tuple[Shape, int]], shape: Shape, value: Callable[[Shape], float | None]
) -> list[Candidate]:
    """The MAX_OTHERS shapes of `left` (shape, unplaced) other than `shape` whose unplaced
    bundles are worth the most (ties: the first in `left`), without sorting them all."""
    found = []
    for other, n in left:
        if n > 0 and other != shape:
            each = value(other)
            if each is not None:
                found.append((other, dict(other), n, each))
    return heapq.nsmallest(MAX_OTHERS, found, key=lambda c: -c[2] * c[3])


class Waiting:
    """How many bundles of each shape are still unplaced, with the shapes ordered by what
    their unplaced bundles are worth (`top`), kept up to date as bundles are placed: a heap
    whose entries are checked against the counts when read, so reading costs a few steps,
    not one per shape. `top` gives what `top_others` gives over the same counts."""

    def __init__(
        self, counts: Iterable[tuple[Shape, int]], value: Callable[[Shape], float | None]
    ) -> None:
        self.counts: dict[Shape, int] = {}
        self._order: dict[Shape, int] = {}  # ties: the first given first
        self._worth: dict[Shape, float] = {}
        self._requests: dict[Shape, Resources] = {}
        self._heap: list[tuple[float, int, Shape, int]] = []
        for shape, n in counts:
            self._order[shape] = len(self._order)
            self.counts[shape] = n
            each = value(shape)
            if each is not None:
                self._worth[shape], self._requests[shape] = each, dict(shape)
                self._push(shape)

    def __getitem__(self, shape: Shape) -> int:
        return self.counts.get(shape, 0)

    def take(self, shape: Shape, n: int) -> None:
        """`n` bundles of `shape` are placed (or, with the count's rest, given up)."""
        if n:  # one entry per count: the heap never holds a shape twice at one count
            self.counts[shape] -= n
            self._push(shape)

    def top(self, shape: Shape) -> list[Candidate]:
        """The MAX_OTHERS shapes other than `shape` whose unplaced bundles are worth the most."""
        found: list[tuple[float, int, Shape, int]] = []
        kept: list[tuple[float, int, Shape, int]] = []
        while self._heap and len(found) < MAX_OTHERS:
            entry = heapq.heappop(self._heap)
            _, _, other, n = entry
            if n != self.counts[other]:
                continue  # stale: the count changed since, and a newer entry has it
            (kept if other == shape else found).append(entry)
        for entry in (*found, *kept):
            heapq.heappush(self._heap, entry)
        return [(s, self._requests[s], n, self._worth[s]) for _, _, s, n in found]

    def _push(self, shape: Shape) -> None:
        n = self.counts[shape]
        if n > 0 and shape in self._worth:
            key = -n * self._worth[shape]
            heapq.heappush(self._heap, (key, self._order[shape], shape, n))


def choose_mix(
    request: Resources,
    count: int,
    offers: Sequence[Offer],
    candidates: Sequence[Candidate],
    lead_worth: float,
) -> Mix | None:
    """The mix to launch for `count` bundles of `request` among `offers` (already filtered
    to types that may hold it); `candidates` are the other pending shapes to fill a node's
    spare room with (`top_others` or `Waiting.top`)."""
    best: tuple[float, float, float, str] | None = None
    chosen: Mix | None = None
    scored: list[tuple[float, float, Offer, int, tuple[tuple[Shape, int], ...]]] = []
    for offer in offers:
        if offer.room <= 0:
            continue
        lead = min(how_many(offer.resources, request), count)
        if lead <= 0:
            continue
        rest = {k: v - lead * request.get(k, 0.0) for k, v in offer.resources.items()}
        value, packed = _fill(rest, candidates)
        value += lead * lead_worth
        score = value / offer.price if offer.price > 0 else math.inf  # a free type: best
        scored.append((score, value, offer, lead, packed))
    if not scored:
        return None
    top = max(score for score, *_ in scored)
    for score, value, offer, lead, packed in scored:
        if score < top * (1 - TIE):
            continue
        key = (value, float(offer.priority), -offer.price, offer.name)
        if best is None or _better(key, best):
            best = (value, float(offer.priority), -offer.price, offer.name)
            chosen = Mix(offer.name, lead, packed, _repeats(count, lead, packed, candidates, offer))
    return chosen


def _better(key: tuple[float, float, float, str], best: tuple[float, float, float, str]) -> bool:
    """More worth per node, then priority, then cheaper, then the name (for determinism)."""
    if abs(key[0] - best[0]) > TIE * max(key[0], best[0]):
        return key[0] > best[0]
    if key[1:3] != best[1:3]:
        return key[1:3] > best[1:3]
    return key[3] < best[3]


def _fill(
    rest: dict[str, float],
    candidates: Sequence[Candidate],
) -> tuple[float, tuple[tuple[Shape, int], ...]]:
    """Fill `rest` with the other shapes, each step taking the shape that would be worth
    the most if it filled what is left alone; returns the worth added and what was packed."""
    value = 0.0
    packed: list[tuple[Shape, int]] = []
    unused = list(candidates)
    while unused:
        best, best_value, best_n = -1, 0.0, 0
        for i, (_, request, left, each) in enumerate(unused):
            n = min(how_many(rest, request), left)
            if n > 0 and n * each > best_value:
                best, best_value, best_n = i, n * each, n
        if best < 0:
            break
        shape, request, _, _ = unused.pop(best)
        for k, v in request.items():
            rest[k] = rest.get(k, 0.0) - best_n * v
        value += best_value
        packed.append((shape, best_n))
    return value, tuple(packed)


def _repeats(
    count: int,
    lead: int,
    packed: Sequence[tuple[Shape, int]],
    candidates: Sequence[Candidate],
    offer: Offer,
) -> int:
    """How many nodes the same mix fills completely (at least one, at most the room)."""
    unplaced = {shape: n for shape, _, n, _ in candidates}
    nodes = count // lead
    for shape, n in packed:
        nodes = min(nodes, unplaced[shape] // n)
    return max(1, min(nodes, offer.room))
