"""When to move the work off a worker that a provider gave notice it takes back: a pure
decision.

A reclaim notice (AWS gives 2 minutes, GCP 30 s) leaves time to launch the replacement; the
daemon does that at once (the node is planned as gone). What runs on the noticed node would
still die with it, and Ray's libraries (Tune, Train) only see a node that vanished after
their own failure detection. Stopping the node's Ray on purpose, once the work has somewhere
to go, tells Ray at once (the raylet leaves the cluster cleanly), so the work restarts from
its last checkpoint on the replacement before the reclaim, not after it.

A node is evacuated
- at once when nothing of Ray's runs on it (nothing to lose; new work stays off it);
- when another live Ray node has room for everything it runs (the replacement joined);
- at the latest `before_s` seconds before the reclaim, room or not: a clean stop is found
  sooner than a machine that vanishes, and the work waits for room either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.autoscaler.decide.demand import RayNode

if TYPE_CHECKING:  # the providers import the autoscaler's modules: no cycle at run time
    from launcher.providers.base import Node

EVACUATE_BEFORE_S = 10.0


@dataclass(frozen=True)
class Evacuation:
    node: Node
    reason: str


def used_resources(ray: RayNode) -> dict[str, float]:
    """What Ray has handed out on `ray` (tasks, actors, placement-group bundles)."""
    used = {k: v - ray.available.get(k, 0.0) for k, v in ray.total.items()}
    return {k: v for k, v in used.items() if v > 1e-9 and k != "object_store_memory"}


def _fits(used: Mapping[str, float], ray: RayNode) -> bool:
    return all(ray.available.get(k, 0.0) + 1e-9 >= v for k, v in used.items())


def evacuations(
    noticed: Sequence[Node],
    ray_nodes: Iterable[RayNode],
    now: float,
    done: set[str],
    before_s: float = EVACUATE_BEFORE_S,
) -> list[Evacuation]:
    """The noticed workers whose Ray to stop now (see the module's docstring). `now` is
    wall-clock time, as `Node.reclaim_at`; `done` are nodes already evacuated."""
    ray_nodes = list(ray_nodes)
    leaving = {n.ip for n in noticed}
    alive = {n.ip: n for n in ray_nodes if n.alive}
    others = [n for n in ray_nodes if n.alive and n.ip not in leaving]
    out = []
    for node in noticed:
        ray = alive.get(node.ip or "")
        if node.id in done or ray is None or node.reclaim_at is None:
            continue
        used = used_resources(ray)
        room = next((o for o in others if _fits(used, o)), None)
        if not used:
            out.append(Evacuation(node, "nothing of Ray's runs on it"))
        elif room is not None:
            out.append(Evacuation(node, f"its work fits on {room.ip} now"))
        elif node.reclaim_at - now <= before_s:
            out.append(Evacuation(node, f"{before_s:g} s or less before the reclaim"))
    return out
