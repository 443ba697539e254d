"""The planner at scale: thousands of placement groups compete for capped capacity and each
is still placed whole or not at all (a failed group's changes are undone exactly, new nodes
included); the packer's shortcuts (cursors per shape, block bounds, undo log) find exactly
what a plain first-fit scan finds."""

from __future__ import annotations

import random
import re

import pytest

from launcher.autoscaler.decide import packing
from launcher.autoscaler.decide.packing import Packer, Slot, fits, how_many, needs_gpu, shape_of
from launcher.autoscaler.decide.planner import Gang, NodeView, Settings, Snapshot, TypeInfo, plan

TYPES = {
    "cpu4": TypeInfo("cpu4", {"CPU": 4}, 0, 10_000),
    "cpu16": TypeInfo("cpu16", {"CPU": 16}, 0, 10_000),
    "edge": TypeInfo("edge", {"CPU": 4, "edge": 2}, 0, 0),  # only the few that exist
}
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def test_many_groups_are_placed_whole_or_not_at_all() -> None:
    rng = random.Random(20261122)
    nodes = []
    for i in range(300):
        name = rng.choice(("cpu4", "cpu16"))
        cpus = TYPES[name].resources["CPU"]
        free = float(rng.randint(0, int(cpus)))
        nodes.append(NodeView(f"n{i}", name, total={"CPU": cpus}, available={"CPU": free}))
    edge = TYPES["edge"].resources
    nodes += [NodeView(f"e{i}", "edge", total=edge, available=edge) for i in range(10)]
    gangs = []
    for g in range(5_000):
        bundle = {"CPU": float(rng.choice((1, 2, 3)))}
        bundles = (bundle,) * rng.randint(1, 6)
        if g % 5 == 4:  # fails on its last bundle, often after launching nodes for the others
            bundles += ({"CPU": 1, "edge": 1},)
        gangs.append(Gang(bundles, STRATEGIES[g % 4], f"g{g}"))
    tasks = 1_000_000  # {CPU: 1} tasks after the groups take every CPU left over
    result = plan(
        Snapshot(tuple(nodes), pending=(({"CPU": 1}, tasks),), gangs=tuple(gangs)),
        Settings(TYPES, max_workers=700, upscaling_speed=1e6),
    )

    texts = [str(d) for d in result.decisions if d.action in ("wait", "infeasible")]
    not_placed = {m.group(1) for t in texts if (m := re.search(r"placement group (\S+) ", t))}
    placed = [g for g in gangs if g.name not in not_placed]
    assert 0 < len(placed) < len(gangs)
    assert sum(result.launch.values()) == 700 - len(nodes)  # up to the global max_workers
    tasks_waiting = [t for t in texts if "pending bundle(s) of {CPU: 1}" in t]
    assert len(tasks_waiting) == 1
    tasks_left = int(tasks_waiting[0].split()[1])
    # Every CPU is accounted for: what the nodes had free plus what was launched is exactly
    # what the placed groups take plus what the tasks take. A partly placed group, or one
    # whose rollback left capacity or a node behind, would break the balance.
    free = sum(n.available["CPU"] for n in nodes)
    launched = sum(TYPES[t].resources["CPU"] * count for t, count in result.launch.items())
    by_groups = sum(b["CPU"] for g in placed for b in g.bundles)
    assert free + launched == by_groups + (tasks - tasks_left)


class _PlainFirstFit:
    """The reference: every search scans every slot of the tier from the start."""

    def __init__(self) -> None:
        self.free: list[dict[str, float]] = []
        self.gpu: list[bool] = []
        self.saved: tuple[list[dict[str, float]], list[bool]] | None = None

    def add(self, free: dict[str, float]) -> None:
        self.free.append(dict(free))
        self.gpu.append("GPU" in free)

    def take(self, index: int, request: dict[str, float], times: int = 1) -> None:
        for key, value in request.items():
            self.free[index][key] = self.free[index].get(key, 0.0) - value * times

    def find(self, request: dict[str, float], gpu: bool, skip: set[int]) -> int | None:
        tier = (i for i, g in enumerate(self.gpu) if g == gpu and i not in skip)
        return next((i for i in tier if fits(self.free[i], request)), None)

    def fill(self, request: dict[str, float], count: int, gpu: bool) -> int:
        for i in (i for i, g in enumerate(self.gpu) if g == gpu):
            placed = min(count, how_many(self.free[i], request))
            self.take(i, request, placed)
            count -= placed
        return count


@pytest.mark.parametrize("block", [packing.BLOCK, 4])
def test_packer_finds_what_a_plain_first_fit_scan_finds(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many blocks of slots; cursors and block bounds across trials that commit or roll back.
    # With blocks of 4, groups of blocks are 16 slots: dozens of them, grown and cut.
    monkeypatch.setattr(packing, "BLOCK", block)
    rng = random.Random(11)
    shapes = [{"CPU": 1.0}, {"CPU": 2.5}, {"CPU": 0.5}, {"CPU": 1.0, "GPU": 1.0}, {"CPU": 6.0}]
    packer, plain = Packer(), _PlainFirstFit()
    skip: set[int] = set()
    for step in range(5_000):
        op, request = rng.random(), rng.choice(shapes)
        gpu = needs_gpu(request) or rng.random() < 0.3
        if op < 0.15 or not plain.free:
            free = {"CPU": float(rng.randint(0, 8))} | ({"GPU": 1.0} if rng.random() < 0.3 else {})
            packer.add(Slot(None, "t", dict(free), dict(free)))
            plain.add(free)
        elif op < 0.3:
            count = rng.randint(1, 20)
            left = packer.fill(shape_of(request), request, count, gpu)
            assert left == plain.fill(request, count, gpu), step
        elif op < 0.8:
            index = packer.find(shape_of(request), request, gpu, skip)
            assert index == plain.find(request, gpu, skip), step
            if index is not None:
                packer.take(index, request)
                plain.take(index, request)
                if rng.random() < 0.5:
                    skip.add(index)
        elif plain.saved is None and op < 0.87:
            packer.begin()
            plain.saved = ([dict(f) for f in plain.free], list(plain.gpu))
        elif plain.saved is not None:
            if rng.random() < 0.5:
                packer.rollback()
                plain.free, plain.gpu = plain.saved
                skip = {i for i in skip if i < len(plain.free)}
            else:
                packer.commit()
            plain.saved = None
        assert [s.free for s in packer.slots] == plain.free, step
