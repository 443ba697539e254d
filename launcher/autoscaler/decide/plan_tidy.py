"""After placement, a cheaper type for a new node (pure): the last node launched for a shape
is often only partly used, and a smaller or cheaper type may hold all it was given. Only
with prices: without them every node counts the same and nothing is resized.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from launcher.autoscaler.decide.packing import EPS, Resources, fits


def cheaper_type(
    used: Resources,
    current: str,
    capacities: Mapping[str, Resources],
    prices: Mapping[str, float | None],
    has_room: Iterable[str],
) -> str | None:
    """The cheapest type (among those with room) that holds `used` and costs less than
    `current`; None when there is none or prices are unknown."""
    price = prices.get(current)
    if price is None:
        return None
    best: tuple[float, str] | None = None
    for name in has_room:
        other = prices.get(name)
        if other is None or other >= price - EPS or not fits(capacities[name], used):
            continue
        if _cpu_work_on_gpu_type(used, capacities, name):
            continue
        if best is None or (other, name) < best:
            best = (other, name)
    return None if best is None else best[1]


def _cpu_work_on_gpu_type(used: Resources, capacities: Mapping[str, Resources], name: str) -> bool:
    """Whether `name` is a GPU type offered for CPU-only contents that a CPU-only type holds."""
    if used.get("GPU", 0.0) > 0 or capacities[name].get("GPU", 0.0) <= 0:
        return False
    return any(c.get("GPU", 0.0) <= 0 and fits(c, used) for c in capacities.values())
