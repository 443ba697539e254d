"""The autoscaler daemon on the head node: observe the provider, decide, act, repeat.

Each tick replaces workers that died or failed setup (with a backoff per type after repeated
failures), reads Ray's pending demand, and acts on the planner's decisions: launch workers
for min_workers and demand, terminate idle ones. Every decision is logged with its reason
to stdout (the head's monitor log) and the latest ones are kept in a state file for
`launcher status`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from launcher.autoscaler.autostop import autostop_cluster, open_sessions, read_autostop
from launcher.autoscaler.backoff import TypeBackoff
from launcher.autoscaler.broken import broken_workers
from launcher.autoscaler.demand import Demand
from launcher.autoscaler.evacuate import Evacuation, evacuations, used_resources
from launcher.autoscaler.executor import Executor
from launcher.autoscaler.gcs import GcsDemandReader
from launcher.autoscaler.idle import IdleTimer, busy_reasons, due
from launcher.autoscaler.listing import NodeListing
from launcher.autoscaler.observe import planner_settings, snapshot
from launcher.autoscaler.planner import Plan, plan
from launcher.autoscaler.spec import (
    AUTOSTOP_FILE,
    SESSIONS_DIR,
    STARTED_LINE,
    STATE_FILE,
    AutoscalerSpec,
)
from launcher.config.model import Autostop, ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, Message, NodeProgress
from launcher.files import write_whole
from launcher.ledger.keeping import note_listing
from launcher.paths import node_log
from launcher.pricing import load_prices
from launcher.providers.base import (
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
    head_of,
)
from launcher.providers.factory import make_provider
from launcher.providers.registry import SPECS
from launcher.updater.runner import node_runner
from launcher.updater.updater import NodeUpdater, UpdateOptions

MAX_PARALLEL_SETUPS = 32  # setups wait on SSH and the nodes, not on this machine
RESYNC_INTERVAL_S = 10.0  # file_mounts_sync_continuously: how often workers get the mounts
SETUP_FAILURES_BEFORE_BACKOFF = 3
SETUP_FAILURES_GIVE_UP = 8  # a type failing setup this often in a row is not replaced again
# A noticed worker (its Ray perhaps stopped to move its work) is left to the provider's
# reclaim, not replaced as broken, until this long after the time it was to be taken.
RECLAIM_GRACE_S = 120.0
AUTOSTOP_RETRY_S = 60.0  # after an autostop that failed (a provider error)


@dataclass(frozen=True)
class _Choice:
    """A tick's decisions on one listing, before any is carried out."""

    nodes: list[Node]  # the listing plus launched nodes not listed yet
    head: Node | None
    preempted: list[Node]
    broken: tuple[tuple[str, str], ...]
    unavailable: dict[str, str]
    result: Plan
    setups: list[tuple[Node, bool]]  # (worker, files only)
    evacuate: list[Evacuation]

    @property
    def acts(self) -> bool:
        return bool(
            self.preempted
            or self.evacuate
            or self.broken
            or self.result.terminate
            or self.result.launches()
            or self.setups
        )


def _setups(listed: list[Node], skip: set[str], resync: bool) -> list[tuple[Node, bool]]:
    """(worker, files only) to set up: listed new workers (a launched node is set up once
    listed, with its address), and the file mounts of the others when `resync` is due
    (file_mounts_sync_continuously)."""
    out = []
    for node in listed:
        if node.kind is not NodeKind.WORKER or node.id in skip:
            continue
        if node.status is NodeStatus.UNINITIALIZED:
            out.append((node, False))
        elif resync and node.status is NodeStatus.UP_TO_DATE:
            out.append((node, True))
    return out


def _noticed(node: Node) -> bool:
    """A worker the provider has given notice it takes back, not taken yet."""
    return (
        node.kind is NodeKind.WORKER
        and node.reclaim_at is not None
        and node.state is not NodeState.PREEMPTED
    )


def _awaiting_reclaim(node: Node, now: float) -> bool:
    """A noticed worker whose reclaim is due now or soon: the provider's to take, not ours."""
    return _noticed(node) and (node.reclaim_at or 0.0) + RECLAIM_GRACE_S > now


def with_notices(nodes: list[Node], notices: Iterable[tuple[str, float]]) -> list[Node]:
    """`nodes`, those that reported a reclaim notice themselves (notice_watch) with its time,
    where the provider did not list one."""
    told = dict(notices)
    return [
        dataclasses.replace(n, reclaim_at=told[n.id])
        if n.id in told and n.reclaim_at is None and n.state is not NodeState.PREEMPTED
        else n
        for n in nodes
    ]


def with_work_of(demand: Demand, leaving: list[Node]) -> Demand:
    """`demand` plus, for each of `leaving`, what Ray runs there now (its resources in use),
    as one more bundle waiting for room: the work that must move when the node goes."""
    by_ip = {n.ip: n for n in demand.nodes if n.alive}
    extra = []
    for node in leaving:
        ray = by_ip.get(node.ip or "")
        if ray is None:
            continue
        used = used_resources(ray)
        if used:
            extra.append((used, 1))
    if not extra:
        return demand
    return dataclasses.replace(demand, pending=(*demand.pending, *extra))


def _empty_state() -> dict[str, object]:
    """The state file's contents before a round has written it (a first round may fail)."""
    keys = ("pending", "placement_groups", "requested", "infeasible", "decisions")
    return {"time": time.time(), **{key: [] for key in keys}}


def log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    # One write per line: lines logged by two threads at once stay whole.
    sys.stdout.write(f"{stamp} {text}\n")
    sys.stdout.flush()


class Daemon:
    def __init__(
        self,
        provider: NodeProvider,
        config: ClusterConfig,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        config_text: str = "",
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
        self.clock = clock  # for listing ages and backoffs
        self.wall_clock = wall_clock  # for reclaim times, which providers give as epochs
        self.config_text = config_text  # the cluster's YAML, kept in its record
        self.listing = NodeListing(provider.nodes, clock=clock)
        self.executor = Executor(
            provider, config, self._decided, clock=clock, on_done=self._launch_done
        )
        self.ray_nodes: frozenset[tuple[str, bool]] = frozenset()
        self.settings = planner_settings(config, SPECS[config.provider.type], load_prices())
        self.reader: GcsDemandReader | None = None
        self.seen_before: set[str] = set()
        self.seen_now: set[str] = set()
        self.recent: list[dict[str, object]] = []
        self.preempted: set[str] = set()
        self.noticed: set[str] = set()  # given notice of a reclaim (until it is gone)
        self.evacuated: set[str] = set()  # noticed nodes whose Ray was stopped to move work
        self.reported: dict[str, float] = {}  # node id -> reclaim time, reported by the node
        # As read and listed at the last tick: what `_stale_notices` decides from.
        self.last_notices: tuple[tuple[str, float], ...] = ()
        self.last_listed_ids: set[str] = set()
        self.last_resync = 0.0
        self.idle = IdleTimer()
        self.gcs_read = False  # whether this tick's demand was read from Ray
        self.autostop: Autostop | None = config.autostop
        self.idle_s = 0.0
        self.autostop_retry_at = 0.0
        # Rounds that ended in an exception (Ray's autoscaler calls its count
        # update_loop_exceptions), and the last one: kept in the state file for `status`.
        self.loop_exceptions = 0
        self.last_loop_exception: dict[str, object] | None = None
        self.last_trace = ""  # of the last round that failed with a bug
        self.state: dict[str, object] = _empty_state()

    def run(self) -> None:
        log(f"{STARTED_LINE} {self.config.cluster_name} started")
        try:
            while not self.stopping.is_set():
                self.round()
                self.wake.wait(self.interval_s)
                self.wake.clear()
        finally:
            self.executor.shutdown()
            self.provider.settle()  # what it launched can be listed by whoever stopped it
            if self.reader is not None:
                self.reader.close()
        log("autoscaler stopped")

    def round(self) -> None:
        """One tick. Whatever goes wrong in it is logged and counted, and the daemon goes
        on to the next round: a bug met in one state of the cluster must not leave the
        cluster without its autoscaler."""
        try:
            self.tick()
        except Exception as exc:
            self.loop_exceptions += 1
            error = f"{type(exc).__name__}: {exc}"
            self.last_loop_exception = {"time": time.time(), "error": error}
            if isinstance(exc, LauncherError):
                log(f"error: {exc}")
            else:
                trace = "".join(traceback.format_exception(exc)).rstrip()
                if trace == self.last_trace:  # a bug met every round: its trace once
                    log(f"error: a round failed again ({self.loop_exceptions} so far): {error}")
                else:
                    log(f"error: a round failed ({self.loop_exceptions} so far), going on: {trace}")
                self.last_trace = trace
            try:
                self._save_state(self.state)
            except OSError as problem:
                log(f"could not write the autoscaler's state: {problem}")

    def tick(self) -> None:
        with self.lock:
            busy = {node_id for node_id, t in self.updating.items() if t.is_alive()}
            self.updating = {k: v for k, v in self.updating.items() if k in busy}
        self.executor.collect()
        self.autostop = read_autostop(AUTOSTOP_FILE, self.config.autostop)
        listed, just_read = self.listing.current()
        demand = self._demand(head_of(listed))
        ray_nodes = frozenset((n.ip, n.alive) for n in demand.nodes)
        if ray_nodes != self.ray_nodes and not just_read:
            listed, just_read = self.listing.fresh(), True  # Ray saw nodes come or go
        self.ray_nodes = ray_nodes
        resync = self._resync_due()
        choice = self._choose(listed, busy, demand, resync)
        if choice.acts and not just_read:  # never act on an earlier tick's listing
            listed, just_read = self.listing.fresh(), True
            choice = self._choose(listed, busy, demand, resync)
        if just_read:
            self._record(listed)
        self._act(choice, demand)
        self._autostop_check(demand)

    def _autostop_check(self, demand: Demand) -> None:
        """Autostop: follow how long the cluster has been idle; stop it when it is time."""
        with self.lock:
            setting_up = sum(t.is_alive() for t in self.updating.values())
        launching = sum(p.count for p in self.executor.pending()) + setting_up
        reasons = busy_reasons(
            demand if self.gcs_read else None, open_sessions(SESSIONS_DIR), launching
        )
        self.idle_s = self.idle.update(reasons, self.clock())
        if self.autostop is None or reasons or not due(self.autostop, self.idle_s):
            return
        if self.clock() < self.autostop_retry_at:
            return
        try:
            done = autostop_cluster(self.provider, self.config, self.autostop, self.idle_s, log)
        except LauncherError as exc:
            self.autostop_retry_at = self.clock() + AUTOSTOP_RETRY_S
            log(f"error: autostop failed: {exc}; trying again in {AUTOSTOP_RETRY_S:g} s")
            return
        log(done)
        self.stopping.set()  # the cluster is stopped (or gone): nothing left to scale

    def _choose(self, listed: list[Node], busy: set[str], demand: Demand, resync: bool) -> _Choice:
        """What this tick would do, given the listing: decided, not done."""
        # Notices nodes reported (kept while the node is listed: a tick without Ray's
        # state must not take them back).
        nodes = listed + self.executor.unlisted(listed)
        ids = {n.id for n in nodes}
        merged = {**self.reported, **dict(demand.notices)}
        self.last_notices, self.last_listed_ids = demand.notices, ids
        self.reported = {i: at for i, at in merged.items() if i in ids}
        nodes = with_notices(nodes, self.reported.items())
        head = head_of(nodes)
        preempted = [n for n in nodes if n.state is NodeState.PREEMPTED]
        noticed = [n for n in nodes if _noticed(n)]
        # Facts, before the plan: a type taken back (or about to be) is avoided now.
        self._note_preempted(preempted, noticed)
        now = self.wall_clock()
        evacuate = evacuations(noticed, demand.nodes, now, self.evacuated)
        waiting = [n for n in nodes if not _awaiting_reclaim(n, now)]
        broken = broken_workers(self.config, waiting, busy, demand.nodes)
        unavailable = self._unavailable()
        # A node about to be taken back is planned as gone, and what runs on it as waiting
        # for room: its replacement is launched now, not once it has gone.
        view = snapshot(
            self.config,
            nodes,
            with_work_of(demand, noticed),
            {i for i, _ in broken} | {n.id for n in noticed},
            self.executor.pending(),
            unavailable,
        )
        result = plan(view, self.settings)
        gone = {i for i, _ in broken} | {i for i, _ in result.terminate} | {n.id for n in noticed}
        setups = [] if head is None else _setups(listed, busy | gone, resync)
        return _Choice(nodes, head, preempted, broken, unavailable, result, setups, evacuate)

    def _record(self, listed: list[Node]) -> None:
        """Keep the cluster's record (what runs since when, at what price) as listed."""
        try:
            note_listing(
                self.config,
                listed,
                config_text=self.config_text,
                autostop=self.autostop,
                autostop_known=True,
            )
        except OSError as exc:
            log(f"could not update the cluster's record: {exc}")

    def _note_preempted(self, preempted: list[Node], noticed: list[Node]) -> None:
        """Tell the executor of each node the provider took back, or gave notice it takes
        back, once while it is listed (a notice and its reclaim count once)."""
        for node in noticed:
            if node.id not in self.noticed:
                when = time.strftime("%H:%M:%S", time.localtime(node.reclaim_at))
                log(
                    f"{node.id} ({node.node_type}): reclaim notice, taken back at {when}; "
                    "planned as gone from now on"
                )
                self.executor.preempted(node, notice=True)
        for node in preempted:
            if node.id not in self.preempted and node.id not in self.noticed:
                self.executor.preempted(node)
        self.preempted = {n.id for n in preempted}
        self.noticed = {n.id for n in noticed} | (self.noticed & self.preempted)
        self.evacuated &= self.noticed

    def _act(self, choice: _Choice, demand: Demand) -> None:
        for evacuation in choice.evacuate:
            self._evacuate(evacuation)
        for node_id, reason in choice.broken:
            self._decided(f"terminate {node_id}: {reason}", "terminate")
        result = choice.result
        for decision in result.decisions:
            self._decided(str(decision), decision.action)
        terminate = [node_id for node_id, _ in choice.broken] + [i for i, _ in result.terminate]
        if terminate:
            self.listing.invalidate()
            try:
                self.provider.stop_nodes(terminate)
            except LauncherError as exc:
                # A node that could not be freed (its Ray would not stop) is listed again
                # next tick; meanwhile the rest of the tick (launches) goes on.
                log(f"error: {exc}")
            else:
                if self.provider.terminating_frees_capacity:
                    gone = set(terminate)
                    self.executor.capacity.freed({n.zone for n in choice.nodes if n.id in gone})
        for type_name, count, stands_in_for in result.launches():
            self.executor.launch(type_name, count, stands_in_for)
        self._write_state(demand, result, choice.unavailable)
        if choice.head is not None:
            for node, files_only in choice.setups:
                self._start_update(node, choice.head, files_only)

    def _evacuate(self, evacuation: Evacuation) -> None:
        """Stop the Ray of a noticed worker (on a thread of its own: it may take a while over
        SSH), so Ray moves its work now rather than once the machine is gone."""
        node = evacuation.node
        self.evacuated.add(node.id)
        when = time.strftime("%H:%M:%S", time.localtime(node.reclaim_at))
        log(
            f"{node.id} ({node.node_type}): stopping its Ray ahead of the reclaim at {when} "
            f"({evacuation.reason}), so its work restarts elsewhere now"
        )

        def stop() -> None:
            runner = node_runner(
                self.provider, self.config, node, node_log(self.config.cluster_name, node.id)
            )
            try:
                problem = self.provider.stop_node_ray(node, runner)
            except LauncherError as exc:
                problem = str(exc)
            finally:
                self.listing.invalidate()
            if problem:
                log(f"{node.id}: could not stop its Ray before the reclaim: {problem}")
            else:
                log(f"{node.id}: Ray stopped; its work can restart elsewhere")

        threading.Thread(target=stop, name=f"evacuate-{node.id}", daemon=True).start()

    def _launch_done(self) -> None:
        """A launch finished (on the executor's thread): list again, and tick now."""
        self.listing.invalidate()
        self.wake.set()

    def _resync_due(self) -> bool:
        """file_mounts_sync_continuously: time to copy the head's file mounts to workers."""
        if not self.config.file_mounts_sync_continuously:
            return False
        now = self.clock()
        if now - self.last_resync < RESYNC_INTERVAL_S:
            return False
        self.last_resync = now
        return True

    def _unavailable(self) -> dict[str, str]:
        """Types the planner must not launch now -> why: out of capacity, or waiting after
        failed launches or setups."""
        now = self.clock()
        out = self.executor.unavailable()
        for backoff in (self.executor.launch_backoff, self.setup_backoff):
            for name, why in backoff.reasons(now).items():
                out.setdefault(name, why)
        return out

    def _demand(self, head: Node | None) -> Demand:
        """Ray's demand, or none while the GCS cannot be read (bounded: see gcs.py)."""
        self.gcs_read = False
        if head is None or head.status is not NodeStatus.UP_TO_DATE:
            return Demand()
        address = self.provider.ray_address(head)
        if self.reader is None or self.reader.address != address:
            if self.reader is not None:
                self.reader.close()
            self.reader = GcsDemandReader(address, log)
        demand = self.reader.read(self._stale_notices())
        self.gcs_read = demand is not None
        return demand or Demand()

    def _stale_notices(self) -> list[str]:
        """Nodes whose notices (read last tick) to delete from Ray's KV: gone from the
        listing, and past their reclaim time with its grace (so never a node that is about
        to be listed, or one listed again after a listing that missed it)."""
        now = self.wall_clock()
        listed = self.last_listed_ids
        return [
            node_id
            for node_id, at in self.last_notices
            if node_id not in listed and at + RECLAIM_GRACE_S < now
        ]

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
        self.state = {
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
            "avoided_zones": self.executor.capacity.describe(self.clock()),
            "time": time.time(),
            "pending": [{"resources": dict(r), "count": c} for r, c in demand.pending],
            "placement_groups": [
                {"strategy": g.strategy, "bundles": [dict(b) for b in g.bundles]}
                for g in demand.gangs
            ],
            "requested": [dict(c) for c in demand.constraints],
            "infeasible": [dict(r) for r in result.infeasible],
            "decisions": self.recent[-10:],
            "autostop": None
            if self.autostop is None
            else {
                "idle_minutes": self.autostop.idle_minutes,
                "down": self.autostop.down,
                "idle_s": self.idle_s,
                "busy": list(self.idle.busy),
            },
        }
        self._save_state(self.state)

    def _save_state(self, state: Mapping[str, object]) -> None:
        """`state` and the count of failed rounds, in the state file `status` reads."""
        path = Path(STATE_FILE).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        health = {
            "update_loop_exceptions": self.loop_exceptions,
            "last_loop_exception": self.last_loop_exception,
        }
        write_whole(path, json.dumps({**state, **health}))

    def _start_update(self, node: Node, head: Node, files_only: bool = False) -> None:
        with self.lock:
            running = self.updating.get(node.id)
            if len(self.updating) >= MAX_PARALLEL_SETUPS or (running and running.is_alive()):
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
        log(f"setting up {node.id} ({node.node_type}, {node.ip})")
        updater = self._updater(node, head)
        try:
            updater.run()
        except LauncherError as exc:
            log(f"{node.id}: {exc}")
            what_next = self.setup_backoff.failed(node.node_type, self.clock())
            if what_next:
                self._decided(what_next, "backoff")
            return
        finally:
            self.listing.invalidate()  # its status tag changed
        self.setup_backoff.succeeded(node.node_type)

    def _sync(self, node: Node, head: Node) -> None:
        try:
            self._updater(node, head).sync_files()
        except LauncherError as exc:
            log(f"{node.id}: syncing file mounts failed: {exc}")

    def _updater(self, node: Node, head: Node | None) -> NodeUpdater:
        # The head's copies of the file mounts are at their remote paths, under its home.
        options = UpdateOptions(cwd=Path.home())
        return NodeUpdater(self.provider, self.config, node, head, options, self._on_event)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, NodeProgress) and (event.done or event.failed):
            log(f"{event.node_id}: {event.stage}")
        elif isinstance(event, Message) and event.level == "warning":
            log(f"warning: {event.text}")  # e.g. a setup command silent for minutes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.autoscaler")
    parser.add_argument("--spec", required=True, help="the autoscaler spec written by `up`")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
    args = parser.parse_args(argv)
    spec = AutoscalerSpec.from_json(Path(args.spec).expanduser().read_text())
    config = spec.load_on_head()
    daemon = Daemon(
        make_provider(config, on_head=True), config, args.interval, config_text=spec.config_text
    )

    def stop(signum: int, frame: FrameType | None) -> None:
        daemon.stopping.set()
        daemon.wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
