"""Generated history for the page's tests and bench (`launcher/web/`): a cluster record with
`nodes` nodes, and a head timeline (in the format the head's autoscaler writes) with
`decisions` decisions, a sample a minute's worth apart, reclaims and capacity failures."""

from __future__ import annotations

import json
import random

from launcher.ledger.record import ClusterRecord, ClusterState, NodeRecord, Run

ACTIONS = ("launch", "terminate", "fallback", "wait", "infeasible")
TYPES = ("cpu-spot", "cpu", "gpu-spot")


def record(name: str, nodes: int, now: float, *, state: str = ClusterState.UP) -> ClusterRecord:
    """`nodes` nodes, nine in ten running (the rest gone), a third of them on spot."""
    rng = random.Random(nodes)
    kept = {}
    for i in range(nodes):
        node_type = "head" if i == 0 else TYPES[i % len(TYPES)]
        start = now - rng.uniform(60, 86400)
        running = state == ClusterState.UP and i % 10 != 9
        end = now if running else start + rng.uniform(30, now - start)
        node_id = f"i-{i:06d}"
        kept[node_id] = NodeRecord(
            id=node_id,
            kind="head" if i == 0 else "worker",
            node_type=node_type,
            machine="m5.xlarge" if "gpu" not in node_type else "g5.xlarge",
            spot=node_type.endswith("spot"),
            price_per_hour=0.192 if "gpu" not in node_type else 1.006,
            runs=(Run(start, end, open=running),),
            price_source="static table",
        )
    return ClusterRecord(
        name=name,
        provider="aws",
        region="us-west-2",
        config_path=f"/configs/{name}.yaml",
        config_text=f"cluster_name: {name}\nprovider: {{type: aws, region: us-west-2}}\n",
        state=state,
        state_since=now - 86400,
        nodes=kept,
    )


def _wave(i: int) -> int:
    """Nodes of a type at sample `i`: a slow rise and fall, 5 to 25."""
    return 5 + int(20 * abs((i % 240) - 120) / 120)


def timeline(decisions: int, now: float, *, samples: int = 1440) -> list[str]:
    """Timeline lines over the last day: `samples` samples, `decisions` decisions, a reclaim
    every 50 decisions and a capacity failure every 200, in time order."""
    start = now - 86400
    events: list[dict[str, object]] = []
    for i in range(samples):
        t = start + i * 86400 / samples
        running = {ty: _wave(i) + k for k, ty in enumerate(TYPES)}
        # Demand runs ahead of the nodes: what is asked before the nodes for it arrive.
        wanted = max(0, _wave(i + 12) - _wave(i)) * 6
        events.append(
            {
                "kind": "sample",
                "t": t,
                "nodes": {
                    ty: {"running": n, "launching": i % 3, "spot": ty.endswith("spot")}
                    for ty, n in running.items()
                },
                "pending": {"CPU": float(wanted), "GPU": float(wanted // 16)},
                "infeasible": 0,
                "cost_per_hour": 4.2,
            }
        )
    for i in range(decisions):
        t = start + (i + 0.5) * 86400 / max(decisions, 1)
        action = ACTIONS[i % len(ACTIONS)]
        node_type = TYPES[i % len(TYPES)]
        events.append(
            {
                "kind": "decision",
                "t": t,
                "action": action,
                "node_type": node_type,
                "count": 1 + i % 4,
                "reason": f"{action} {node_type}: {i % 7 + 1} pending bundle(s) of {{CPU: 2}}",
            }
        )
        if i % 50 == 0:
            events.append(
                {
                    "kind": "reclaim",
                    "t": t,
                    "node_id": f"i-{i:06d}",
                    "node_type": "cpu-spot",
                    "how": "notice",
                    "replaced_by": "cpu" if i % 100 == 0 else "cpu-spot",
                }
            )
        if i % 200 == 0:
            events.append(
                {
                    "kind": "failure",
                    "t": t,
                    "node_type": "gpu-spot",
                    "zone": "us-west-2a",
                    "reason": "InsufficientInstanceCapacity",
                }
            )
    events.sort(key=lambda e: float(e["t"]))  # type: ignore[arg-type]
    return [json.dumps(e) for e in events]
