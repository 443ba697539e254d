"""The autoscaler daemon on the head node: observe the provider, decide, act, repeat.

Each tick replaces workers that died or failed setup (with a backoff per type after repeated
failures), reads Ray's pending demand, and acts on the planner's decisions: launch workers
for min_workers and demand, terminate idle ones. Every decision is logged with its reason
to stdout (the head's monitor log) and the latest ones are kept in a state file for
`launcher status`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from launcher.autoscaler.backoff import TypeBackoff
from launcher.autoscaler.demand import Demand
from launcher.autoscaler.executor import Executor
from launcher.autoscaler.gcs import GcsDemandReader
from launcher.autoscaler.minimum import broken_workers
from launcher.autoscaler.observe import planner_settings, snapshot
from launcher.autoscaler.planner import Plan, plan
from launcher.autoscaler.spec import STARTED_LINE, STATE_FILE, AutoscalerSpec
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, NodeProgress
from launcher.pricing import load_prices
from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState, NodeStatus
from launcher.providers.factory import make_provider
from launcher.providers.registry import SPECS
from launcher.updater.updater import NodeUpdater, UpdateOptions

MAX_PARALLEL_SETUPS = 32  # setups wait on SSH and the nodes, not on this machine
RESYNC_INTERVAL_S = 10.0  # file_mounts_sync_continuously: how often workers get the mounts
SETUP_FAILURES_BEFORE_BACKOFF = 3
SETUP_FAILURES_GIVE_UP = 8  # a type failing setup this often in a row is not replaced again


def log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} {text}", flush=True)


class Daemon:
    def __init__(
        self, provider: NodeProvider, config: ClusterConfig, interval_s: float = 1.0
    ) -> None:
        self.provider = provider
        self.config = config
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.updating: dict[str, threading.Thread] = {}
        self.lock = threading.Lock()
        self.setup_backoff = TypeBackoff(
            "setups failed",
            after=SETUP_FAILURES_BEFORE_BACKOFF,
            base_s=10.0,
            give_up_after=SETUP_FAILURES_GIVE_UP,
        )
        self.wake = threading.Event()  # a launch finished: tick now, to set its nodes up
        self.executor = Executor(provider, config, self._decided, on_done=self.wake.set)
        self.settings = planner_settings(config, SPECS[config.provider.type], load_prices())
        self.reader: GcsDemandReader | None = None
        self.seen_before: set[str] = set()
        self.seen_now: set[str] = set()
        self.recent: list[dict[str, object]] = []
        self.preempted: set[str] = set()
        self.last_resync = 0.0

    def run(self) -> None:
        log(f"{STARTED_LINE} {self.config.cluster_name} started")
        try:
            while not self.stopping.is_set():
                try:
                    self.tick()
                except LauncherError as exc:
                    log(f"error: {exc}")
                self.wake.wait(self.interval_s)
                self.wake.clear()
        finally:
            self.executor.shutdown()
            if self.reader is not None:
                self.reader.close()
        log("autoscaler stopped")

    def tick(self) -> None:
        with self.lock:
            busy = {node_id for node_id, t in self.updating.items() if t.is_alive()}
            self.updating = {k: v for k, v in self.updating.items() if k in busy}
        self.executor.collect()
        listed = self.provider.nodes()
        nodes = listed + self.executor.unlisted(listed)
        head = next((n for n in nodes if n.kind is NodeKind.HEAD), None)
        preempted = {n.id: n for n in nodes if n.state is NodeState.PREEMPTED}
        for node_id, node in preempted.items():
            if node_id not in self.preempted:
                self.executor.preempted(node)
        self.preempted = set(preempted)  # each preemption remembered once, while listed
        demand = self._demand(head)
        broken = broken_workers(self.config, nodes, busy, demand.nodes)
        for node_id, reason in broken:
            self._decided(f"terminate {node_id}: {reason}", "terminate")
        unavailable = self._unavailable()
        view = snapshot(
            self.config,
            nodes,
            demand,
            {i for i, _ in broken},
            self.executor.pending(),
            unavailable,
        )
        result = plan(view, self.settings)
        for decision in result.decisions:
            self._decided(str(decision), decision.action)
        terminate = [node_id for node_id, _ in broken] + [i for i, _ in result.terminate]
        gone = set(terminate)
        if terminate:
            try:
                self.provider.stop_nodes(terminate)
            except LauncherError as exc:
                # A node that could not be freed (its Ray would not stop) is listed again
                # next tick; meanwhile the rest of the tick (launches) goes on.
                log(f"error: {exc}")
            else:
                if self.provider.terminating_frees_capacity:
                    self.executor.capacity.freed({n.zone for n in nodes if n.id in gone})
        for type_name, count, stands_in_for in result.launches():
            self.executor.launch(type_name, count, stands_in_for)
        self._write_state(demand, result, unavailable)
        if head is None:
            return
        resync = self._resync_due()
        for node in nodes:  # the listing plus launched nodes not listed yet
            if node.kind is not NodeKind.WORKER or node.id in busy or node.id in gone:
                continue
            if node.status is NodeStatus.UNINITIALIZED:
                self._start_update(node.id, head.id)
            elif resync and node.status is NodeStatus.UP_TO_DATE:
                self._start_update(node.id, head.id, files_only=True)

    def _resync_due(self) -> bool:
        """file_mounts_sync_continuously: time to copy the head's file mounts to workers."""
        if not self.config.file_mounts_sync_continuously:
            return False
        now = time.monotonic()
        if now - self.last_resync < RESYNC_INTERVAL_S:
            return False
        self.last_resync = now
        return True

    def _unavailable(self) -> dict[str, str]:
        """Types the planner must not launch now -> why: out of capacity, or waiting after
        failed launches or setups."""
        now = time.monotonic()
        out = self.executor.unavailable()
        for backoff in (self.executor.launch_backoff, self.setup_backoff):
            for name, why in backoff.reasons(now).items():
                out.setdefault(name, why)
        return out

    def _demand(self, head: Node | None) -> Demand:
        """Ray's demand, or none while the GCS cannot be read (bounded: see gcs.py)."""
        if head is None or head.status is not NodeStatus.UP_TO_DATE:
            return Demand()
        address = self.provider.ray_address(head)
        if self.reader is None or self.reader.address != address:
            if self.reader is not None:
                self.reader.close()
            self.reader = GcsDemandReader(address, log)
        return self.reader.read() or Demand()

    def _decided(self, text: str, action: str) -> None:
        """Log a decision when it differs from the last tick's, so the log stays readable."""
        self.seen_now.add(text)
        if text in self.seen_before:
            return
        log(text)
        if action in ("launch", "terminate", "infeasible", "fallback", "capacity", "backoff"):
            self.recent.append({"time": time.time(), "action": action, "text": text})
            self.recent = self.recent[-50:]

    def _write_state(self, demand: Demand, result: Plan, unavailable: Mapping[str, str]) -> None:
        self.seen_before, self.seen_now = self.seen_now, set()
        state = {
            "pending_launches": [
                {
                    "node_type": p.node_type,
                    "count": p.count,
                    "stands_in_for": p.stands_in_for,
                    "started": p.started,
                }
                for p in self.executor.pending()
            ],
            "unavailable": dict(unavailable),
            "avoided_zones": self.executor.capacity.describe(time.monotonic()),
            "time": time.time(),
            "pending": [{"resources": dict(r), "count": c} for r, c in demand.pending],
            "placement_groups": [
                {"strategy": g.strategy, "bundles": [dict(b) for b in g.bundles]}
                for g in demand.gangs
            ],
            "requested": [dict(c) for c in demand.constraints],
            "infeasible": [dict(r) for r in result.infeasible],
            "decisions": self.recent[-10:],
        }
        path = Path(STATE_FILE).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state))
        temporary.replace(path)

    def _start_update(self, node_id: str, head_id: str, files_only: bool = False) -> None:
        with self.lock:
            running = self.updating.get(node_id)
            if len(self.updating) >= MAX_PARALLEL_SETUPS or (running and running.is_alive()):
                return
            thread = threading.Thread(
                target=self._sync if files_only else self._update,
                args=(node_id, head_id),
                name=f"update-{node_id}",
                daemon=True,
            )
            self.updating[node_id] = thread
        thread.start()

    def _update(self, node_id: str, head_id: str) -> None:
        nodes = {n.id: n for n in self.provider.nodes()}
        node, head = nodes.get(node_id), nodes.get(head_id)
        if node is None:
            return
        log(f"setting up {node_id} ({node.node_type}, {node.ip})")
        updater = self._updater(node, head)
        try:
            updater.run()
        except LauncherError as exc:
            log(f"{node_id}: {exc}")
            what_next = self.setup_backoff.failed(node.node_type, time.monotonic())
            if what_next:
                self._decided(what_next, "backoff")
            return
        self.setup_backoff.succeeded(node.node_type)

    def _sync(self, node_id: str, head_id: str) -> None:
        nodes = {n.id: n for n in self.provider.nodes()}
        node = nodes.get(node_id)
        if node is None:
            return
        try:
            self._updater(node, nodes.get(head_id)).sync_files()
        except LauncherError as exc:
            log(f"{node_id}: syncing file mounts failed: {exc}")

    def _updater(self, node: Node, head: Node | None) -> NodeUpdater:
        # The head's copies of the file mounts are at their remote paths, under its home.
        options = UpdateOptions(cwd=Path.home())
        return NodeUpdater(self.provider, self.config, node, head, options, self._on_event)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, NodeProgress) and (event.done or event.failed):
            log(f"{event.node_id}: {event.stage}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.autoscaler")
    parser.add_argument("--spec", required=True, help="the autoscaler spec written by `up`")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    args = parser.parse_args(argv)
    spec = AutoscalerSpec.from_json(Path(args.spec).expanduser().read_text())
    config = spec.load_on_head()
    daemon = Daemon(make_provider(config, on_head=True), config, args.interval)

    def stop(signum: int, frame: FrameType | None) -> None:
        daemon.stopping.set()
        daemon.wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
