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
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from launcher.autoscaler.act.autostop import autostop_cluster
from launcher.autoscaler.act.evacuate import evacuate
from launcher.autoscaler.act.executor import Executor
from launcher.autoscaler.act.setup import Setups
from launcher.autoscaler.clock import Clock
from launcher.autoscaler.decide.actions import RECORDED, Action
from launcher.autoscaler.decide.backoff import TypeBackoff
from launcher.autoscaler.decide.choice import (
    RECLAIM_GRACE_S,
    Choice,
    Facts,
    choose,
    kept_notices,
    with_notices,
)
from launcher.autoscaler.decide.demand import Demand
from launcher.autoscaler.decide.evacuate import Evacuation
from launcher.autoscaler.decide.gate import TickKey, idle_thresholds, tick_key
from launcher.autoscaler.decide.idle import IdleTimer, busy_reasons, due
from launcher.autoscaler.decide.node_states import NodeLife, NodeStates, Transition, follow
from launcher.autoscaler.decide.plan_types import Decision
from launcher.autoscaler.decide.planner import Plan
from launcher.autoscaler.decide.trace import AUDIT_ENV, TRACE_ENV, encode_tick, header
from launcher.autoscaler.decide.view import planner_settings, price_changes
from launcher.autoscaler.endpoint import MetricsEndpoint
from launcher.autoscaler.metrics import LOOP_EXCEPTIONS, AutoscalerMetrics, ClusterGauges
from launcher.autoscaler.observe.gcs import GcsDemandReader, read_timeout_s, split_address
from launcher.autoscaler.observe.head_files import open_sessions, read_autostop
from launcher.autoscaler.observe.listing import NodeListing
from launcher.autoscaler.spec import (
    AUTOSTOP_FILE,
    SESSIONS_DIR,
    STARTED_LINE,
    STATE_FILE,
    TIMELINE_FILE,
    AutoscalerSpec,
)
from launcher.autoscaler.telemetry import Telemetry, gauges_of, sample_of
from launcher.autoscaler.timeline import Sample, TimelineWriter
from launcher.config.model import Autostop, ClusterConfig
from launcher.errors import LauncherError
from launcher.events import Event, Message, NodeProgress
from launcher.files import write_whole
from launcher.ledger.keeping import note_listing
from launcher.pricing import PriceTable
from launcher.pricing.handoff import HeadPrices, PriceHandoff
from launcher.providers.base import Node, NodeProvider, NodeStatus, head_of
from launcher.providers.factory import make_provider
from launcher.providers.registry import SPECS

MAX_PARALLEL_SETUPS = 32  # setups wait on SSH and the nodes, not on this machine
RESYNC_INTERVAL_S = 10.0  # file_mounts_sync_continuously: how often workers get the mounts
SETUP_FAILURES_BEFORE_BACKOFF = 3
SETUP_FAILURES_GIVE_UP = 8  # a type failing setup this often in a row is not replaced again
AUTOSTOP_RETRY_S = 60.0  # after an autostop that failed (a provider error)


def _empty_state(now: float) -> dict[str, object]:
    """The state file's contents before a round has written it (a first round may fail);
    `now` is wall-clock time."""
    keys = ("pending", "placement_groups", "requested", "infeasible", "decisions")
    return {"time": now, **{key: [] for key in keys}}


# How often the cluster's record is written when nothing in it changed (its runs' ends).
RECORD_EVERY_S = 60.0
# How often the state file is written when only its time changed.
STATE_EVERY_S = 5.0


def record_key(
    listed: list[Node], settings: object, autostop: Autostop | None
) -> tuple[object, ...]:
    """What the cluster's record says of `listed` (note_listing), but the time: the nodes
    that exist, the prices (a new `settings` object when they change) and autostop."""
    nodes = tuple((n.id, n.kind, n.node_type, n.created_at, n.state) for n in listed)
    return (nodes, settings, autostop)


@dataclass
class KeptChoice:
    """The last tick's choice when it did not act, and the key of its facts: a tick with
    the same key keeps it (decide/gate.py). `audit`: decide anyway, and count mismatches
    (LAUNCHER_DECISION_AUDIT=1, or a file to append them to)."""

    audit: bool = False
    file: str = ""  # where the audit appends mismatches (LAUNCHER_DECISION_AUDIT=PATH)
    key: TickKey | None = None
    choice: Choice | None = None
    ticks: int = 0  # ticks that kept it (in audit mode: would have)
    mismatches: int = 0


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
        prices: PriceHandoff | None = None,
    ) -> None:
        self.provider = provider
        self.config = config
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.setup_backoff = TypeBackoff(
            "setups failed",
            after=SETUP_FAILURES_BEFORE_BACKOFF,
            base_s=10.0,
            give_up_after=SETUP_FAILURES_GIVE_UP,
        )
        self.wake = threading.Event()  # a launch finished: tick now, to set its nodes up
        # The one clock every part is given: `clock` for listing ages, backoffs and idle
        # times; `wall_clock` for reclaim times (providers give epochs) and the state file.
        self.clock = clock
        self.wall_clock = wall_clock
        self.time = Clock(now=clock, wall=wall_clock)
        self.config_text = config_text  # the cluster's YAML, kept in its record
        self.listing = NodeListing(provider.nodes, clock=clock)
        self.declared = {
            name: {k: float(v) for k, v in t.resources.items()}
            for name, t in config.node_types.items()
        }
        self.metrics = AutoscalerMetrics(
            config.node_types, (r for d in self.declared.values() for r in d)
        )
        self.endpoint = (
            MetricsEndpoint(self.metrics.registry, config.metrics_port, log, clock)
            if config.metrics_port
            else None
        )
        self.planner_s = 0.0  # the planner's time in this tick
        self.telemetry = Telemetry(
            TimelineWriter(Path(TIMELINE_FILE).expanduser(), log),
            self.metrics,
            wall_clock,
            clock,
            config.fallbacks,
        )
        self.executor = Executor(
            provider,
            config,
            lambda text, action, node_type: self._decided(
                text, action, Decision(action, text, node_type)
            ),
            clock=clock,
            wall_clock=wall_clock,
            on_done=self._launch_done,
            on_failure=self.telemetry.failure,
            on_launched=self.telemetry.launched,
        )
        self.setups = Setups(
            provider,
            config,
            self.setup_backoff,
            clock,
            log,
            self._decided,
            self._on_event,
            self.listing.invalidate,
            MAX_PARALLEL_SETUPS,
            on_finished=self.telemetry.setup_finished,
        )
        self.ray_nodes: frozenset[tuple[str, bool]] = frozenset()
        spec = SPECS[config.provider.type]
        # The prices `up` handed over, then kept current on the head (see HeadPrices).
        self.prices = HeadPrices(config, spec, prices or PriceHandoff(), clock)
        self.settings = planner_settings(config, spec, self.prices.table())
        self.spot = {
            name: spec.node_offer(config, node_type, self.prices.table()).spot
            for name, node_type in config.node_types.items()
        }
        self.prices_note = ""
        self.reader: GcsDemandReader | None = None
        self.seen_before: set[str] = set()
        self.seen_now: set[str] = set()
        self.recent: list[dict[str, object]] = []
        self.node_states = NodeStates()  # noticed, evacuated, preempted workers
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
        self.state: dict[str, object] = _empty_state(wall_clock())
        audit = os.environ.get(AUDIT_ENV, "")
        self.kept = KeptChoice(audit=bool(audit), file="" if audit == "1" else audit)
        self.trace_path = os.environ.get(TRACE_ENV) or ""
        self.trace_started = False
        self.recorded: tuple[tuple[object, ...], float] | None = None  # record_key, when
        self.saved: tuple[dict[str, object], float] | None = None  # see _save_state
        self.followed: tuple[tuple[Node, ...], int] | None = None  # see _note
        self.last_sample: tuple[Choice, object, Sample, ClusterGauges] | None = None

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
            if self.endpoint is not None:
                self.endpoint.close()
        log("autoscaler stopped")

    def _reprice(self, table: PriceTable) -> None:
        """Plan with `table` from now on; log each node type whose price it changed."""
        settings = planner_settings(self.config, SPECS[self.config.provider.type], table)
        for line in price_changes(self.settings, settings):
            log(f"price of {line}")
        note = table.live_notes.get(self.config.provider.type)
        if note and note != self.prices_note:
            log(f"prices: {note}")
        self.prices_note = note or ""
        self.settings = settings

    def round(self) -> None:
        """One tick. Whatever goes wrong in it is logged and counted, and the daemon goes
        on to the next round: a bug met in one state of the cluster must not leave the
        cluster without its autoscaler."""
        started, self.planner_s = time.perf_counter(), 0.0
        try:
            self.tick()
        except Exception as exc:
            self.loop_exceptions += 1
            self.metrics.count(LOOP_EXCEPTIONS)
            error = f"{type(exc).__name__}: {exc}"
            self.last_loop_exception = {"time": self.wall_clock(), "error": error}
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
        finally:
            self.metrics.observe(self.metrics.update_time, time.perf_counter() - started)
            self.metrics.observe(self.metrics.planner_time, self.planner_s)

    def tick(self) -> None:
        fresh = self.prices.poll()
        if fresh is not None:
            self._reprice(fresh)
        busy = self.setups.busy()
        self.executor.collect()
        self.autostop = read_autostop(AUTOSTOP_FILE, self.config.autostop)
        listed, just_read = self.listing.current()
        demand = self._demand(head_of(listed))
        ray_nodes = frozenset((n.ip, n.alive) for n in demand.nodes)
        if ray_nodes != self.ray_nodes and not just_read:
            listed, just_read = self.listing.fresh(), True  # Ray saw nodes come or go
        self.ray_nodes = ray_nodes
        resync = self._resync_due()
        choice = self._decide(listed, busy, demand, resync)
        # Never act on an earlier tick's listing: a choice that acts on one is dropped (it
        # changed nothing) and made again on a fresh listing, the one this tick acts on.
        if choice.acts and not just_read:
            listed, just_read = self.listing.fresh(), True
            choice = self._decide(listed, busy, demand, resync)
        if just_read:
            self._record(listed)
            self.telemetry.listed(listed)
        self._act(choice, demand)
        self._autostop_check(demand)

    def _autostop_check(self, demand: Demand) -> None:
        """Autostop: follow how long the cluster has been idle; stop it when it is time."""
        launching = sum(p.count for p in self.executor.pending()) + self.setups.running()
        reasons = busy_reasons(
            demand if self.gcs_read else None, open_sessions(SESSIONS_DIR), launching
        )
        self.idle_s = self.idle.update(reasons, self.clock())
        if self.autostop is None or reasons or not due(self.autostop, self.idle_s):
            return
        if self.clock() < self.autostop_retry_at:
            return
        try:
            done = autostop_cluster(
                self.provider, self.config, self.autostop, self.idle_s, log, clock=self.time
            )
        except LauncherError as exc:
            self.autostop_retry_at = self.clock() + AUTOSTOP_RETRY_S
            log(f"error: autostop failed: {exc}; trying again in {AUTOSTOP_RETRY_S:g} s")
            return
        log(done)
        self.stopping.set()  # the cluster is stopped (or gone): nothing left to scale

    def _decide(self, listed: list[Node], busy: set[str], demand: Demand, resync: bool) -> Choice:
        """Note what `listed` tells (notices, reclaims), then decide on it (decide/choice),
        or keep the last tick's choice when its facts were the same (decide/gate)."""
        nodes = self._note(listed, demand)  # before the facts below, which it changes
        facts = Facts(
            listed,
            nodes,
            demand,
            busy,
            self.node_states.in_state(NodeLife.EVACUATED),
            self.executor.pending(),
            self._unavailable(),
            resync,
            self.wall_clock(),
        )
        key = tick_key(self.settings, idle_thresholds(self.settings), facts, self.kept.key)
        kept = self.kept.choice if key is not None and key.same_as(self.kept.key) else None
        self._trace(facts, kept is not None)
        if kept is not None:
            self.kept.ticks += 1  # kept, or in audit mode would have been
        if kept is not None and not self.kept.audit:
            self.kept.key = key  # the same, with this listing's nodes: compared by identity
            return kept
        started = time.perf_counter()
        try:
            choice = choose(self.config, self.settings, facts)
        finally:
            self.planner_s += time.perf_counter() - started
        if kept is not None and choice != kept:
            self._mismatch(kept, choice)
        self.kept.key, self.kept.choice = (None, None) if choice.acts else (key, choice)
        return choice

    def _mismatch(self, kept: Choice, choice: Choice) -> None:
        """Audit: the kept choice is not what deciding again gives (a bug in decide/gate)."""
        self.kept.mismatches += 1
        log(f"error: audit: the kept choice differs from deciding again: {choice} != {kept}")
        if self.kept.file:
            line = {"cluster": self.config.cluster_name, "kept": str(kept), "fresh": str(choice)}
            try:
                with open(self.kept.file, "a") as out:
                    out.write(json.dumps(line) + "\n")
            except OSError as exc:
                log(f"could not write the audit's mismatch to {self.kept.file}: {exc}")

    def _trace(self, facts: Facts, kept: bool) -> None:
        """The tick's facts, in the decision trace when one is asked for (decide/trace)."""
        if not self.trace_path:
            return
        try:
            with open(self.trace_path, "a") as out:
                if not self.trace_started:
                    out.write(json.dumps(header(self.config_text)) + "\n")
                    self.trace_started = True
                out.write(json.dumps(encode_tick(facts, kept)) + "\n")
        except OSError as exc:
            log(f"could not write the decision trace: {exc}; tracing stops")
            self.trace_path = ""

    def _note(self, listed: list[Node], demand: Demand) -> list[Node]:
        """The nodes to decide on (`listed`, launched nodes not listed yet, with the notices
        nodes reported), once the moves they call for in `node_states` are made. Facts,
        before the plan: a type taken back (or about to be) is avoided from now on."""
        nodes = listed + self.executor.unlisted(listed)
        ids = {n.id for n in nodes}
        self.last_notices, self.last_listed_ids = demand.notices, ids
        self.reported = kept_notices(self.reported, demand.notices, ids)
        nodes = with_notices(nodes, self.reported.items())
        # `follow` is pure: the same nodes and table as when it last found nothing to move
        # find nothing again (an idle tick's 1,000 nodes, not looked at one by one).
        seen = (tuple(nodes), self.node_states.moves)
        moves = [] if seen == self.followed else follow(self.node_states, nodes)
        self.followed = seen if not moves else None
        for transition in moves:
            self.node_states.apply(transition)
        # Notices first, then reclaims without one, as they were always told.
        for transition in sorted(moves, key=lambda t: t.tells is not True):
            self._told(transition)
        return nodes

    def _told(self, transition: Transition) -> None:
        """Tell the executor of a node the provider took back, or gave notice it takes
        back, once (a notice and its reclaim count once)."""
        node, notice = transition.node, transition.tells
        if node is None or notice is None:
            return
        self.telemetry.reclaim(node, "notice" if notice else "preempted")
        if notice:
            when = time.strftime("%H:%M:%S", time.localtime(node.reclaim_at))
            log(
                f"{node.id} ({node.node_type}): reclaim notice, taken back at {when}; "
                "planned as gone from now on"
            )
        self.executor.preempted(node, notice=notice)

    def _record(self, listed: list[Node]) -> None:
        """Keep the cluster's record (what runs since when, at what price) as listed: when
        what it would say changed, else every RECORD_EVERY_S (a run's end is kept to within
        that; the ledger counts an end as exact within EXACT_GAP_S, 300 s)."""
        key, now = record_key(listed, self.settings, self.autostop), self.clock()
        last = self.recorded
        if last is not None and last[0] == key and now - last[1] < RECORD_EVERY_S:
            return
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
            return
        self.recorded = (key, now)

    def _act(self, choice: Choice, demand: Demand) -> None:
        for evacuation in choice.evacuate:
            self._evacuate(evacuation)
        for decision in choice.decisions:
            self._decided(str(decision), decision.action, decision)
        self.telemetry.planned(choice.decisions)
        result = choice.result
        terminate = choice.terminate
        if terminate:
            self.telemetry.terminating(terminate)
            self.listing.invalidate()
            try:
                self.provider.stop_nodes(terminate)
            except LauncherError as exc:
                # A node that could not be freed (its Ray would not stop) is listed again
                # next tick; meanwhile the rest of the tick (launches) goes on.
                log(f"error: {exc}")
            else:
                self.telemetry.stopped(len(terminate))
                if self.provider.traits.terminating_frees_capacity:
                    gone = set(terminate)
                    self.executor.capacity.freed({n.zone for n in choice.nodes if n.id in gone})
        # Launches under way, with this tick's (one may end before the tick does; the next
        # collects it).
        launching = [(p.node_type, p.count) for p in self.executor.pending()]
        for type_name, count, stands_in_for in result.launches():
            self.executor.launch(type_name, count, stands_in_for)
            launching.append((type_name, count))
        self._write_state(demand, result, choice.unavailable)
        self._telemetry_of_tick(choice, demand, launching)
        if choice.head is not None:
            for node, files_only in choice.setups:
                self.setups.start(node, choice.head, files_only)

    def _telemetry_of_tick(
        self, choice: Choice, demand: Demand, launching: list[tuple[str, int]]
    ) -> None:
        """The tick's reclaims and sample, in the timeline. A kept choice (the same facts,
        decide/gate.py) with the same launches and setups under way has the last tick's
        sample and gauges: only the sample's time is new."""
        now, updating = self.wall_clock(), self.setups.running()
        last = self.last_sample
        if last is not None and last[0] is choice and last[1] == (launching, updating):
            sample, gauges = dataclasses.replace(last[2], t=now), last[3]
        else:
            prices = {name: info.price for name, info in self.settings.types.items()}
            infeasible = len(choice.result.infeasible)
            sample = sample_of(now, choice.nodes, launching, demand, infeasible, prices, self.spot)
            gauges = gauges_of(sample, choice.nodes, demand, self.declared, updating)
        self.last_sample = (choice, (launching, updating), sample, gauges)
        self.telemetry.acted(choice.result.launches(), sample, gauges)

    def _evacuate(self, evacuation: Evacuation) -> None:
        """Stop the Ray of a noticed worker (act/evacuate), once."""
        self.node_states.move(evacuation.node.id, NodeLife.EVACUATED)
        evacuate(self.provider, self.config, evacuation, log, self.listing.invalidate)

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
        """Ray's demand, or none while the GCS cannot be read (bounded: see observe/gcs.py)."""
        self.gcs_read = False
        if head is None or head.status is not NodeStatus.UP_TO_DATE:
            return Demand()
        address = self.provider.access.ray_address(head)
        if self.reader is None or self.reader.address != address:
            if self.reader is not None:
                self.reader.close()
            self.reader = GcsDemandReader(address, log, read_timeout_s())
        if self.endpoint is not None:  # at the head's address as Ray knows it
            self.reader.metrics_address = self.endpoint.serve_on(split_address(address)[0])
        demand = self.reader.read(self._stale_notices())
        self.gcs_read = demand is not None
        if demand is not None and demand.session:
            self.metrics.set_session(demand.session)
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

    def _decided(self, text: str, action: Action, decision: Decision | None = None) -> None:
        """Log a decision when it differs from the last tick's, so the log stays readable;
        the kinds `status` shows are kept in the state file and the timeline."""
        self.seen_now.add(text)
        if text in self.seen_before:
            return
        log(text)
        recorded = action in RECORDED
        if recorded:
            now = self.wall_clock()
            self.recent.append({"time": now, "action": action.value, "text": text})
            self.recent = self.recent[-50:]
        if decision is None:
            self.telemetry.decision(action.value, text, recorded=recorded)
        else:
            why, count = decision.reason, decision.count
            self.telemetry.decision(action.value, why, decision.node_type, count, recorded=recorded)

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
            "time": self.wall_clock(),
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
        """`state` and the count of failed rounds, in the state file `status` reads: when
        something in it changed, else every STATE_EVERY_S (its time and count of kept
        choices move every tick)."""
        health = {
            "decisions_kept": self.kept.ticks,
            "audit_mismatches": self.kept.mismatches,
            "update_loop_exceptions": self.loop_exceptions,
            "last_loop_exception": self.last_loop_exception,
        }
        content = {**state, **health}
        said = {k: v for k, v in content.items() if k not in ("time", "decisions_kept")}
        now, last = self.clock(), self.saved
        if last is not None and last[0] == said and now - last[1] < STATE_EVERY_S:
            return
        path = Path(STATE_FILE).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(content))
        self.saved = (said, now)

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
        make_provider(config, on_head=True),
        config,
        args.interval,
        config_text=spec.config_text,
        prices=spec.prices,
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
