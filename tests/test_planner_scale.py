"""The planner on a large snapshot: thousands of placement groups compete for capped
capacity, and each is still placed whole or not at all (a failed group's changes are undone
exactly, new nodes included)."""

from __future__ import annotations

import random
import re

from launcher.autoscaler.planner import Gang, NodeView, Settings, Snapshot, TypeInfo, plan

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
