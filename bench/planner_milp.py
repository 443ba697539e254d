"""An integer-programming bound for the cost scenarios of `bench_planner.py`, solved by HiGHS
(`highspy`, a dev dependency: the planner itself never imports it). Where the LP bounds of
`launcher.autoscaler.plan_bound` are fractional and blind to how shapes fragment a node,
this model is exact: its optimum is the least hourly cost of the new nodes of any plan that
places every bundle a node type can hold.

The model, per scenario:

- Shapes. Bundles count by shape (their positive resources). PACK and SPREAD bundles are
  plain bundles (Ray treats both as preferences). A STRICT_PACK group of k bundles of one
  shape s is a block needing the room of k copies of s on one node; one of mixed shapes is a
  single bundle of its summed shape. A STRICT_SPREAD group of one shape keeps its rule
  exactly (below); one of mixed shapes is relaxed to plain bundles, which keeps the bound
  valid but not exact (`Problem.relaxed`; the scenarios only have groups of one shape).
  Bundles that fit no type that may launch are left out, as the planner leaves them waiting.
- Patterns. For each type that may launch, every maximal multiset of shapes that fits one
  node together (`packing.fits` and `how_many`, the planner's arithmetic); an integer
  variable counts the new nodes of that type filled so, at the type's price. Existing
  nodes likewise over their free capacity, grouped by identical free vectors, at most as
  many patterns used as nodes in the group, free of charge. Maximal patterns suffice since
  demand is met with ">=": a node holding less is dominated by one holding more.
- Demand: per shape, copies >= bundles.
- Blocks, exact, by a flow per shape s that has blocks: vertex j = copies of s taken by
  a node's blocks, an arc j -> j+k per block of k from vertex 0; a path to j ends in a
  terminal (j, n) for a node holding n >= j copies, which turns j of its n single copies
  into those blocks; at most as many terminals (j, n) as nodes hold n copies; arcs of each
  length >= the blocks of that length. (Patterns with blocks as shapes of their own would
  number millions per GPU type on these scenarios; a flow through every copy made HiGHS's
  rounding heuristics crawl for minutes.)
- STRICT_SPREAD, exact: a shape's groups of sizes r_1 >= r_2 >= ... fit, at most one bundle
  of a group per node, on nodes with c_i single copies of that shape iff, for every k,
  sum_i min(c_i, k) >= r_1 + ... + r_k (max-flow min-cut, as for Gale-Ryser), which is
  linear in the pattern and terminal counts (only k up to the most copies one node holds:
  past that the row is implied by demand).
- Caps: new nodes per type <= its max_workers minus its existing nodes; all new nodes <=
  max_workers minus the existing ones; optionally all new nodes <= a given number.
- Fallback: a type (or group of existing nodes) with more than PATTERN_CAP maximal patterns
  gets integer counts of nodes and of copies per shape bounded per resource and per shape
  (`how_many`) instead: the shape LP's constraints in integers, still a lower bound but not
  exact (named in `Answer.relaxed`; no plan is claimed from it).

Solving (`solve_guarded`): HiGHS, presolve off, a time limit, in a forked child that is
killed if it overruns; first without STRICT_SPREAD's rows, then, only if that model's best
plan breaks them, with them; optionally starting from a known plan (ours, from the
planner's recorded placements). HiGHS's dual bound is a valid lower bound either way; its
best solution is rebuilt into concrete nodes (`_realize`: paths of the flows, STRICT_SPREAD
groups dealt largest first to the nodes with most single copies left) and checked before
its cost is called achievable (`Answer.realized`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import multiprocessing
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import highspy
import numpy as np

from launcher.autoscaler.decide.packing import Shape, fits, how_many, shape_of
from launcher.autoscaler.decide.planner import Placement

if TYPE_CHECKING:
    from bench_planner import Workload

PATTERN_CAP = 200_000  # maximal patterns per type (or group of existing nodes) before fallback
TIME_LIMIT = 20.0  # seconds per solve
TOL = 1e-6
# HiGHS's presolve spent minutes in probing and in setting up the MIP on the larger models
# here (over its time limit) where the model solved without it in under a second.
OPTIONS: dict[str, str | float | int | bool] = {"presolve": "off"}
INF = math.inf

Node = tuple[str, str, Mapping[str, float], Mapping[str, float]]  # id, type, total, free


@dataclass(frozen=True)
class Demand:
    """What one shape needs."""

    request: dict[str, float]
    singles: int  # bundles placed one by one (their STRICT_SPREAD groups' included)
    blocks: dict[int, int] = field(default_factory=dict)  # STRICT_PACK of k >= 2 -> groups
    spread: tuple[int, ...] = ()  # its STRICT_SPREAD groups' sizes, largest first


@dataclass(frozen=True)
class Problem:
    shapes: dict[Shape, Demand]
    types: dict[str, dict[str, float]]  # those that may launch: priced, with room
    prices: dict[str, float]
    room: dict[str, int]  # new nodes each type may launch
    max_new: int  # new nodes in all
    free: list[tuple[dict[str, float], int]]  # existing nodes' distinct free capacity, nodes
    relaxed: int = 0  # STRICT_SPREAD groups counted as plain bundles
    dropped: int = 0  # bundles no type that may launch holds, left out
    # For reading a plan (`Model.start`): each existing node's index in `free`, and each
    # STRICT_PACK group's block (shape, bundles) by its index among the groups.
    holders: dict[str, int] = field(default_factory=dict)
    packs: dict[int, tuple[Shape, int]] = field(default_factory=dict)


def problem(
    nodes: Sequence[Node],
    pending: Sequence[tuple[Mapping[str, float], int]],
    gangs: Sequence[tuple[str, Sequence[Mapping[str, float]]]],
    types: Mapping[str, Mapping[str, float]],
    prices: Mapping[str, float],
    max_workers: int,
    type_max: Mapping[str, int] | None = None,
    exact_spread: bool = True,
) -> Problem:
    """The problem of a snapshot: existing nodes (id, type, total, free), pending bundles
    (shape, count), placement groups (strategy, bundles), node types, their prices (a type
    without one does not launch) and caps. `exact_spread=False` relaxes every STRICT_SPREAD
    group to plain bundles."""
    existing = Counter(t for _, t, _, _ in nodes)
    caps = type_max or {}
    room = {t: max(0, caps.get(t, max_workers) - existing[t]) for t in types if t in prices}
    launch = {t: dict(types[t]) for t, n in room.items() if n > 0}
    singles: Counter[Shape] = Counter()
    blocks: defaultdict[Shape, Counter[int]] = defaultdict(Counter)
    spread: defaultdict[Shape, list[int]] = defaultdict(list)
    relaxed = 0
    for request, count in pending:
        singles[shape_of(request)] += count
    packs: dict[int, tuple[Shape, int]] = {}
    for number, (strategy, bundles) in enumerate(gangs):
        kinds = {shape_of(b) for b in bundles}
        if strategy == "STRICT_PACK" and len(bundles) > 1:
            if len(kinds) == 1:
                packs[number] = (kinds.pop(), len(bundles))
                blocks[packs[number][0]][len(bundles)] += 1
            else:
                total: Counter[str] = Counter()
                for b in bundles:
                    total.update(b)
                singles[shape_of(total)] += 1
            continue
        singles.update(shape_of(b) for b in bundles)
        if strategy == "STRICT_SPREAD" and len(bundles) > 1:
            if len(kinds) == 1 and exact_spread:
                spread[kinds.pop()].append(len(bundles))
            else:
                relaxed += 1
    shapes: dict[Shape, Demand] = {}
    dropped = 0
    for s in sorted(set(singles) | set(blocks)):
        if not s:
            continue  # asks for nothing
        request = dict(s)
        held = {k: n for k, n in blocks[s].items() if _holds(launch, request, k)}
        dropped += sum(k * n for k, n in blocks[s].items() if k not in held)
        if not _holds(launch, request, 1):
            dropped += singles[s]
            continue
        if singles[s] or held:
            sizes = tuple(sorted(spread.get(s, ()), reverse=True))
            shapes[s] = Demand(request, singles[s], held, sizes)
    free, holders = _free(nodes, shapes)
    prices_used = {t: float(prices[t]) for t in launch}
    max_new = max(0, max_workers - len(nodes))
    return Problem(
        shapes, launch, prices_used, room, max_new, free, relaxed, dropped, holders, packs
    )


def _free(
    nodes: Sequence[Node], shapes: Mapping[Shape, Demand]
) -> tuple[list[tuple[dict[str, float], int]], dict[str, int]]:
    """Existing nodes' free capacity (over the resources some shape asks for) grouped by
    identical vectors, with how many nodes each; and each node's group (those where some
    shape fits)."""
    keys = sorted({k for s in shapes for k, _ in s})
    grouped: Counter[tuple[tuple[str, float], ...]] = Counter()
    vectors = {}
    for node_id, _, _, available in nodes:
        vector = tuple((k, float(available.get(k, 0.0))) for k in keys)
        if any(fits(dict(vector), d.request) for d in shapes.values()):
            grouped[vector] += 1
            vectors[node_id] = vector
    order = sorted(grouped)
    where = {v: g for g, v in enumerate(order)}
    free = [(dict(v), grouped[v]) for v in order]
    return free, {node_id: where[v] for node_id, v in vectors.items()}


def problem_of(w: Workload) -> Problem:
    """The problem of a benchmark workload (every type capped at its max_workers)."""
    return problem(
        w.nodes,
        w.pending,
        w.gangs,
        w.types,
        w.prices or {},
        w.max_workers,
        dict.fromkeys(w.types, w.max_workers),
    )


def _holds(types: Mapping[str, Mapping[str, float]], request: Mapping[str, float], k: int) -> bool:
    return any(how_many(t, request) >= k for t in types.values())


class _TooMany(Exception):
    pass


def patterns(
    capacity: Mapping[str, float], requests: Sequence[Mapping[str, float]], cap: int = PATTERN_CAP
) -> list[tuple[int, ...]] | None:
    """Every maximal multiset of `requests` that fits `capacity` together, as counts per
    request (nothing more of any request fits beside it); None if more than `cap`."""
    order = sorted(
        (i for i, r in enumerate(requests) if fits(capacity, r)),
        key=lambda i: -sum(v / max(capacity.get(k, 0.0), TOL) for k, v in requests[i].items()),
    )
    if not order:
        return []
    found: list[tuple[int, ...]] = []
    counts = [0] * len(requests)
    visits = 0

    def walk(depth: int, free: dict[str, float]) -> None:
        nonlocal visits
        i = order[depth]
        top = how_many(free, requests[i])
        if depth == len(order) - 1:  # the last request takes all the room it can
            visits += 1
            if visits > 20 * cap:
                raise _TooMany
            rest = _minus(free, requests[i], top)
            if not any(fits(rest, requests[j]) for j in order):
                counts[i] = top
                found.append(tuple(counts))
                counts[i] = 0
                if len(found) > cap:
                    raise _TooMany
            return
        for n in range(top, -1, -1):
            counts[i] = n
            walk(depth + 1, _minus(free, requests[i], n))
        counts[i] = 0

    start = {k: float(v) for k, v in capacity.items()}
    for r in requests:
        for k in r:
            start.setdefault(k, 0.0)
    try:
        walk(0, start)
    except _TooMany:
        return None
    return found


def _minus(free: Mapping[str, float], request: Mapping[str, float], n: int) -> dict[str, float]:
    if n == 0:
        return dict(free)
    return {k: v - request.get(k, 0.0) * n for k, v in free.items()}


# --- the model ---------------------------------------------------------------------------


@dataclass
class _Model:
    rows: dict[Hashable, tuple[float, float]] = field(default_factory=dict)
    cost: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    entries: list[dict[Hashable, float]] = field(default_factory=list)
    kinds: list[tuple[Any, ...]] = field(default_factory=list)

    def row(self, key: Hashable, lower: float = -INF, upper: float = INF) -> None:
        self.rows.setdefault(key, (lower, upper))

    def col(
        self,
        kind: tuple[Any, ...],
        cost: float,
        upper: float,
        entries: dict[Hashable, float],
        integer: bool = True,
    ) -> int:
        self.cost.append(cost)
        self.lower.append(0.0)
        self.upper.append(upper)
        self.integer.append(integer)
        self.entries.append(entries)
        self.kinds.append(kind)
        return len(self.cost) - 1


@dataclass(frozen=True)
class Answer:
    status: str  # HiGHS's model status
    bound: float  # no plan costs less (inf: no plan at all)
    cost: float | None  # the best solution found (None: none found)
    launch: Counter[str] | None  # its new nodes per type
    realized: bool  # it was rebuilt into nodes that hold every bundle: a real plan
    seconds: float
    columns: int
    relaxed: str = ""  # what the model left out, if anything (see `Model.solve`)

    @property
    def nodes(self) -> int | None:
        return None if self.launch is None else self.launch.total()

    @property
    def gap(self) -> float | None:
        if self.cost is None or math.isinf(self.bound):
            return None
        return 0.0 if self.cost <= 0 else max(0.0, (self.cost - self.bound) / self.cost)

    @property
    def achievable(self) -> bool:
        """Whether `cost` is that of a real plan, not only of a relaxed model."""
        return self.cost is not None and self.realized


class Model:
    """The model of one problem, built once, solved with or without a node cap."""

    def __init__(self, p: Problem, cap: int = PATTERN_CAP) -> None:
        self.problem = p
        self.keys = sorted(p.shapes)
        requests = [p.shapes[s].request for s in self.keys]
        started = time.perf_counter()
        self.new = {t: patterns(c, requests, cap) for t, c in p.types.items()}
        self.old = [patterns(f, requests, cap) for f, _ in p.free]
        self.enumerated = time.perf_counter() - started
        units = [
            *zip(p.types.values(), self.new.values(), strict=True),
            *zip((f for f, _ in p.free), self.old, strict=True),
        ]
        self.most: dict[Shape, int] = {}  # per shape: the most copies one node holds
        for i, s in enumerate(self.keys):
            self.most[s] = max(
                (
                    how_many(capacity, requests[i])
                    if found is None
                    else max((c[i] for c in found), default=0)
                    for capacity, found in units
                ),
                default=0,
            )
        self.flows = {s for s in self.keys if p.shapes[s].blocks}
        # STRICT_SPREAD rows needed: k up to the groups, and past a node's most copies
        # the row is implied by the demand row.
        self.depth = {s: min(len(p.shapes[s].spread), self.most[s]) for s in self.keys}
        self._models: dict[bool, _Model] = {}

    def model(self, spread: bool = True) -> _Model:
        """The model, with STRICT_SPREAD's rows or without them."""
        if spread not in self._models:
            self._models[spread] = self._build(
                self.depth if spread else dict.fromkeys(self.keys, 0)
            )
        return self._models[spread]

    @property
    def has_spread(self) -> bool:
        return any(self.depth.values())

    @property
    def patterns(self) -> int:
        return sum(len(ps) for ps in [*self.new.values(), *self.old] if ps)

    def _build(self, depth: Mapping[Shape, int]) -> _Model:
        p, m = self.problem, _Model()
        for s, d in p.shapes.items():
            if d.singles:
                m.row(("need", s, 1), lower=d.singles)
            for k, n in d.blocks.items():
                m.row(("need", s, k), lower=n)
            for k, total in enumerate(itertools.accumulate(d.spread[: depth[s]]), 1):
                m.row(("spread", s, k), lower=total)
        m.row(("total",), upper=p.max_new)
        for t, found in self.new.items():
            m.row(("room", t), upper=p.room[t])
            if found is None:
                self._aggregate(m, depth, ("new", t), p.types[t], None, p.prices[t])
                continue
            for c in found:
                uses = {("room", t): 1.0, ("total",): 1.0, **self._uses(c, depth)}
                m.col(("new", t, c), p.prices[t], min(p.room[t], self._items(c)), uses)
        for g, ((free, count), found) in enumerate(zip(p.free, self.old, strict=True)):
            if found is None:
                self._aggregate(m, depth, ("old", g), free, count, 0.0)
                continue
            m.row(("free", g), upper=count)
            for c in found:
                uses = {("free", g): 1.0, **self._uses(c, depth)}
                m.col(("old", g, c), 0.0, min(count, self._items(c)), uses)
        for s in sorted(self.flows):
            self._flow(m, s, depth[s])
        return m

    def _items(self, c: tuple[int, ...]) -> int:
        """Bundles and blocks of the shapes a pattern holds: no plan needs more nodes of it
        (a node that holds nothing can go)."""
        shapes = self.problem.shapes
        return sum(
            shapes[s].singles + sum(shapes[s].blocks.values())
            for s, n in zip(self.keys, c, strict=True)
            if n
        )

    def _uses(self, c: tuple[int, ...], depth: Mapping[Shape, int]) -> dict[Hashable, float]:
        """A pattern's coefficients: its copies of each shape, as singles (some of them may
        form blocks instead, see `_flow`)."""
        out: dict[Hashable, float] = {}
        for s, n in zip(self.keys, c, strict=True):
            if not n:
                continue
            if self.problem.shapes[s].singles:
                out["need", s, 1] = float(n)
            for k in range(1, depth[s] + 1):
                out["spread", s, k] = float(min(n, k))
            if s in self.flows:
                out["holds", s, n] = -1.0  # one more node that may take blocks of n copies
        return out

    def _flow(self, m: _Model, s: Shape, depth: int) -> None:
        """Shape s's blocks as a flow: vertex j = copies taken by blocks so far, an arc per
        block, from vertex 0; a node holding n copies whose blocks take j of them is a path
        to j and a terminal (j, n), which turns j of its n singles into those blocks. At
        most as many terminals (j, n) as nodes hold n copies: the rest hold singles only.
        (Equality rows only among these few arcs: with the patterns in them, HiGHS's
        rounding heuristics crawled through the patterns' bounds for minutes.)"""
        d, top = self.problem.shapes[s], self.most[s]
        i = self.keys.index(s)
        ends = sorted({kind[2][i] for kind in m.kinds if kind[0] in ("new", "old")} - {0})
        # Some optimal plan has no more blocks than asked for (one more could as well be
        # its copies as singles: the path without that arc), which bounds every arc and
        # terminal by the blocks.
        blocks = sum(d.blocks.values())
        reached = {0}  # copies that some blocks take together
        for j in range(top + 1):
            if j in reached:
                reached.update(j + k for k in d.blocks if j + k <= top)
        for j in sorted(reached - {0}):
            m.row(("flow", s, j), 0.0, 0.0)  # in = out + terminals (vertex 0's is implied)
        for j in sorted(reached):
            for k in d.blocks:
                if j + k <= top:
                    uses: dict[Hashable, float] = {("flow", s, j + k): 1.0, ("need", s, k): 1.0}
                    if j:
                        uses["flow", s, j] = -1.0
                    m.col(("arc", s, j, j + k, k), 0.0, d.blocks[k], uses)
        for n in ends:
            m.row(("holds", s, n), upper=0.0)
            for j in sorted(reached - {0}):
                if j > n:
                    break
                uses = {("flow", s, j): -1.0, ("holds", s, n): 1.0}
                if d.singles:
                    uses["need", s, 1] = -float(j)
                for k in range(1, depth + 1):
                    if min(n - j, k) != min(n, k):
                        uses["spread", s, k] = float(min(n - j, k) - min(n, k))
                m.col(("end", s, j, n), 0.0, blocks, uses)

    def _aggregate(
        self,
        m: _Model,
        depth: Mapping[Shape, int],
        tag: tuple[str, object],
        capacity: Mapping[str, float],
        count: int | None,
        price: float,
    ) -> None:
        """The fallback: integer nodes (or `count` existing ones) and copies per shape,
        bounded per resource and by how many of a shape one node holds. A relaxation (the
        copies are those a real plan puts there, so at most the bundles)."""
        x = None
        if count is None:
            held = tuple(int(fits(capacity, self.problem.shapes[s].request)) for s in self.keys)
            room = min(self.problem.room[str(tag[1])], self._items(held))
            uses: dict[Hashable, float] = {("room", tag[1]): 1.0, ("total",): 1.0}
            x = m.col(("x", tag), price, room, uses)
        scale = float(count or 0)
        resources = sorted({k for s in self.keys for k, _ in s})
        for r in resources:
            m.row(("cap", tag, r), upper=capacity.get(r, 0.0) * scale)
            if x is not None:
                m.entries[x]["cap", tag, r] = -capacity.get(r, 0.0)
        for s in self.keys:
            d = self.problem.shapes[s]
            most = how_many(capacity, d.request)
            if most == 0:
                continue
            m.row(("held", tag, s), upper=most * scale)
            if x is not None:
                m.entries[x]["held", tag, s] = -float(most)
            sizes = ([1] if d.singles else []) + [k for k in d.blocks if k <= most]
            ys = {}
            for k in sizes:
                uses = {("need", s, k): 1.0, ("held", tag, s): float(k)}
                for r, v in d.request.items():
                    uses["cap", tag, r] = k * v
                need = d.singles if k == 1 else d.blocks[k]
                ys[k] = m.col(("y", tag, s, k), 0.0, need, uses)
            for k in range(1, depth[s] + 1):
                # w <= singles here, w <= k per node: sum over nodes of min(singles, k)
                m.row(("w-y", tag, s, k), upper=0.0)
                m.entries[ys[1]]["w-y", tag, s, k] = -1.0
                uses = {("spread", s, k): 1.0, ("w-y", tag, s, k): 1.0}
                if x is not None:
                    m.row(("w-x", tag, s, k), upper=0.0)
                    m.entries[x]["w-x", tag, s, k] = -float(k)
                    uses["w-x", tag, s, k] = 1.0
                m.col(("w", tag, s, k), 0.0, d.singles, uses, False)

    def solve(
        self,
        max_nodes: int | None = None,
        time_limit: float = TIME_LIMIT,
        spread: bool = True,
        report: Callable[[str, object], None] | None = None,
        start: Sequence[float] | None = None,
    ) -> Answer:
        """Least cost of the new nodes; with `max_nodes`, launching at most that many; with
        `spread` False, without STRICT_SPREAD's rows (its plan is still checked against
        them). `report` hears ("bound", dual bound) and ("values", a solution) as HiGHS
        finds them; `start` is a solution to begin from (see `start`). In this process;
        `solve_guarded` runs the models in children."""
        started = time.perf_counter()
        m = self.model(spread)
        rows = self._rows(m, max_nodes)
        values: list[float] | None
        if not m.cost:
            met = all(lo <= 0 for lo, _ in rows.values())
            status, bound, values = ("Optimal", 0.0, []) if met else ("Infeasible", INF, None)
        else:
            status, bound, values = _run(m, rows, time_limit, report, start)
        return self.answer(spread, max_nodes, status, bound, values, time.perf_counter() - started)

    def _rows(self, m: _Model, max_nodes: int | None) -> dict[Hashable, tuple[float, float]]:
        rows = dict(m.rows)
        if max_nodes is not None:
            rows[("total",)] = (-INF, float(min(self.problem.max_new, max_nodes)))
        return rows

    def answer(
        self,
        spread: bool,
        max_nodes: int | None,
        status: str,
        bound: float,
        values: Sequence[float] | None,
        seconds: float,
    ) -> Answer:
        """The answer for a solution of one of the models (None: no solution): its cost
        and new nodes if it meets every row once rounded, and whether it is a real plan."""
        m = self.model(spread)
        cost, launch, realized = None, None, False
        if values is not None and self._satisfied(m, self._rows(m, max_nodes), values):
            launch = self._launch(m, values)
            cost = sum(self.problem.prices[t] * n for t, n in launch.items())
            realized = self.problem.relaxed == 0 and _realize(self, m, values)
        relaxed = []
        if self.problem.relaxed:
            relaxed.append("STRICT_SPREAD groups of mixed shapes")
        if not spread and self.has_spread and not realized:
            relaxed.append("STRICT_SPREAD")  # (a plan that meets it anyway is exact)
        if any(p is None for p in [*self.new.values(), *self.old]):
            relaxed.append(f"patterns over {PATTERN_CAP:,} on some node")
        return Answer(
            status, bound, cost, launch, realized, seconds, len(m.cost), ", ".join(relaxed)
        )

    @staticmethod
    def _values(m: _Model, values: Sequence[float]) -> list[float]:
        return [float(round(v)) if m.integer[i] else v for i, v in enumerate(values)]

    def _satisfied(
        self, m: _Model, rows: Mapping[Hashable, tuple[float, float]], values: Sequence[float]
    ) -> bool:
        """Whether the rounded solution meets every row (within TOL)."""
        rounded = self._values(m, values)
        activity: defaultdict[Hashable, float] = defaultdict(float)
        for i, entries in enumerate(m.entries):
            if rounded[i]:
                for key, coefficient in entries.items():
                    activity[key] += coefficient * rounded[i]
        return all(lo - TOL <= activity[key] <= hi + TOL for key, (lo, hi) in rows.items())

    def _launch(self, m: _Model, values: Sequence[float]) -> Counter[str]:
        launch: Counter[str] = Counter()
        for kind, v in zip(m.kinds, self._values(m, values), strict=True):
            if v and kind[0] == "new":
                launch[str(kind[1])] += int(v)
            elif v and kind[0] == "x":
                launch[kind[1][1]] += int(v)
        return launch

    def start(self, placements: Sequence[Placement], spread: bool = True) -> list[float] | None:
        """A plan's placements (`plan(..., record=True)`) as a solution of the model, for
        HiGHS to start from: each node's copies per shape, topped up greedily to a maximal
        pattern, its blocks as a path. None if the plan does not map onto the model (a
        fallback, a shape left out, a node over a pattern's bound: HiGHS checks it)."""
        m, p = self.model(spread), self.problem
        if m.kinds and any(kind[0] in ("x", "y", "w") for kind in m.kinds):
            return None
        column = {kind: i for i, kind in enumerate(m.kinds)}
        held: defaultdict[tuple[str | None, int], Counter[Shape]] = defaultdict(Counter)
        blocks: defaultdict[tuple[str | None, int], list[tuple[Shape, int]]] = defaultdict(list)
        types: dict[tuple[str | None, int], str] = {}
        for placed in placements:
            node = (placed.node_id, placed.new)
            types[node] = placed.node_type
            if placed.group in p.packs:
                s, k = p.packs[placed.group]
                held[node][s] += k * placed.count
                blocks[node] += [(s, k)] * placed.count
            else:
                held[node][shape_of(placed.request)] += placed.count
        values = [0.0] * len(m.kinds)
        for node, counts in held.items():
            node_id = node[0]
            if node_id is None:
                capacity, unit = p.types.get(types[node]), ("new", types[node])
            elif node_id in p.holders:
                g = p.holders[node_id]
                capacity, unit = p.free[g][0], ("old", g)
            else:
                return None
            if capacity is None or any(s not in p.shapes for s in counts):
                return None
            pattern = self._top_up(capacity, counts)
            i = column.get((*unit, pattern))
            if i is None:
                return None
            values[i] += 1
            for s in {s for s, _ in blocks[node]}:
                j = 0
                for k in sorted((k for t, k in blocks[node] if t == s), reverse=True):
                    arc = column.get(("arc", s, j, j + k, k))
                    if arc is None:
                        return None
                    values[arc] += 1
                    j += k
                end = column.get(("end", s, j, pattern[self.keys.index(s)]))
                if end is None:
                    return None
                values[end] += 1
        return values

    def _top_up(
        self, capacity: Mapping[str, float], counts: Mapping[Shape, int]
    ) -> tuple[int, ...]:
        """The copies per shape a node holds, plus as many more as fit, shape by shape."""
        left = {k: float(v) for k, v in capacity.items()}
        for s in self.keys:
            for k, _ in s:
                left.setdefault(k, 0.0)
        for s in self.keys:
            left = _minus(left, self.problem.shapes[s].request, counts.get(s, 0))
        out = []
        for s in self.keys:
            request = self.problem.shapes[s].request
            more = how_many(left, request) if fits(left, request) else 0
            left = _minus(left, request, more)
            out.append(counts.get(s, 0) + more)
        return tuple(out)


def _run(
    m: _Model,
    rows: Mapping[Hashable, tuple[float, float]],
    time_limit: float,
    report: Callable[[str, object], None] | None,
    start: Sequence[float] | None = None,
) -> tuple[str, float, list[float] | None]:
    """HiGHS on a model: its status, dual bound and best solution (None: none)."""
    index = {key: i for i, key in enumerate(rows)}
    h = _highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 1e-7)
    h.setOptionValue("mip_abs_gap", 1e-7)
    nothing = np.zeros(0, dtype=np.int32)
    lows = np.array([lo for lo, _ in rows.values()], dtype=np.float64)
    highs = np.array([hi for _, hi in rows.values()], dtype=np.float64)
    h.addRows(len(rows), lows, highs, 0, nothing, nothing, np.zeros(0))
    starts: list[int] = []
    indexes: list[int] = []
    values: list[float] = []
    for entries in m.entries:
        starts.append(len(indexes))
        for key, coefficient in entries.items():
            indexes.append(index[key])
            values.append(coefficient)
    h.addCols(
        len(m.cost),
        np.array(m.cost, dtype=np.float64),
        np.array(m.lower, dtype=np.float64),
        np.array([min(u, highspy.kHighsInf) for u in m.upper], dtype=np.float64),
        len(indexes),
        np.array(starts, dtype=np.int32),
        np.array(indexes, dtype=np.int32),
        np.array(values, dtype=np.float64),
    )
    integers = np.array([i for i, v in enumerate(m.integer) if v], dtype=np.int32)
    kind = int(highspy.HighsVarType.kInteger)
    h.changeColsIntegrality(len(integers), integers, np.full(len(integers), kind, np.uint8))
    if start is not None:
        known = highspy.HighsSolution()
        known.col_value = list(start)
        known.value_valid = True
        h.setSolution(known)
    if report is not None:
        best = [-INF]

        def progress(event: Any) -> None:
            bound = float(event.data_out.mip_dual_bound)
            if bound > best[0] + 1e-9:
                best[0] = bound
                report("bound", bound)

        def found(event: Any) -> None:
            report("values", [float(v) for v in event.data_out.mip_solution])

        h.cbMipInterrupt.subscribe(progress)
        h.cbMipLogging.subscribe(progress)
        h.cbMipImprovingSolution.subscribe(found)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return h.modelStatusToString(status), INF, None
    solution = h.getSolution()
    found_values = list(solution.col_value) if solution.value_valid else None
    return h.modelStatusToString(status), float(h.getInfo().mip_dual_bound), found_values


def _highs() -> highspy.Highs:
    """A silent HiGHS instance (its banner goes to the process's standard output once,
    before any option can turn it off: kept out of the benchmark's tables)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    for key, value in OPTIONS.items():
        h.setOptionValue(key, value)
    return h


def solve(p: Problem, max_nodes: int | None = None, time_limit: float = TIME_LIMIT) -> Answer:
    return Model(p).solve(max_nodes, time_limit)


# --- rebuilding a solution into nodes ----------------------------------------------------


def _realize(model: Model, m: _Model, values: Sequence[float]) -> bool:
    """Whether the solution's nodes hold every bundle: each node gets its pattern's copies;
    each flow is split into paths (one node's blocks and singles each); each shape's
    STRICT_SPREAD groups, largest first, go to the nodes with most single copies left."""
    p, rounded = model.problem, model._values(m, values)
    nodes: list[tuple[Mapping[str, float], tuple[int, ...]]] = []
    arcs: defaultdict[Shape, Counter[tuple[int, int]]] = defaultdict(Counter)  # (tail, k)
    ends: defaultdict[Shape, Counter[tuple[int, int]]] = defaultdict(Counter)  # (j, n)
    for kind, v in zip(m.kinds, rounded, strict=True):
        n = round(v)
        if n <= 0:
            continue
        if kind[0] == "new":
            nodes += [(p.types[kind[1]], kind[2])] * n
        elif kind[0] == "old":
            nodes += [(p.free[kind[1]][0], kind[2])] * n
        elif kind[0] == "arc":
            arcs[kind[1]][kind[2], kind[4]] += n
        elif kind[0] == "end":
            ends[kind[1]][kind[2], kind[3]] += n
        else:
            return False  # a fallback's counts are not nodes
    for capacity, counts in nodes:
        total: Counter[str] = Counter()
        for s, c in zip(model.keys, counts, strict=True):
            for k, v in s:
                total[k] += v * c
        if not fits(capacity, total):
            return False
    for i, s in enumerate(model.keys):
        d = p.shapes[s]
        held = [counts[i] for _, counts in nodes]
        if s in model.flows:
            split = _paths(arcs[s], ends[s], held)
            if split is None:
                return False
            singles, blocks = split
        else:
            singles, blocks = held, Counter()
        if any(blocks[k] < n for k, n in d.blocks.items()):
            return False
        left = [(-c, j) for j, c in enumerate(singles) if c > 0]
        heapq.heapify(left)
        for size in d.spread:
            if len(left) < size:
                return False
            taken = [heapq.heappop(left) for _ in range(size)]
            for c, j in taken:
                if c + 1 < 0:
                    heapq.heappush(left, (c + 1, j))
        if -sum(c for c, _ in left) < d.singles - sum(d.spread):
            return False
    return True


def _paths(
    arcs: Counter[tuple[int, int]], ends: Counter[tuple[int, int]], held: list[int]
) -> tuple[list[int], Counter[int]] | None:
    """Split a flow of blocks into paths, traced back from their terminals, and give each
    path to a node holding as many copies as its terminal says: per node its singles
    (all its copies if no path); blocks in all."""
    flow = Counter(arcs)  # (tail, k) -> paths along that arc
    by_end: defaultdict[int, list[int]] = defaultdict(list)  # copies -> singles per path
    blocks: Counter[int] = Counter()
    for (j, n), count in ends.items():
        for _ in range(count):
            vertex = j
            while vertex > 0:
                k = next((k for (t, k), f in flow.items() if f > 0 and t + k == vertex), None)
                if k is None:
                    return None
                flow[vertex - k, k] -= 1
                blocks[k] += 1
                vertex -= k
            by_end[n].append(n - j)
    singles = [by_end[c].pop() if by_end[c] else c for c in held]
    if any(by_end.values()) or any(flow.values()):
        return None
    return singles, blocks


def both_targets(capped: Answer, cheapest: float) -> str:
    """Whether a plan launches no more nodes than the fewer of Ray's (the cap of `capped`)
    and costs no more than the cheaper of Ray's plans: "yes" when the capped model's plan
    is a real one that cheap, "no" when its bound proves none is, else "unknown"."""
    if capped.achievable and capped.cost is not None and capped.cost <= cheapest + 1e-9:
        return "yes"
    if capped.bound > cheapest + TOL * max(1.0, cheapest):
        return "no"
    return "unknown"


def solve_guarded(
    model: Model,
    max_nodes: int | None = None,
    time_limit: float = TIME_LIMIT,
    plan: Sequence[Placement] = (),
) -> Answer:
    """`model.solve` in forked children, first without STRICT_SPREAD's rows (HiGHS was seen
    to stall for minutes in one step on the full model, where this one took seconds): if
    that plan meets them anyway, it is the answer; otherwise the full model, its bound
    raised to the first one's if lower. A known plan's placements (`plan`), if it launches
    no more than `max_nodes`, are HiGHS's starting solution. The calling process must not
    have run HiGHS itself (its threads do not survive a fork)."""
    first = _guarded(model, max_nodes, time_limit, False, plan)
    if not model.has_spread or first.realized or math.isinf(first.bound):
        return first
    second = _guarded(model, max_nodes, time_limit, True, plan)
    if second.bound >= first.bound:
        return second
    return replace(second, bound=first.bound, seconds=first.seconds + second.seconds)


def _guarded(
    model: Model,
    max_nodes: int | None,
    time_limit: float,
    spread: bool,
    plan: Sequence[Placement],
) -> Answer:
    """One solve in a forked child, killed at 1.5 times its time limit plus 15 s (HiGHS
    checks its limit between steps, and one step, presolve's probing or a rounding
    heuristic's propagation, was seen to run for minutes past it); then the answer is made
    of the best bound and solution the child had reported (or the starting one)."""
    start = model.start(plan, spread) if plan else None
    if start is not None and max_nodes is not None:
        m = model.model(spread)
        launched = sum(v for kind, v in zip(m.kinds, start, strict=True) if kind[0] == "new")
        if launched > max_nodes:
            start = None
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    started = time.perf_counter()
    child = ctx.Process(
        target=_solve_child,
        args=(sender, model, max_nodes, time_limit, spread, start),
        daemon=True,
    )
    child.start()
    sender.close()
    deadline = started + 1.5 * time_limit + 15
    bound, values = -INF, start
    answer: Answer | None = None
    while answer is None and receiver.poll(max(0.0, deadline - time.perf_counter())):
        try:
            kind, value = receiver.recv()
        except EOFError:
            break
        if kind == "bound":
            bound = max(bound, value)
        elif kind == "values":
            values = value
        else:
            answer = value
    if answer is None:
        child.kill()
    child.join()
    receiver.close()
    if answer is not None:
        return answer
    spent = time.perf_counter() - started
    status = f"killed after {spent:.0f} s"
    return model.answer(spread, max_nodes, status, bound, values, spent)


def _solve_child(
    conn: Connection,
    model: Model,
    max_nodes: int | None,
    time_limit: float,
    spread: bool,
    start: list[float] | None,
) -> None:
    def report(kind: str, value: object) -> None:
        conn.send((kind, value))

    conn.send(("answer", model.solve(max_nodes, time_limit, spread, report, start)))
    conn.close()
