"""What Ray is waiting for, read from the head's GCS. The only module that imports Ray.

Uses Ray 2.60's autoscaler state API (`get_cluster_resource_state`): pending task and actor
bundles, pending placement groups with their strategy, `request_resources` constraints,
and every node's resources and idle time. `request_resources` made while Ray's own v2
autoscaler is off land in the internal KV instead; both are read.

Ray's GCS client blocks (40 s to connect, indefinitely to read) and ends its whole process
after 60 s without a GCS, so the autoscaler reads through a child process running `main`
here (`launcher.autoscaler.observe.gcs`), with demand passed as one JSON line per read
(decide/demand.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from launcher.autoscaler.decide.demand import (
    JOBS_UNKNOWN,
    READY_LINE,
    Demand,
    RayNode,
    _forget_of,
    _metrics_address_of,
    encode,
)
from launcher.autoscaler.decide.planner import Gang, Resources
from launcher.autoscaler.observe.notice_keys import NOTICE_NAMESPACE, NOTICE_PREFIX

_V1_REQUEST_KEY = b"autoscaler_resource_request"
# Where Ray's metrics discovery (ray/_private/metrics_agent.py, PrometheusServiceDiscoveryWriter)
# reads the autoscaler's metrics address from, every 5 s; Ray's monitor writes it once when it
# starts. In the default namespace.
_METRICS_ADDRESS_KEY = b"AutoscalerMetricsAddress"
_SESSION_KEY, _SESSION_NAMESPACE = b"session_name", b"session"
PUBLISH_EVERY_S = 5.0  # how often the address is checked (Ray's discovery's period)
_INTERNAL_NAMESPACE = "_ray_internal"  # Ray's own drivers and actors (the dashboard's, ...)
_STRATEGIES = ("STRICT_SPREAD", "STRICT_PACK", "SPREAD", "PACK")


def _resources(raw: Mapping[str, float]) -> dict[str, float]:
    """Ray's bundles carry implicit resources (`node:IP`, placement group ones); keep the
    ones node types declare."""
    return {
        k: float(v)
        for k, v in raw.items()
        if not k.startswith("node:") and "_group_" not in k and k != "bundle"
    }


def _strategy(details: str) -> str:
    # Ray writes "<pg id>:<STRATEGY>|<state>".
    for name in _STRATEGIES:
        if f":{name}|" in details or details.endswith(f":{name}"):
            return name
    return "PACK"


class DemandReader:
    def __init__(self, gcs_address: str) -> None:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        self.client: Any = GcsClient(address=gcs_address)
        self.session = ""
        self.published_at = -PUBLISH_EVERY_S

    def publish_metrics_address(self, address: str | None) -> None:
        """Make Ray's metrics discovery name `address` as the autoscaler's (over what Ray's
        monitor wrote when it started), checked at most every PUBLISH_EVERY_S."""
        now = time.monotonic()
        if not address or now - self.published_at < PUBLISH_EVERY_S:
            return
        with contextlib.suppress(Exception):  # tried again at a later read
            if self.client.internal_kv_get(_METRICS_ADDRESS_KEY, None) != address.encode():
                self.client.internal_kv_put(_METRICS_ADDRESS_KEY, address.encode(), True, None)
            self.published_at = now

    def _session(self) -> str:
        if not self.session:
            with contextlib.suppress(Exception):  # read again at the next read
                raw = self.client.internal_kv_get(_SESSION_KEY, _SESSION_NAMESPACE)
                self.session = raw.decode() if raw else ""
        return self.session

    def read(self) -> Demand:
        from ray.autoscaler.v2.sdk import get_cluster_resource_state
        from ray.core.generated.autoscaler_pb2 import NodeStatus  # type: ignore[attr-defined]

        state = get_cluster_resource_state(self.client)
        pending = tuple(
            (_resources(r.request.resources_bundle), int(r.count))
            for r in state.pending_resource_requests
        )
        gangs = tuple(
            Gang(
                tuple(_resources(b.resources_bundle) for b in g.requests),
                _strategy(g.details),
                g.details.split(":", 1)[0][:12],
            )
            for g in state.pending_gang_resource_requests
        )
        constraints: list[Resources] = [
            _resources(r.request.resources_bundle)
            for c in state.cluster_resource_constraints
            for r in c.resource_requests
            for _ in range(max(1, int(r.count)))
        ]
        constraints += self._v1_requests()
        nodes = tuple(
            RayNode(
                n.node_id.hex(),
                n.node_ip_address,
                dict(n.total_resources),
                dict(n.available_resources),
                n.idle_duration_ms / 1000.0,
                n.status != NodeStatus.DEAD,
            )
            for n in state.node_states
        )
        return Demand(
            pending,
            gangs,
            tuple(constraints),
            nodes,
            self._jobs(),
            self._actors(),
            self._notices(),
            self._session(),
        )

    def _actors(self) -> int:
        import asyncio

        async def alive() -> Any:
            return await self.client.async_get_all_actor_info(actor_state_name="ALIVE", timeout=5)

        try:
            actors = asyncio.run(alive())
        except Exception:  # fail closed: an actor may be alive
            return -1
        return sum(
            not str(a.ray_namespace).startswith(_INTERNAL_NAMESPACE) for a in actors.values()
        )

    def _notices(self) -> tuple[tuple[str, float], ...]:
        namespace = NOTICE_NAMESPACE.encode()
        try:
            keys = self.client.internal_kv_keys(NOTICE_PREFIX.encode(), namespace)
            found = []
            for key in keys:
                value = self.client.internal_kv_get(key, namespace)
                if value:
                    found.append((key.decode()[len(NOTICE_PREFIX) :], float(value)))
        except Exception:  # none this tick; read again at the next
            return ()
        return tuple(found)

    def forget_notices(self, node_ids: Sequence[str]) -> None:
        """Delete the notices these nodes reported (they are gone): one small key each."""
        namespace = NOTICE_NAMESPACE.encode()
        for node_id in node_ids:
            with contextlib.suppress(Exception):  # tried again at a later tick
                self.client.internal_kv_del((NOTICE_PREFIX + node_id).encode(), False, namespace)

    def _jobs(self) -> tuple[str, ...]:
        try:
            jobs = self.client.get_all_job_info(
                skip_submission_job_info_field=True, skip_is_running_tasks_field=True
            )
        except Exception:  # fail closed: a job may run
            return (JOBS_UNKNOWN,)
        return tuple(
            job.job_id.hex()
            for job in jobs.values()
            if not job.is_dead and not job.config.ray_namespace.startswith(_INTERNAL_NAMESPACE)
        )

    def _v1_requests(self) -> list[Resources]:
        try:
            raw = self.client.internal_kv_get(_V1_REQUEST_KEY, None)
        except Exception:  # an old or busy GCS: no constraints this tick
            return []
        if not raw:
            return []
        try:
            bundles = json.loads(raw)
        except ValueError:
            return []
        return [_resources(b) for b in bundles if isinstance(b, dict)]


def serve(gcs_address: str, requests: TextIO, replies: TextIO) -> None:
    """Answer each request line with {"demand": ...} or {"error": "..."} on one line."""
    from ray.autoscaler.v2.sdk import get_cluster_resource_state  # noqa: F401  (import cost here)

    replies.write(READY_LINE + "\n")
    replies.flush()
    reader: DemandReader | None = None
    for request in requests:
        try:
            reader = reader or DemandReader(gcs_address)
            reader.forget_notices(_forget_of(request))
            reader.publish_metrics_address(_metrics_address_of(request))
            reply: dict[str, Any] = {"demand": encode(reader.read())}
        except Exception as exc:  # reported to the parent, which decides what it means
            reader = None
            reply = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.autoscaler.observe.ray_state")
    parser.add_argument("--gcs", required=True, help="the GCS address, ip:port")
    address = parser.parse_args(argv).gcs
    # Replies own the real stdout; anything else printed there (Ray, a library) goes to stderr.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(address, sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
