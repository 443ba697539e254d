"""A job that needs more than the head node: one-CPU tasks spread over the cluster.

Run it with `launcher submit example-configs/local.yaml examples/cpu_tasks.py`. It asks for
three times the CPUs the cluster has, so the autoscaler adds workers while the tasks wait;
it prints which nodes ran its tasks and how long the whole batch took.
"""

from __future__ import annotations

import collections
import socket
import time

import ray


@ray.remote(num_cpus=1)
def work(seconds: float) -> str:
    """Hold one CPU of the cluster for `seconds` (sleeping, so a small machine can host a
    large demo cluster), then say which node did the work."""
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()[:8]


def main() -> None:
    ray.init()
    nodes = [n for n in ray.nodes() if n["Alive"]]
    cpus = int(ray.cluster_resources().get("CPU", 0))
    print(f"connected from {socket.gethostname()}: {len(nodes)} nodes, {cpus} CPUs")
    for node in nodes:
        print(
            f"  node {node['NodeID'][:8]} at {node['NodeManagerAddress']}: "
            f"{int(node['Resources'].get('CPU', 0))} CPUs"
        )
    # Three times what the cluster holds now: the autoscaler adds workers while they wait.
    tasks = 3 * cpus
    started = time.monotonic()
    where = collections.Counter(ray.get([work.remote(3.0) for _ in range(tasks)]))
    elapsed = time.monotonic() - started
    print(f"ran {tasks} three-second tasks in {elapsed:.1f} s on {len(where)} nodes:")
    for node_id, count in sorted(where.items()):
        print(f"  node {node_id}: {count} tasks")


if __name__ == "__main__":
    main()
