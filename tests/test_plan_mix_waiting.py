"""plan_mix.Waiting: the most valuable unplaced shapes, kept up to date as bundles are placed,
are exactly what a fresh look over all the counts (`top_others`) finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.autoscaler.decide.packing import Shape
from launcher.autoscaler.decide.plan_mix import MAX_OTHERS, Waiting, top_others

SHAPES: list[Shape] = [(("CPU", float(c)),) for c in range(1, 21)]


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=len(SHAPES), max_size=len(SHAPES)),
    # Some shapes have no worth (no priced type holds them): never offered.
    priced=st.lists(st.booleans(), min_size=len(SHAPES), max_size=len(SHAPES)),
    steps=st.lists(
        st.tuples(st.integers(0, len(SHAPES) - 1), st.integers(0, 10), st.booleans()),
        max_size=60,
    ),
)
def test_top_is_a_fresh_look_after_every_placement(
    counts: list[int], priced: list[bool], steps: list[tuple[int, int, bool]]
) -> None:
    # Worth per bundle with ties (several shapes share one), so the order among equals counts.
    worth = {s: float(i % 4 + 1) if priced[i] else None for i, s in enumerate(SHAPES)}
    waiting = Waiting(zip(SHAPES, counts, strict=True), worth.get)
    left = dict(zip(SHAPES, counts, strict=True))
    for index, n, give_up in steps:
        shape = SHAPES[index]
        assert waiting.top(shape) == top_others(left.items(), shape, worth.get)
        taken = left[shape] if give_up else min(n, left[shape])
        waiting.take(shape, taken)
        left[shape] -= taken
        assert waiting[shape] == left[shape]
    for shape in SHAPES:
        found = waiting.top(shape)
        assert found == top_others(left.items(), shape, worth.get)
        assert len(found) <= MAX_OTHERS
        assert all(other != shape and n > 0 for other, _, n, _ in found)
