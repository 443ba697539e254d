"""Setting workers up: each on a thread of its own (setups wait on SSH and the nodes, not
on this machine), at most `limit` at once, one per node; a type whose setups keep failing
waits (its `TypeBackoff`), and the decision log says so."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.backoff import TypeBackoff
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event
from launcher.providers.base import Node, NodeProvider
from launcher.secret_env import kept_on_this_node
from launcher.updater.updater import NodeUpdater, UpdateOptions


class Setups:
    def __init__(
        self,
        provider: NodeProvider,
        config: ClusterConfig,
        backoff: TypeBackoff,
        clock: Callable[[], float],
        log: Callable[[str], None],
        decided: Callable[[str, Action], None],
        on_event: Callable[[Event], None],
        changed: Callable[[], None],
        limit: int,
        on_finished: Callable[[Node, bool, float], None] | None = None,
    ) -> None:
        self.provider = provider
        self.config = config
        self.backoff = backoff
        self.clock = clock
        self.log = log
        self.decided = decided
        self.on_event = on_event
        self.changed = changed  # a node's status tag changed: list again
        self.limit = limit
        # A setup ended: (node, whether it succeeded, seconds it took).
        self.on_finished = on_finished or (lambda node, ok, seconds: None)
        self.lock = threading.Lock()
        self.updating: dict[str, threading.Thread] = {}

    def busy(self) -> set[str]:
        """The workers being set up now (finished setups are forgotten)."""
        with self.lock:
            busy = {node_id for node_id, t in self.updating.items() if t.is_alive()}
            self.updating = {k: v for k, v in self.updating.items() if k in busy}
        return busy

    def running(self) -> int:
        with self.lock:
            return sum(t.is_alive() for t in self.updating.values())

    def start(self, node: Node, head: Node, files_only: bool = False) -> None:
        """Set `node` up (or, `files_only`, copy the file mounts to it), unless it is being
        set up already or `limit` setups run."""
        with self.lock:
            running = self.updating.get(node.id)
            if len(self.updating) >= self.limit or (running and running.is_alive()):
                return
            thread = threading.Thread(
                target=self._sync if files_only else self._update,
                args=(node, head),
                name=f"update-{node.id}",
                daemon=True,
            )
            self.updating[node.id] = thread
        thread.start()

    def _update(self, node: Node, head: Node) -> None:
        self.log(f"setting up {node.id} ({node.node_type}, {node.ip})")
        updater = self._updater(node, head)
        started = self.clock()
        try:
            updater.run()
        except LauncherError as exc:
            self.on_finished(node, False, self.clock() - started)
            self.log(f"{node.id}: {exc}")
            what_next = self.backoff.failed(node.node_type, self.clock())
            if what_next:
                self.decided(what_next, Action.BACKOFF)
            return
        finally:
            self.changed()  # its status tag changed
        self.on_finished(node, True, self.clock() - started)
        self.backoff.succeeded(node.node_type)

    def _sync(self, node: Node, head: Node) -> None:
        try:
            self._updater(node, head).sync_files()
        except LauncherError as exc:
            self.log(f"{node.id}: syncing file mounts failed: {exc}")

    def _updater(self, node: Node, head: Node | None) -> NodeUpdater:
        # The head's copies of the file mounts are at their remote paths, under its home.
        # The head's kept variables (`up --env`), read now: a later `up` may change them.
        options = UpdateOptions(cwd=Path.home(), secret_env=kept_on_this_node())
        return NodeUpdater(self.provider, self.config, node, head, options, self.on_event)
