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
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

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
