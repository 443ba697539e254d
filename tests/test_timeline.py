"""The head's timeline (launcher/autoscaler/timeline.py): its records' encoding, reading what
a torn or newer file holds, rotation, and what a daemon's ticks write to it (with the
in-memory provider: launches, a capacity failure, a reclaim and what replaced it)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from launcher.autoscaler.daemon import Daemon
from launcher.autoscaler.decide.demand import Demand
from launcher.autoscaler.decide.planner import Gang
from launcher.autoscaler.spec import TIMELINE_FILE
from launcher.autoscaler.telemetry import sample_of
from launcher.autoscaler.timeline import (
    Decision,
    Event,
    Failure,
    Reclaim,
    Sample,
    TimelineWriter,
    TypeCount,
    decode,
    encode,
    read_timeline,
    read_timeline_files,
    rotated,
)
from launcher.config.loader import parse_config
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState, NodeStatus
from launcher.testing import MemoryProvider

EVENTS: list[Event] = [
    Sample(
        1.5,
        {"worker": TypeCount(2, 1, True), "head": TypeCount(1, 0, False)},
        {"CPU": 12.0, "GPU": 1.0},
        1,
        0.42,
    ),
    Sample(2.0),
    Decision(3.0, "launch", "placement group 6eb3 (SPREAD, 16 bundles)", "worker", 2),
    Decision(4.0, "infeasible", "{GPU: 8} fits no node type"),
    Reclaim(5.0, "i-123", "spot", "notice", "ondemand"),
    Reclaim(6.0, "i-124", "spot", "gone"),
    Failure(7.0, "spot", "InsufficientInstanceCapacity: none left", "us-west-2a"),
    Failure(8.0, "spot", "quota"),
]


def test_every_kind_round_trips_through_one_json_line() -> None:
    for event in EVENTS:
        line = encode(event)
        assert "\n" not in line
        assert decode(line) == event


def test_the_wire_form_is_the_documented_one() -> None:
    sample = json.loads(encode(EVENTS[0]))
    assert sample == {
        "kind": "sample",
        "t": 1.5,
        "nodes": {
            "head": {"running": 1, "launching": 0, "spot": False},
            "worker": {"running": 2, "launching": 1, "spot": True},
        },
        "pending": {"CPU": 12.0, "GPU": 1.0},
        "infeasible": 1,
        "cost_per_hour": 0.42,
    }
    assert json.loads(encode(EVENTS[3])) == {
        "kind": "decision",
        "t": 4.0,
        "action": "infeasible",
        "node_type": None,
        "count": None,
        "reason": "{GPU: 8} fits no node type",
    }
    assert json.loads(encode(EVENTS[5]))["replaced_by"] is None
    assert json.loads(encode(EVENTS[7]))["zone"] is None


def test_reading_skips_a_torn_last_line_unknown_kinds_and_malformed_records() -> None:
    lines = [encode(e) for e in EVENTS]
    newer = json.dumps({"kind": "run", "t": 9.0, "id": "r1"})  # a kind added later
    extra = json.loads(lines[2]) | {"added_later": True}  # a field added later
    bad = json.dumps({"kind": "reclaim", "t": 1.0, "node_id": "x", "node_type": "y", "how": "?"})
    torn = encode(EVENTS[4])[:17]
    text = [*lines, newer, json.dumps(extra), "", bad, "[1, 2]", torn]
    assert read_timeline(text) == [*EVENTS, EVENTS[2]]


def test_appends_rotate_past_the_bound_keeping_one_old_file(tmp_path: Path) -> None:
    path = tmp_path / "head" / "timeline.jsonl"
    writer = TimelineWriter(path, print, rotate_bytes=400)
    decisions = [Decision(float(i), "launch", f"reason {i}", "w", 1) for i in range(30)]
    for decision in decisions:
        assert writer.append(decision)
    assert rotated(path).name == "timeline.1.jsonl"
    assert path.stat().st_size <= 400 and rotated(path).stat().st_size <= 400
    assert sorted(p.name for p in path.parent.iterdir()) == ["timeline.1.jsonl", "timeline.jsonl"]
    kept = read_timeline_files(path)
    assert kept == decisions[-len(kept) :] and len(kept) > len(read_timeline(path.open()))
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_sample_is_written_when_it_changed_or_a_minute_passed(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path / "t.jsonl", print)
    one = {"w": TypeCount(1, 0, False)}
    assert writer.sample(Sample(0.0, one))
    assert not writer.sample(Sample(30.0, one))  # the same, 30 s later
    assert writer.sample(Sample(31.0, {"w": TypeCount(1, 1, False)}))  # changed
    assert not writer.sample(Sample(90.0, {"w": TypeCount(1, 1, False)}))
    assert writer.sample(Sample(91.0, {"w": TypeCount(1, 1, False)}))  # 60 s since the last
    assert [e.t for e in read_timeline_files(tmp_path / "t.jsonl")] == [0.0, 31.0, 91.0]


def test_a_write_that_fails_is_logged_once_and_never_raises(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    logged: list[str] = []
    writer = TimelineWriter(tmp_path / "file" / "t.jsonl", logged.append)  # not a directory
    assert not writer.append(EVENTS[2]) and not writer.append(EVENTS[3])
    assert len(logged) == 1 and "could not write the timeline" in logged[0]


# -- what the daemon writes ----------------------------------------------------------------
CONFIG = """\
cluster_name: tl
max_workers: 10
provider: {type: localhost}
metadata: {launcher: {fallbacks: {spot: [ondemand]}}}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  spot: {node_config: {simulated_spot: true}, resources: {CPU: 4}, min_workers: 2}
  ondemand: {node_config: {}, resources: {CPU: 4}}
head_node_type: head
"""


def _tick(daemon: Daemon) -> None:
    """One tick, then until its launches are collected (the executor wakes the daemon)."""
    daemon.tick()
    daemon.wake.clear()
    while daemon.executor.pending():
        assert daemon.wake.wait(30)
        daemon.wake.clear()
    daemon.executor.collect()


def test_the_daemon_records_decisions_failures_reclaims_and_samples(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(CONFIG, "tl.yaml")
    cloud = MemoryProvider(config, {("spot", "zone-a"): 2, ("ondemand", "zone-a"): 5})
    cloud.default_zones = ("zone-a", "zone-b")
    daemon = Daemon(cloud, config, wall_clock=lambda: 1000.0)
    daemon.listing.max_age_s = 0.0  # every tick lists: the test sees each change at once
    _tick(daemon)  # min_workers: 2 x spot, both in zone-a
    spots = [n for n in cloud.held() if n.node_type == "spot"]
    assert len(spots) == 2
    cloud.update(spots[0].id, state=NodeState.PREEMPTED)  # taken back, no notice
    cloud.capacity["spot", "zone-a"] = 0
    _tick(daemon)  # the reclaim noted; spot is tried again in zone-b, which has none
    cloud.terminate_nodes([spots[1].id])  # taken away behind the autoscaler's back
    for _ in range(4):
        _tick(daemon)
    events = read_timeline_files(Path(TIMELINE_FILE).expanduser())
    launches = [e for e in events if isinstance(e, Decision) and e.action == "launch"]
    assert launches[0].node_type == "spot" and launches[0].count == 2
    assert "min_workers" in launches[0].reason
    reclaims = [e for e in events if isinstance(e, Reclaim)]
    assert [(r.node_id, r.how) for r in reclaims] == [
        (spots[0].id, "preempted"),
        (spots[1].id, "gone"),
    ]
    failures = [e for e in events if isinstance(e, Failure)]
    assert failures and {(f.node_type, f.zone) for f in failures} <= {
        ("spot", "zone-a"),
        ("spot", "zone-b"),
    }
    fallbacks = [e for e in events if isinstance(e, Decision) and e.action == "fallback"]
    assert fallbacks, [e for e in events if isinstance(e, Decision)]
    # The executor's decisions (capacity failures and reclaims) name their type too.
    capacity = [e for e in events if isinstance(e, Decision) and e.action == "capacity"]
    assert capacity and {e.node_type for e in capacity} == {"spot"}, capacity
    samples = [e for e in events if isinstance(e, Sample)]
    assert samples[0].nodes["spot"] == TypeCount(0, 2, True)  # launching: not set up
    last = samples[-1]
    assert last.nodes["ondemand"].launching == 2 and "spot" not in last.nodes
    assert all(s.t == 1000.0 for s in samples)
    assert all(not a.same_as(b) for a, b in itertools.pairwise(samples))


def _node(node_id: str, node_type: str, state: NodeState, status: NodeStatus) -> Node:
    kind = NodeKind.HEAD if node_type == "head" else NodeKind.WORKER
    return Node(node_id, kind, node_type, "127.0.0.9", state, {TAG_STATUS: status.value})


def test_a_sample_counts_nodes_by_type_launches_demand_and_cost() -> None:
    running, setting_up = NodeStatus.UP_TO_DATE, NodeStatus.SETTING_UP
    head = _node("h", "head", NodeState.RUNNING, running)
    up = _node("s1", "spot", NodeState.RUNNING, running)
    nodes = [
        head,
        up,
        _node("s2", "spot", NodeState.RUNNING, setting_up),
        _node("s3", "spot", NodeState.PREEMPTED, running),
        _node("s4", "spot", NodeState.DEAD, running),
        _node("s5", "spot", NodeState.RUNNING, NodeStatus.FAILED),
    ]
    demand = Demand(
        pending=(({"CPU": 2.0}, 3),), gangs=(Gang(({"CPU": 1.0}, {"CPU": 1.0, "GPU": 1.0})),)
    )
    prices = {"head": 0.1, "spot": 0.05, "ondemand": 0.2}
    spot = {"spot": True}
    sample = sample_of(9.0, nodes, [("ondemand", 2)], demand, 1, prices, spot)
    assert sample == Sample(
        9.0,
        {
            "head": TypeCount(1, 0, False),
            "spot": TypeCount(1, 1, True),
            "ondemand": TypeCount(0, 2, False),
        },
        {"CPU": 8.0, "GPU": 1.0},
        1,
        0.6,
    )
    unknown = sample_of(9.0, [head, up], [], Demand(), 0, {"head": 0.1}, spot)
    assert unknown.cost_per_hour is None
