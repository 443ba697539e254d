"""A job that cannot run on the cluster as it starts: it needs 16 CPUs at once.

Run it with `launcher submit example-configs/local.yaml examples/cpu_tasks.py`. The demo
cluster starts with 8 CPUs (a head and one worker, 4 each). The job reserves 16 one-CPU
slots together (a placement group), so it waits until the autoscaler has added two
workers, printing each node as it joins; then it runs its tasks in those slots and prints
which nodes ran them.
"""

from __future__ import annotations

import collections
import time

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

SLOTS = 16  # CPUs the job needs at once: twice what the demo cluster starts with
WAIT_S = 600.0  # how long to wait for the workers before giving up


@ray.remote(num_cpus=1)
def work(seconds: float) -> str:
    """Hold one CPU of the cluster for `seconds` (sleeping, so a small machine can host a
    large demo cluster), then say which node did the work."""
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()[:8]


def alive_nodes() -> dict[str, dict[str, object]]:
    return {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}


def describe(node: dict[str, object]) -> str:
    resources = node["Resources"]
    cpus = int(resources.get("CPU", 0)) if isinstance(resources, dict) else 0
    return f"node {str(node['NodeID'])[:8]} at {node['NodeManagerAddress']}: {cpus} CPUs"


def wait_for_room(group: PlacementGroup, started: float) -> None:
    """Wait until `group` is placed, printing every node that joins meanwhile."""
    seen = set(alive_nodes())
    ready = group.ready()
    while True:
        done, _ = ray.wait([ready], timeout=0.5)
        for node_id, node in alive_nodes().items():
            if node_id not in seen:
                seen.add(node_id)
                print(f"  + {describe(node)} joined after {time.monotonic() - started:.1f} s")
        if done:
            return
        if time.monotonic() - started > WAIT_S:
            waited = f"{WAIT_S:.0f} s"
            raise SystemExit(f"no room for {SLOTS} CPUs after {waited}: is the autoscaler up?")


def main() -> None:
    ray.init()
    nodes = alive_nodes()
    cpus = int(ray.cluster_resources().get("CPU", 0))
    print(f"the cluster has {len(nodes)} nodes, {cpus} CPUs:")
    for node in nodes.values():
        print(f"  {describe(node)}")
    print(f"asking for {SLOTS} CPUs at once; waiting for the autoscaler to add workers")
    started = time.monotonic()
    group = placement_group([{"CPU": 1}] * SLOTS, strategy="SPREAD")
    wait_for_room(group, started)
    print(f"room for {SLOTS} CPUs after {time.monotonic() - started:.1f} s")
    strategy = PlacementGroupSchedulingStrategy(placement_group=group)
    tasks = [work.options(scheduling_strategy=strategy).remote(2.0) for _ in range(2 * SLOTS)]
    where = collections.Counter(ray.get(tasks))
    print(f"ran {len(tasks)} two-second tasks on {len(where)} nodes:")
    for node_id, count in sorted(where.items()):
        print(f"  node {node_id}: {count} tasks")


if __name__ == "__main__":
    main()
