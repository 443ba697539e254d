"""The executor: carries out the planner's launches through the provider, in concurrent
batches, and remembers what failed.

`launch` returns at once; batches run on a thread pool and their outcomes are picked up by
`collect` on the daemon's own thread, so decisions are logged in order and nothing but the
pool touches the provider concurrently. Until a launch is collected, and until its nodes
appear in the provider's listing (clouds list new instances with a delay), it counts as
pending, so the planner never asks twice for the same demand.

- A capacity failure (CapacityError) is remembered per type and zone (`CapacityMemory`);
  the zone is avoided, and once every zone of a type is, the planner uses its fallbacks.
- Any other launch failure makes the type wait before trying again (`TypeBackoff`,
  doubling); the planner asks again on a later tick, which is the retry.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.backoff import CapacityMemory, TypeBackoff
from launcher.autoscaler.decide.view import PendingLaunch
from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError, LauncherError
from launcher.providers.base import (
    TAG_STANDS_IN_FOR,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeProvider,
    NodeStatus,
)

MAX_BATCH = 10  # nodes per create_nodes call
MAX_CONCURRENT_BATCHES = 4
LISTING_GRACE_S = 120.0  # how long a created node may stay missing from listings


@dataclass
class _Outcome:
    launch: PendingLaunch
    nodes: list[Node] = field(default_factory=list)
    error: LauncherError | None = None


@dataclass
class Executor:
    provider: NodeProvider
    config: ClusterConfig
    log: Callable[[str, Action, str], None]  # (text, kind, node type) -> decision log
    capacity: CapacityMemory = field(default_factory=CapacityMemory)
    launch_backoff: TypeBackoff = field(
        default_factory=lambda: TypeBackoff("launches failed", after=1, base_s=5.0)
    )
    max_batch: int = MAX_BATCH
    clock: Callable[[], float] = time.monotonic  # ages and backoffs
    wall_clock: Callable[[], float] = time.time  # a launch's start, shown by `status`
    on_done: Callable[[], None] = lambda: None  # a launch finished (wake the daemon's loop)
    # A capacity failure, per zone: (type, zone or None, the provider's error).
    on_failure: Callable[[str, str | None, str], None] = lambda node_type, zone, why: None
    # Every launch collected: (type, nodes asked, nodes made, seconds it took, failed).
    on_launched: Callable[[str, int, int, float, bool], None] = lambda *outcome: None

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(MAX_CONCURRENT_BATCHES, thread_name_prefix="launch")
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._running: dict[int, PendingLaunch] = {}
        self._done: list[_Outcome] = []
        self._unlisted: dict[str, tuple[Node, float]] = {}  # created, not yet listed

    # -- acting ---------------------------------------------------------------------
    def launch(self, node_type: str, count: int, stands_in_for: str | None = None) -> None:
        """Start `count` workers of `node_type` in batches of at most `max_batch`."""
        while count > 0:
            size = min(count, self.max_batch)
            count -= size
            pending = PendingLaunch(
                next(self._ids), node_type, size, stands_in_for, self.wall_clock()
            )
            with self._lock:
                self._running[pending.id] = pending
            future = self._pool.submit(self._create, pending)
            future.add_done_callback(self._finished(pending))

    def _create(self, pending: PendingLaunch) -> list[Node]:
        tags = {TAG_STATUS: NodeStatus.UNINITIALIZED.value}
        if pending.stands_in_for:
            tags[TAG_STANDS_IN_FOR] = pending.stands_in_for
        node_type = self.config.node_types[pending.node_type]
        avoid = self.capacity.avoided_zones(pending.node_type, self.clock())
        return self.provider.create_nodes(
            node_type,
            NodeKind.WORKER,
            pending.count,
            tags,
            avoid_zones=avoid,
            request_id=pending.request_id,
        )

    def _finished(self, pending: PendingLaunch) -> Callable[[Future[list[Node]]], None]:
        def done(future: Future[list[Node]]) -> None:
            try:
                outcome = _Outcome(pending, nodes=future.result())
            except LauncherError as exc:
                created = exc.created if isinstance(exc, CapacityError) else []
                outcome = _Outcome(pending, nodes=list(created), error=exc)
            except Exception as exc:  # a provider bug must not kill the daemon
                outcome = _Outcome(pending, error=LauncherError(f"{type(exc).__name__}: {exc}"))
            with self._lock:
                self._running.pop(pending.id, None)
                self._done.append(outcome)
            self.on_done()

        return done

    def collect(self) -> list[Node]:
        """Outcomes of finished launches: log them, remember failures, and return the
        nodes they created."""
        with self._lock:
            done, self._done = self._done, []
        now = self.clock()
        created: list[Node] = []
        for outcome in done:
            launch = outcome.launch
            took = max(0.0, self.wall_clock() - launch.started)
            failed = outcome.error is not None
            self.on_launched(launch.node_type, launch.count, len(outcome.nodes), took, failed)
            for node in outcome.nodes:
                self._unlisted[node.id] = (node, now + LISTING_GRACE_S)
            created += outcome.nodes
            error = outcome.error
            if error is None:
                self.launch_backoff.succeeded(launch.node_type)
                for zone in {n.zone for n in outcome.nodes}:
                    self.capacity.succeeded(launch.node_type, zone)
            elif isinstance(error, CapacityError):
                made = f" ({len(outcome.nodes)} of {launch.count} made)" if outcome.nodes else ""
                every = self.provider.zones(self.config.node_types[launch.node_type])
                # A quota is no zone's shortage: every zone of the type is out.
                zones = every if error.scope == "quota" else (error.zones or every)
                what = "over its quota" if error.scope == "quota" else "capacity failure"
                for zone in zones:
                    self.on_failure(launch.node_type, zone, str(error))
                    wait = self.capacity.failed(launch.node_type, zone, now, what)
                    self.log(
                        f"{launch.node_type}: {what} in {zone or 'its zone'}{made}; "
                        f"avoiding it for {wait:g} s",
                        Action.CAPACITY,
                        launch.node_type,
                    )
            else:
                self.log(
                    f"launch of {launch.count} x {launch.node_type} failed: {error}",
                    Action.ERROR,
                    launch.node_type,
                )
                what_next = self.launch_backoff.failed(launch.node_type, now)
                if what_next:
                    self.log(what_next, Action.BACKOFF, launch.node_type)
        return created

    def preempted(self, node: Node, *, notice: bool = False) -> None:
        """A node the provider took back (or, `notice`, said it takes back): avoid its type
        and zone for a while."""
        wait = self.capacity.failed(node.node_type, node.zone, self.clock(), "preempted")
        what = "is to be taken back" if notice else "was preempted"
        self.log(
            f"{node.node_type}: {node.id} {what} in {node.zone or 'its zone'}; "
            f"avoiding it for {wait:g} s",
            Action.CAPACITY,
            node.node_type,
        )

    # -- what the planner needs to know ------------------------------------------------
    def pending(self) -> list[PendingLaunch]:
        with self._lock:
            return sorted(self._running.values(), key=lambda p: p.id)

    def unlisted(self, listed: Iterable[Node]) -> list[Node]:
        """Nodes this executor created that the provider does not list yet (and have not
        been missing for long, which would mean they are gone)."""
        seen = {n.id for n in listed}
        now = self.clock()
        self._unlisted = {
            node_id: (node, until)
            for node_id, (node, until) in self._unlisted.items()
            if node_id not in seen and until > now
        }
        return [node for node, _ in self._unlisted.values()]

    def unavailable(self) -> dict[str, str]:
        """Types out of capacity in every zone they may use -> why."""
        zones = {name: self.provider.zones(t) for name, t in self.config.node_types.items()}
        return self.capacity.unavailable(zones, self.clock())

    def blocked(self) -> Mapping[str, float]:
        return self.launch_backoff.blocked(self.clock())

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
