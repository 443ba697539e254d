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
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from launcher.autoscaler.demand import Demand, DemandReader
from launcher.autoscaler.minimum import broken_workers
from launcher.autoscaler.observe import planner_settings, snapshot
from launcher.autoscaler.planner import Plan, plan
from launcher.autoscaler.spec import STATE_FILE, AutoscalerSpec
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, NodeProgress
from launcher.pricing import load_prices
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeProvider, NodeStatus
from launcher.providers.factory import make_provider
from launcher.providers.registry import SPECS
from launcher.updater.updater import NodeUpdater, UpdateOptions

MAX_PARALLEL_SETUPS = 8
FAILURES_BEFORE_BACKOFF = 3


def log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} {text}", flush=True)


@dataclass
class _Backoff:
    failures: dict[str, int] = field(default_factory=dict)
    until: dict[str, float] = field(default_factory=dict)

    def blocked(self, now: float) -> set[str]:
        return {t for t, end in self.until.items() if end > now}

    def failed(self, node_type: str, now: float) -> None:
        count = self.failures.get(node_type, 0) + 1
        self.failures[node_type] = count
        if count >= FAILURES_BEFORE_BACKOFF:
            wait = min(300.0, 10.0 * 2 ** (count - FAILURES_BEFORE_BACKOFF))
            self.until[node_type] = now + wait
            log(
                f"{node_type}: {count} setups failed in a row; waiting {wait:g} s before "
                "launching it again"
            )

    def succeeded(self, node_type: str) -> None:
        self.failures.pop(node_type, None)
        self.until.pop(node_type, None)


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
        self.backoff = _Backoff()
        self.settings = planner_settings(config, SPECS[config.provider.type], load_prices())
        self.reader: DemandReader | None = None
        self.seen_before: set[str] = set()
        self.seen_now: set[str] = set()
        self.recent: list[dict[str, object]] = []

    def run(self) -> None:
        log(f"autoscaler for cluster {self.config.cluster_name} started")
        while not self.stopping.is_set():
            try:
                self.tick()
            except LauncherError as exc:
                log(f"error: {exc}")
            self.stopping.wait(self.interval_s)
        log("autoscaler stopped")

    def tick(self) -> None:
        with self.lock:
            busy = {node_id for node_id, t in self.updating.items() if t.is_alive()}
            self.updating = {k: v for k, v in self.updating.items() if k in busy}
        nodes = self.provider.nodes()
        head = next((n for n in nodes if n.kind is NodeKind.HEAD), None)
        now = time.monotonic()
        blocked = self.backoff.blocked(now)
        broken = broken_workers(self.config, nodes, busy)
        for node_id, reason in broken:
            self._decided(f"terminate {node_id}: {reason}", "terminate")
        demand = self._demand(head)
        result = plan(snapshot(self.config, nodes, demand, {i for i, _ in broken}), self.settings)
        for decision in result.decisions:
            if decision.node_type not in blocked or decision.action != "launch":
                self._decided(str(decision), decision.action)
        terminate = [node_id for node_id, _ in broken] + [i for i, _ in result.terminate]
        if terminate:
            self.provider.terminate_nodes(terminate)
        gone = set(terminate)
        workers = [n for n in nodes if n.kind is NodeKind.WORKER and n.id not in gone]
        for type_name, count in result.launch.items():
            if count > 0 and type_name not in blocked:
                workers += self.provider.create_nodes(
                    self.config.node_types[type_name],
                    NodeKind.WORKER,
                    count,
                    {TAG_STATUS: NodeStatus.UNINITIALIZED},
                )
        self._write_state(demand, result)
        if head is None:
            return
        for node in workers:  # this tick's listing plus what it launched: no second scan
            if node.status is NodeStatus.UNINITIALIZED and node.id not in busy:
                self._start_update(node.id, head.id)

    def _demand(self, head: Node | None) -> Demand:
        if head is None or head.status is not NodeStatus.UP_TO_DATE:
            return Demand()
        try:
            if self.reader is None:
                self.reader = DemandReader(self.provider.ray_address(head))
            return self.reader.read()
        except Exception as exc:  # Ray restarting or unreachable: no demand this tick
            self.reader = None
            self._decided(f"cannot read Ray's demand yet: {exc}", "warning")
            return Demand()

    def _decided(self, text: str, action: str) -> None:
        """Log a decision when it differs from the last tick's, so the log stays readable."""
        self.seen_now.add(text)
        if text in self.seen_before:
            return
        log(text)
        if action in ("launch", "terminate", "infeasible"):
            self.recent.append({"time": time.time(), "action": action, "text": text})
            self.recent = self.recent[-50:]

    def _write_state(self, demand: Demand, result: Plan) -> None:
        self.seen_before, self.seen_now = self.seen_now, set()
        state = {
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

    def _start_update(self, node_id: str, head_id: str) -> None:
        with self.lock:
            if len(self.updating) >= MAX_PARALLEL_SETUPS:
                return
            thread = threading.Thread(
                target=self._update, args=(node_id, head_id), name=f"update-{node_id}", daemon=True
            )
            self.updating[node_id] = thread
        thread.start()

    def _update(self, node_id: str, head_id: str) -> None:
        nodes = {n.id: n for n in self.provider.nodes()}
        node, head = nodes.get(node_id), nodes.get(head_id)
        if node is None:
            return
        log(f"setting up {node_id} ({node.node_type}, {node.ip})")
        updater = NodeUpdater(
            self.provider, self.config, node, head, UpdateOptions(cwd=Path.home()), self._on_event
        )
        try:
            updater.run()
        except LauncherError as exc:
            log(f"{node_id}: {exc}")
            self.backoff.failed(node.node_type, time.monotonic())
            return
        self.backoff.succeeded(node.node_type)

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
    daemon = Daemon(make_provider(config), config, args.interval)

    def stop(signum: int, frame: FrameType | None) -> None:
        daemon.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
