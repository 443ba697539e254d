"""An idle head costs nothing (issue 31 §3): a tick whose facts are the last tick's keeps
its choice instead of planning again (launcher/autoscaler/decide/gate.py). Shown equal to
deciding every tick three ways: the key's parts, a daemon driven through a scripted
cluster's life twice (gated, and deciding every tick), and recorded decision traces of a
real cluster replayed (tests/traces/, bench/record_decision_trace.py). The whole suite also
runs every autoscaler in audit mode (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.autoscaler.daemon import RECORD_EVERY_S, Daemon
from launcher.autoscaler.decide.choice import Choice, Facts, choose
from launcher.autoscaler.decide.demand import Demand, RayNode
from launcher.autoscaler.decide.gate import TickKey, idle_step, idle_thresholds, tick_key
from launcher.autoscaler.decide.planner import Gang
from launcher.autoscaler.decide.trace import AUDIT_ENV, TRACE_ENV, decode_tick, encode_tick
from launcher.autoscaler.decide.view import PendingLaunch, planner_settings
from launcher.config.loader import parse_config
from launcher.ledger.store import record_path
from launcher.pricing import load_prices
from launcher.providers.base import TAG_REJOIN_BY, TAG_STATUS, Node, NodeKind, NodeState
from launcher.providers.registry import SPECS
from launcher.testing import MemoryProvider

TRACES = Path(__file__).parent / "traces"

CONFIG = """
cluster_name: gate
max_workers: 6
idle_timeout_minutes: 1
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  w: {node_config: {}, resources: {CPU: 2}, min_workers: 1, max_workers: 4}
  big: {node_config: {}, resources: {CPU: 8}, max_workers: 2, idle_timeout_s: 30}
head_node_type: head
"""


@functools.cache
def _settings() -> tuple[object, tuple[float, ...]]:
    config = parse_config(CONFIG, "gate.yaml")
    settings = planner_settings(config, SPECS["localhost"], load_prices())
    return settings, idle_thresholds(settings)


def _facts(listed: list[Node], demand: Demand, **changes: object) -> Facts:
    facts = Facts(listed, listed, demand, frozenset(), frozenset(), [], {}, False, 0.0)
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def _key(listed: list[Node], demand: Demand, **changes: object) -> TickKey | None:
    settings, thresholds = _settings()
    return tick_key(settings, thresholds, _facts(listed, demand, **changes))  # type: ignore[arg-type]


def _worker(node_id: str = "n1", **tags: str) -> Node:
    return Node(node_id, NodeKind.WORKER, "w", "127.0.0.9", NodeState.RUNNING, dict(tags))


def _ray(idle_s: float) -> Demand:
    return Demand(nodes=(RayNode("r1", "127.0.0.9", {"CPU": 2}, {"CPU": 2}, idle_s, True),))


def test_idle_times_count_only_as_the_timeouts_they_have_reached() -> None:
    _, thresholds = _settings()
    assert thresholds == (30.0, 60.0)  # big's own, and the cluster's minute
    assert [idle_step(s, thresholds) for s in (0, 29.9, 30, 59.9, 60, 10_000)] == [0, 0, 1, 1, 2, 2]
    node = [_worker()]
    first = _key(node, _ray(1.0))
    assert first is not None and first.same_as(_key(node, _ray(29.0)))
    assert not first.same_as(_key(node, _ray(30.0)))  # big's timeout: a decision may change
    busy = Demand(nodes=(RayNode("r1", "127.0.0.9", {"CPU": 2}, {"CPU": 1}, 1.0, True),))
    assert not first.same_as(_key(node, busy))


def test_every_fact_choose_reads_is_in_the_key() -> None:
    node = [_worker()]
    first = _key(node, Demand())
    assert first is not None
    others = [
        _key([_worker(**{TAG_STATUS: "up-to-date"})], Demand()),
        _key([_worker("n2")], Demand()),
        _key(node, Demand(pending=(({"CPU": 1.0}, 1),))),
        _key(node, Demand(gangs=(Gang(({"CPU": 1.0},)),))),
        _key(node, Demand(constraints=({"CPU": 4.0},))),
        _key(node, Demand(), busy=frozenset({"n1"})),
        _key(node, Demand(), evacuated=frozenset({"n1"})),
        _key(node, Demand(), unavailable={"w": "capacity failure in zone-a"}),
        _key(node, Demand(), pending=[PendingLaunch(1, "w", 1, None, 5.0, "r1")]),
        _key(node, Demand(), nodes=[*node, _worker("n9")]),  # launched, not listed yet
    ]
    assert all(k is not None and not first.same_as(k) for k in others)
    assert first.same_as(_key([_worker()], Demand()))  # equal values, new objects


def test_nothing_is_kept_while_the_time_itself_decides() -> None:
    noticed = Node("n1", NodeKind.WORKER, "w", "127.0.0.9", NodeState.RUNNING, reclaim_at=5.0)
    assert _key([noticed], Demand()) is None
    assert _key([_worker(**{TAG_REJOIN_BY: "1000"})], Demand()) is None
    assert _key([_worker()], Demand(), resync=True) is None
    _, thresholds = _settings()
    key = _key([_worker()], Demand())
    assert key is not None
    other_settings = planner_settings(
        parse_config(CONFIG, "x.yaml"), SPECS["localhost"], load_prices()
    )
    moved = tick_key(other_settings, thresholds, _facts([_worker()], Demand()))
    assert moved is not None and not key.same_as(moved)  # new prices: decide again


# -- a daemon through a scripted cluster's life ----------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _World:
    """What Ray would say of the memory provider's nodes, as a function of the time: new
    workers come up at once (set up elsewhere); tasks wait from t+20 to t+40, then run on
    whatever is up until t+70; a placement group of 8 CPUs from t+20 to t+90; after that
    every worker is idle, since it came up or since the work ended."""

    def __init__(self, cloud: MemoryProvider, clock: _Clock) -> None:
        self.cloud, self.clock, self.start = cloud, clock, clock.now
        self.up_since: dict[str, float] = {}

    def bring_up(self) -> None:
        for node in self.cloud.held():
            if node.id not in self.up_since:
                self.cloud.update(node.id, ip=f"127.0.9.{len(self.up_since) + 2}")
                self.cloud.update(node.id, state=NodeState.RUNNING)
                self.cloud.set_tags(node.id, {TAG_STATUS: "up-to-date"})
                self.up_since[node.id] = self.clock.now

    def demand(self, head: Node | None) -> Demand:
        t = self.clock.now - self.start
        pending = (({"CPU": 1.0}, 6),) if 20 <= t < 40 else ()
        gangs = (Gang(({"CPU": 8.0},), "PACK", "pg"),) if 20 <= t < 90 else ()
        nodes = []
        for node in self.cloud.held():
            cpus = 8.0 if node.node_type == "big" else 2.0
            working = 40 <= t < 70 or (node.node_type == "big" and t < 90)
            idle_from = max(
                self.up_since[node.id], self.start + (90 if node.node_type == "big" else 70)
            )
            idle = 0.0 if working else max(0.0, self.clock.now - idle_from)
            free = {"CPU": 0.0} if working else {"CPU": cpus}
            nodes.append(RayNode(node.id, str(node.ip), {"CPU": cpus}, free, idle, True))
        return Demand(pending=pending, gangs=gangs, nodes=tuple(nodes))


def _life(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, audit: bool
) -> tuple[list[tuple[int, str, str]], Daemon]:
    """Tick a daemon 240 times, a second apart; what it did to the provider, by tick."""
    monkeypatch.setenv("HOME", str(tmp_path))
    if audit:
        monkeypatch.setenv(AUDIT_ENV, "1")
    else:
        monkeypatch.delenv(AUDIT_ENV, raising=False)
    config = parse_config(CONFIG, "gate.yaml")
    clock = _Clock()
    cloud = MemoryProvider(config, clock=clock)
    daemon = Daemon(cloud, config, clock=clock, wall_clock=clock)
    world = _World(cloud, clock)
    monkeypatch.setattr(daemon, "_demand", world.demand)
    done: list[tuple[int, str, str]] = []
    try:
        for tick in range(240):
            before = len(cloud.calls)
            daemon.round()
            _settle(daemon)
            world.bring_up()
            done += [
                (tick, c.method, c.node_type or ",".join(c.node_ids))
                for c in cloud.calls[before:]
                if c.method in ("create_nodes", "terminate_nodes", "stop_nodes")
            ]
            clock.now += 1.0
    finally:
        daemon.executor.shutdown()
    return done, daemon


def _settle(daemon: Daemon) -> None:
    deadline = time.monotonic() + 30
    while daemon.executor.pending() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_gated_daemon_does_what_one_deciding_every_tick_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    audited, every = _life(monkeypatch, tmp_path / "every", audit=True)
    gated, kept = _life(monkeypatch, tmp_path / "gated", audit=False)
    assert every.kept.mismatches == 0 and every.loop_exceptions == 0
    assert gated == audited
    kinds = {(method, what) for _, method, what in audited}
    assert {("create_nodes", "w"), ("create_nodes", "big")} <= kinds
    terminated = [t for t, method, _ in audited if method in ("terminate_nodes", "stop_nodes")]
    assert terminated, audited  # the idle timeouts came due among kept ticks
    assert kept.kept.ticks > 150, kept.kept.ticks  # and most ticks planned nothing
    assert kept.loop_exceptions == 0


# -- recorded traces of real clusters ----------------------------------------------------
def _ticks(path: Path) -> Iterator[tuple[object, dict[str, object]]]:
    config = None
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        if "config" in raw:  # a daemon (re)started
            config = parse_config(raw["config"], path.name)
            continue
        assert config is not None
        yield config, raw


@pytest.mark.parametrize("trace", sorted(TRACES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_recorded_ticks_replayed_through_the_gate_decide_as_every_tick(trace: Path) -> None:
    settings_of: dict[int, object] = {}
    last_key: TickKey | None = None
    last: Choice | None = None
    ticks = kept_here = kept_live = 0
    for config, raw in _ticks(trace):
        settings = settings_of.setdefault(
            id(config), planner_settings(config, SPECS[config.provider.type], load_prices())
        )
        facts, kept_then = decode_tick(raw)
        kept_live += kept_then
        assert encode_tick(facts, kept_then) == raw  # the trace reads back whole
        key = tick_key(settings, idle_thresholds(settings), facts)  # type: ignore[arg-type]
        fresh = choose(config, settings, facts)  # type: ignore[arg-type]
        if key is not None and last is not None and key.same_as(last_key):
            assert fresh == last, f"tick {ticks} of {trace.name}"
            kept_here += 1
        last_key, last = (None, None) if fresh.acts else (key, fresh)
        ticks += 1
    assert ticks > 50 and kept_here > ticks // 2, (ticks, kept_here)
    assert kept_here == kept_live  # the live daemon's gate kept the same ticks


def test_the_daemon_writes_a_trace_that_replays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    _life(monkeypatch, tmp_path, audit=False)
    lines = trace.read_text().splitlines()
    assert len(lines) > 240 and "config" in json.loads(lines[0])  # acting ticks decide twice
    for line in lines[1:]:
        raw = json.loads(line)
        facts, kept = decode_tick(raw)
        assert encode_tick(facts, kept) == raw


def test_an_idle_head_writes_the_record_on_change_or_every_minute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cluster's record is rewritten when what it says changes (a node comes or goes),
    else at most every RECORD_EVERY_S: not on every listing of an idle cluster."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    config = parse_config(CONFIG, "gate.yaml")
    clock = _Clock()
    cloud = MemoryProvider(config, clock=clock)
    daemon = Daemon(cloud, config, clock=clock, wall_clock=clock)
    daemon.listing.max_age_s = 0.0  # every tick lists
    path = record_path(config.cluster_name)

    def tick(seconds: float = 1.0) -> None:
        daemon.tick()
        _settle(daemon)
        clock.now += seconds

    try:
        tick()  # min_workers: a worker launched
        tick()  # listed: the record is made
        made = path.read_text()
        for _ in range(5):
            tick()
        assert path.read_text() == made  # nothing changed: not written again
        tick(RECORD_EVERY_S)
        tick()
        assert path.read_text() != made  # a minute on: its runs' ends moved
        written = path.read_text()
        cloud.terminate_nodes([n.id for n in cloud.held()])
        tick()
        assert path.read_text() != written  # a node went: written at once
    finally:
        daemon.executor.shutdown()
