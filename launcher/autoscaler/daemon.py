"""The autoscaler daemon on the head node: observe the provider, decide, act, repeat.

In this version it keeps each node type at min_workers and replaces workers that die or
fail setup (with a backoff per type after repeated failures). Every action is logged with
its reason to stdout, which `up` sends to the head's monitor log.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from launcher.autoscaler.minimum import decide
from launcher.autoscaler.spec import AutoscalerSpec
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, NodeProgress
from launcher.providers.base import TAG_STATUS, NodeKind, NodeProvider, NodeStatus
from launcher.providers.factory import make_provider
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
        decisions = decide(self.config, nodes, busy, self.backoff.blocked(time.monotonic()))
        if decisions.terminate:
            for node_id, reason in decisions.terminate:
                log(f"terminating {node_id}: {reason}")
            self.provider.terminate_nodes([node_id for node_id, _ in decisions.terminate])
        for type_name, (count, reason) in decisions.launch.items():
            log(f"launching {count} x {type_name}: {reason}")
            self.provider.create_nodes(
                self.config.node_types[type_name],
                NodeKind.WORKER,
                count,
                {TAG_STATUS: NodeStatus.UNINITIALIZED},
            )
        if head is None:
            return
        for node in self.provider.workers():
            if node.status is NodeStatus.UNINITIALIZED and node.id not in busy:
                self._start_update(node.id, head.id)

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
