"""A lower bound on what any plan must spend on new nodes (pure): the linear programme

    minimise    sum_t price_t * x_t
    subject to  sum_t capacity_t[r] * x_t >= need[r]   for every resource r
                x_t >= 0                               (fractional nodes allowed)

where need[r] is the pending demand for r minus the free capacity of r on the existing nodes.
Fragmentation, placement-group strategies and whole nodes are ignored, so no real plan can
cost less; caps (max_workers) are ignored too, which only lowers the bound further.

Solved exactly (rational arithmetic) through its dual, which has one variable per resource:

    maximise    sum_r need[r] * y_r
    subject to  sum_r capacity_t[r] * y_r <= price_t   for every type t,   y >= 0.

The dual's feasible region is a bounded polytope (every needed resource is offered by some
type, so each y_r is capped by a price), so its maximum sits on a vertex: some m of its
n + m constraints hold with equality (m resources, n types). Every such choice is solved by
Gaussian elimination, and the best feasible one is the optimum; by LP duality it equals the
primal's. With the few resources and types of a cluster config (m <= 5, n <= 20 gives at
most 53,130 small systems) this is instant; y_r is also the marginal price of resource r.

That bound is blind to shapes: it buys GPUs on the cheapest GPU type even when no pending
GPU bundle fits it. `shape_bound` is a tighter one that knows which shapes fit which types
(still fractional nodes, no fragmentation across shapes), solved in floating point.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from launcher.autoscaler.decide.packing import fits, how_many

MAX_SYSTEMS = 200_000  # m-subsets of constraints we are willing to try


@dataclass(frozen=True)
class Bound:
    cost: float  # the LP optimum: no plan launches cheaper nodes for this demand
    marginal: Mapping[str, float]  # y_r: what a unit of each needed resource costs at best
    needed: Mapping[str, float]  # demand minus free capacity, the resources with need > 0


def shortfall(demand: Mapping[str, float], free: Mapping[str, float]) -> dict[str, float]:
    """Per resource, how much demand the existing free capacity cannot cover."""
    return {k: v - free.get(k, 0.0) for k, v in demand.items() if v - free.get(k, 0.0) > 1e-9}


def lower_bound(
    needed: Mapping[str, float],
    capacities: Mapping[str, Mapping[str, float]],
    prices: Mapping[str, float],
) -> Bound | None:
    """The LP bound for `needed` (resource -> amount still missing) over node types
    (`capacities` and `prices`, both by type name). None when some needed resource is on
    no priced type (the demand cannot be met at any price)."""
    resources = sorted(k for k, v in needed.items() if v > 0)
    types = sorted(t for t in capacities if t in prices)
    if not resources:
        return Bound(0.0, {}, {})
    if any(all(capacities[t].get(r, 0) <= 0 for t in types) for r in resources):
        return None
    # Rows of the dual's constraints, as (coefficients over resources, right-hand side).
    rows: list[tuple[list[Fraction], Fraction]] = [
        ([Fraction(capacities[t].get(r, 0.0)) for r in resources], Fraction(prices[t]))
        for t in types
    ]
    for i in range(len(resources)):  # -y_i <= 0
        rows.append(([Fraction(-1 if j == i else 0) for j in range(len(resources))], Fraction(0)))
    objective = [Fraction(needed[r]) for r in resources]
    best: tuple[Fraction, list[Fraction]] | None = None
    for n, chosen in enumerate(itertools.combinations(rows, len(resources))):
        if n >= MAX_SYSTEMS:
            raise ValueError(f"too many resources and types for an exact bound ({len(rows)})")
        y = _solve([a for a, _ in chosen], [b for _, b in chosen])
        if y is None or not all(_dot(a, y) <= b for a, b in rows):
            continue
        value = _dot(objective, y)
        if best is None or value > best[0]:
            best = (value, y)
    assert best is not None  # y = 0 is a feasible vertex
    value, y = best
    return Bound(
        float(value),
        {r: float(v) for r, v in zip(resources, y, strict=True)},
        {r: needed[r] for r in resources},
    )


def _dot(a: Sequence[Fraction], b: Sequence[Fraction]) -> Fraction:
    return sum((x * y for x, y in zip(a, b, strict=True)), Fraction(0))


def _solve(matrix: Sequence[Sequence[Fraction]], rhs: Sequence[Fraction]) -> list[Fraction] | None:
    """The unique solution of a square system, or None when it is singular."""
    size = len(rhs)
    rows = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(size):
        pivot = next((r for r in range(col, size) if rows[r][col] != 0), None)
        if pivot is None:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(size):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [x - factor * p for x, p in zip(rows[r], rows[col], strict=True)]
    return [rows[i][size] / rows[i][i] for i in range(size)]


def shape_bound(
    demand: Mapping[tuple[tuple[str, float], ...], float],
    free: Mapping[str, float],
    capacities: Mapping[str, Mapping[str, float]],
    prices: Mapping[str, float],
    max_nodes: float | None = None,
) -> float | None:
    """A tighter lower bound that knows which bundle shapes fit which types: the LP

        minimise    sum_t price_t * x_t
        subject to  sum_t y[s,t] + y[s,free] >= demand[s]              every shape s
                    sum_s request_s[r] * y[s,t] <= capacity_t[r] * x_t  every type t, resource r
                    y[s,t] <= (copies of s one node of t holds) * x_t
                    sum_s request_s[r] * y[s,free] <= free[r]           every resource r
                    x, y >= 0,   y[s,t] only where s fits t,

    (the existing nodes' free capacity pooled, which only loosens it); with `max_nodes`, also
    sum_t x_t <= max_nodes: what any plan launching that few nodes must cost at least
    (infinity when none can). Solved through its
    dual, a maximisation whose origin is feasible (prices are not negative), by the simplex
    method with Bland's rule in floating point; the value returned is that of a dual-feasible
    point, so by weak duality it is a lower bound even if rounding stopped it short. None
    when some shape fits no priced type and not the free pool."""
    types = sorted(t for t in capacities if t in prices)
    shapes = sorted(s for s, n in demand.items() if n > 0)
    resources = sorted({k for s in shapes for k, _ in s})
    rows: list[tuple[dict[int, float], float]] = []  # primal ">=" rows: coefficients, rhs
    columns: list[float] = []  # primal variables' prices
    x: dict[str, int] = {}
    for t in types:
        x[t] = len(columns)
        columns.append(prices[t])
    y: dict[tuple[int, str], int] = {}
    for i, s in enumerate(shapes):
        request = dict(s)
        for t in [*types, ""]:
            if (t and fits(capacities[t], request)) or (not t and fits(free, request)):
                y[i, t] = len(columns)
                columns.append(0.0)
        if not any(key[0] == i for key in y):
            return None
        rows.append(({v: 1.0 for (j, _), v in y.items() if j == i}, float(demand[s])))
    for t in types:
        for r in resources:
            row = {x[t]: float(capacities[t].get(r, 0.0))}
            for (i, u), v in y.items():
                if u == t and dict(shapes[i]).get(r, 0.0) > 0:
                    row[v] = -dict(shapes[i])[r]
            rows.append((row, 0.0))
        for (i, u), v in y.items():
            if u == t:
                rows.append(({x[t]: float(how_many(capacities[t], dict(shapes[i]))), v: -1.0}, 0.0))
    for r in resources:
        row = {v: -dict(shapes[i]).get(r, 0.0) for (i, u), v in y.items() if u == ""}
        rows.append((row, -float(free.get(r, 0.0))))
    if max_nodes is not None:
        rows.append(({x[t]: -1.0 for t in types}, -float(max_nodes)))
    return _dual_simplex_value(rows, columns)


def _dual_simplex_value(
    rows: Sequence[tuple[Mapping[int, float], float]], c: Sequence[float]
) -> float:
    """max sum_i rhs_i u_i s.t. sum_i A[i][j] u_i <= c_j for every column j, u >= 0 (the dual
    of min c.x s.t. A x >= rhs, x >= 0), from the origin; returns the objective at the end."""
    m, n = len(rows), len(c)
    # Tableau: n constraint rows over m dual variables and n slacks.
    table = [[0.0] * (m + n + 1) for _ in range(n)]
    for i, (row, _) in enumerate(rows):
        for j, a in row.items():
            table[j][i] = a
    for j in range(n):
        table[j][m + j] = 1.0
        table[j][-1] = c[j]
    cost = [-b for _, b in rows] + [0.0] * (n + 1)  # reduced costs (maximising)
    basis = [m + j for j in range(n)]
    tol = 1e-9
    for _ in range(50 * (m + n)):
        enter = next((k for k in range(m + n) if cost[k] < -tol), None)
        if enter is None:
            break
        ratios = [
            (table[j][-1] / table[j][enter], basis[j], j) for j in range(n) if table[j][enter] > tol
        ]
        if not ratios:
            return float("inf")  # unbounded dual: the primal is infeasible
        _, _, leave = min(ratios)
        pivot = table[leave][enter]
        table[leave] = [v / pivot for v in table[leave]]
        for j in range(n):
            if j != leave and table[j][enter] != 0.0:
                f = table[j][enter]
                table[j] = [a - f * b for a, b in zip(table[j], table[leave], strict=True)]
        f = cost[enter]
        cost = [a - f * b for a, b in zip(cost, table[leave], strict=True)]
        basis[leave] = enter
    u = [0.0] * m
    for j, k in enumerate(basis):
        if k < m:
            u[k] = max(0.0, table[j][-1])
    # Scale u down until every dual constraint holds, so the value is a true bound.
    worst = max(
        (sum(u[i] * rows[i][0].get(j, 0.0) for i in range(m)) / c[j] for j in range(n) if c[j] > 0),
        default=0.0,
    )
    for j in range(n):
        if c[j] <= 0 and sum(u[i] * rows[i][0].get(j, 0.0) for i in range(m)) > tol:
            return 0.0  # a free column violated: give the trivial bound rather than a wrong one
    scale = 1.0 / worst if worst > 1.0 else 1.0
    return scale * sum(u[i] * rows[i][1] for i in range(m))
