"""Spot fallback: the config key, the memory of capacity failures, the planner's choice of
fallbacks and stand-ins, the executor's batches and retries, and the simulator."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from launcher.autoscaler.act.executor import Executor
from launcher.autoscaler.daemon import Daemon
from launcher.autoscaler.decide.backoff import CapacityMemory, TypeBackoff
from launcher.autoscaler.decide.choice import with_work_of
from launcher.autoscaler.decide.demand import Demand, RayNode
from launcher.autoscaler.decide.planner import NodeView, Settings, Snapshot, TypeInfo, plan
from launcher.autoscaler.observe.listing import LISTING_MAX_AGE_S
from launcher.autoscaler.spec import STATE_FILE
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ConfigError, ProviderError
from launcher.providers.access import NoAccess
from launcher.providers.base import (
    TAG_STANDS_IN_FOR,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeState,
    NodeStatus,
)
from launcher.runners.base import CommandRunner
from launcher.testing import MemoryProvider
from tests.conftest import CliResult

SPOT = TypeInfo("spot", {"CPU": 4}, 0, 10, price=0.05, fallbacks=("ondemand",))
ONDEMAND = TypeInfo("ondemand", {"CPU": 4}, 0, 10, price=0.2)
BIG = TypeInfo("big", {"CPU": 16}, 0, 10, price=0.7)
HEAD = NodeView("head", "head", is_head=True, total={"CPU": 1}, available={"CPU": 0})


def settings(*types: TypeInfo) -> Settings:
    chosen = types or (SPOT, ONDEMAND, BIG)
    return Settings({t.name: t for t in chosen}, max_workers=20, upscaling_speed=100.0)


# -- the planner ---------------------------------------------------------------------------
def test_unavailable_type_falls_back_in_the_listed_order() -> None:
    demand = (({"CPU": 4}, 3),)
    normal = plan(Snapshot((HEAD,), pending=demand), settings())
    assert normal.launch == {"spot": 3}
    out = plan(
        Snapshot((HEAD,), pending=demand, unavailable={"spot": "capacity failure in zone-a"}),
        settings(),
    )
    assert out.launch == {"ondemand": 3}
    texts = [str(d) for d in out.decisions]
    assert "fallback: spot: capacity failure in zone-a, falling back to ondemand" in texts


def test_unavailable_type_without_fallbacks_uses_the_next_type_by_cost() -> None:
    spot = TypeInfo("spot", {"CPU": 4}, 0, 10, price=0.05)
    out = plan(
        Snapshot((HEAD,), pending=(({"CPU": 4}, 2),), unavailable={"spot": "preempted"}),
        settings(spot, ONDEMAND, BIG),
    )
    assert out.launch == {"ondemand": 2}
    assert not any(d.action == "fallback" for d in out.decisions)


def test_full_fallback_moves_on_to_other_types_and_nothing_waits_on_the_unavailable() -> None:
    small_fallback = TypeInfo("ondemand", {"CPU": 4}, 0, 1, price=0.2)
    out = plan(
        Snapshot((HEAD,), pending=(({"CPU": 4}, 3),), unavailable={"spot": "capacity failure"}),
        settings(SPOT, small_fallback, BIG),
    )
    assert out.launch.get("spot", 0) == 0
    assert out.launch["ondemand"] == 1 and out.launch["big"] == 1


def test_min_workers_of_an_unavailable_type_get_stand_ins_that_return_when_it_is_back() -> None:
    spot = TypeInfo("spot", {"CPU": 4}, 2, 10, price=0.05, fallbacks=("ondemand",))
    types = settings(spot, ONDEMAND)
    out = plan(Snapshot((HEAD,), unavailable={"spot": "preempted in zone-a"}), types)
    assert out.launch == {"ondemand": 2}
    assert out.stand_ins == {("ondemand", "spot"): 2}
    assert out.launches() == [("ondemand", 2, "spot")]
    # Two stand-ins exist: nothing more is launched while spot is out.
    stand_ins = tuple(
        NodeView(
            f"o{i}",
            "ondemand",
            total={"CPU": 4},
            available={"CPU": 4},
            idle_s=900,
            stands_in_for="spot",
        )
        for i in range(2)
    )
    still_out = plan(Snapshot((HEAD, *stand_ins), unavailable={"spot": "preempted"}), types)
    assert still_out.launch == {} and still_out.terminate == ()
    # Spot is back: the idle stand-ins leave, and spot's min_workers bring spot nodes back.
    back = plan(Snapshot((HEAD, *stand_ins)), types)
    assert [node_id for node_id, _ in back.terminate] == ["o0", "o1"]
    assert "stands in for spot, which has capacity again" in back.terminate[0][1]
    after = plan(Snapshot((HEAD,)), types)
    assert after.launch == {"spot": 2}


def test_min_workers_without_fallback_wait_for_capacity() -> None:
    spot = TypeInfo("spot", {"CPU": 4}, 1, 10, price=0.05)
    out = plan(Snapshot((HEAD,), unavailable={"spot": "capacity failure"}), settings(spot))
    assert out.launch == {}
    assert any("wait for capacity" in str(d) for d in out.decisions)


# -- the memory of failures ------------------------------------------------------------------
def test_capacity_memory_avoids_zones_doubling_and_forgets_on_success() -> None:
    memory = CapacityMemory(base_s=100, max_s=250)
    assert memory.failed("spot", "a", 0, "capacity failure") == 100
    assert memory.avoided_zones("spot", 50) == {"a"}
    assert memory.unavailable({"spot": ("a", "b")}, 50) == {}  # zone b is still open
    memory.failed("spot", "b", 50, "capacity failure")
    assert memory.unavailable({"spot": ("a", "b")}, 60) == {"spot": "capacity failure in a, b"}
    assert memory.unavailable({"spot": ("a", "b")}, 120) == {}  # a's 100 s are over
    assert memory.failed("spot", "a", 200, "again") == 200  # doubled
    assert memory.failed("spot", "a", 200, "again") == 250  # capped
    memory.succeeded("spot", "a")
    assert memory.failed("spot", "a", 300, "after success") == 100


def test_type_backoff_waits_after_repeated_failures_then_gives_up() -> None:
    backoff = TypeBackoff("setups failed", after=2, base_s=10, give_up_after=4)
    assert backoff.failed("w", 0) is None and backoff.blocked(0) == {}
    assert "waiting 10 s" in (backoff.failed("w", 0) or "")
    assert backoff.blocked(5) == {"w": 10} and backoff.blocked(11) == {}
    assert "waiting 20 s" in (backoff.failed("w", 11) or "")
    assert "not launching it again" in (backoff.failed("w", 40) or "")
    assert backoff.blocked(10**9) == {"w": float("inf")}
    backoff.succeeded("w")
    assert backoff.blocked(10**9) == {}


# -- the executor -----------------------------------------------------------------------
ZONES = ("zone-a", "zone-b")


class _Gated(MemoryProvider):
    """Launches wait while `gate` is clear (to see them pending)."""

    def __init__(self, config: ClusterConfig, capacity: Mapping[tuple[str, str], int]) -> None:
        super().__init__(config, capacity, default_zones=ZONES)
        self.gate = threading.Event()
        self.gate.set()

    def create_nodes(
        self,
        node_type: NodeType,
        kind: NodeKind,
        count: int,
        tags: Mapping[str, str],
        avoid_zones: Collection[str] = (),
        request_id: str | None = None,
    ) -> list[Node]:
        self.gate.wait(10)
        return super().create_nodes(node_type, kind, count, tags, avoid_zones, request_id)


def _launches(cloud: MemoryProvider) -> list[tuple[str, int, frozenset[str]]]:
    return [(c.node_type, c.count, c.avoid_zones) for c in cloud.calls_of("create_nodes")]


def _order(cloud: MemoryProvider) -> list[str]:
    """The listings, launches and terminations, in order."""
    return [c.method for c in cloud.calls_of("nodes", "create_nodes", "terminate_nodes")]


def _preempt(cloud: MemoryProvider, nodes: Sequence[Node]) -> None:
    for node in nodes:
        cloud.update(node.id, state=NodeState.PREEMPTED)


CONFIG = """\
cluster_name: fb
max_workers: 40
provider: {type: localhost}
metadata:
  owner: someone
  launcher: {fallbacks: {spot: [ondemand]}}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  spot: {node_config: {}, resources: {CPU: 4}}
  ondemand: {node_config: {}, resources: {CPU: 4}}
head_node_type: head
"""


def _executor(capacity: Mapping[tuple[str, str], int]) -> tuple[Executor, _Gated, list[str]]:
    config = parse_config(CONFIG, "fb.yaml")
    cloud = _Gated(config, capacity)
    logged: list[str] = []
    executor = Executor(
        cloud, config, lambda text, action, node_type: logged.append(text), max_batch=10
    )
    return executor, cloud, logged


def _settle(executor: Executor) -> list[Node]:
    deadline = time.monotonic() + 10
    while executor.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    return executor.collect()


def test_config_fallbacks_reach_the_planner() -> None:
    config = parse_config(CONFIG, "fb.yaml")
    assert config.fallbacks == {"spot": ("ondemand",)}
    assert config.metadata["owner"] == "someone"


def test_config_with_fallbacks_stays_valid_for_ray(ray_examples: Path) -> None:
    import jsonschema
    import yaml

    ray_schema = json.loads((ray_examples / "ray-schema.json").read_text())
    jsonschema.validate(yaml.safe_load(CONFIG), ray_schema)  # raises if Ray would refuse it


def test_config_fallback_errors_name_the_key_and_fix() -> None:
    bad = CONFIG.replace("[ondemand]", "[ondemnd]")
    with pytest.raises(ConfigError) as caught:
        parse_config(bad, "fb.yaml")
    assert "fallbacks" in str(caught.value) and "did you mean `ondemand`" in str(caught.value)


def test_launches_run_in_batches_and_count_as_pending_until_listed() -> None:
    executor, cloud, _ = _executor({("spot", "zone-a"): 100})
    cloud.gate.clear()
    executor.launch("spot", 25)
    assert sorted(p.count for p in executor.pending()) == [5, 10, 10]
    cloud.gate.set()
    created = _settle(executor)
    assert len(created) == 25
    assert sorted(count for _, count, _ in _launches(cloud)) == [5, 10, 10]
    # Created but not listed yet (a cloud's listing lags): still counted by the planner.
    assert len(executor.unlisted([])) == 25
    assert executor.unlisted(cloud.nodes()) == []


def test_capacity_failure_avoids_the_zone_then_the_type_falls_back() -> None:
    executor, cloud, logged = _executor({("spot", "zone-a"): 2, ("ondemand", "zone-a"): 10})
    executor.launch("spot", 3)
    created = _settle(executor)
    assert len(created) == 2  # what fit before capacity ran out is kept
    assert executor.unavailable() == {"spot": "capacity failure in zone-a, zone-b"}
    assert any("spot: capacity failure in zone-a" in line for line in logged)
    executor.launch("spot", 1)
    _settle(executor)
    assert _launches(cloud)[-1] == ("spot", 1, frozenset({"zone-a", "zone-b"}))


def test_capacity_memory_forgets_the_zones_capacity_came_back_to() -> None:
    memory = CapacityMemory()
    memory.failed("cpu", "a", 0.0, "capacity failure")
    memory.failed("gpu", "a", 0.0, "capacity failure")
    memory.failed("cpu", "b", 0.0, "capacity failure")
    memory.freed({"a"})
    assert memory.avoided_zones("cpu", 1.0) == {"b"} and memory.avoided_zones("gpu", 1.0) == set()


def test_stand_ins_are_tagged_and_preemption_is_remembered() -> None:
    executor, _, logged = _executor({("ondemand", "zone-a"): 5})
    executor.launch("ondemand", 2, stands_in_for="spot")
    created = _settle(executor)
    assert all(n.tags[TAG_STANDS_IN_FOR] == "spot" for n in created)
    executor.preempted(
        Node("s1", NodeKind.WORKER, "spot", None, NodeState.PREEMPTED, zone="zone-b")
    )
    assert executor.capacity.avoided_zones("spot", executor.clock()) == {"zone-b"}
    assert any("s1 was preempted in zone-b" in line for line in logged)


def test_other_launch_errors_back_off_the_type() -> None:
    executor, cloud, logged = _executor({("spot", "zone-a"): 5})
    cloud.fail("create_nodes", ProviderError("UnauthorizedOperation: not allowed"))
    executor.launch("spot", 1)
    _settle(executor)
    assert "spot" in executor.blocked()
    assert any("launch of 1 x spot failed: UnauthorizedOperation" in line for line in logged)
    cloud.clear_failures()
    executor.launch("spot", 1)
    _settle(executor)
    assert "spot" not in executor.blocked()


def test_provider_bug_is_logged_not_raised() -> None:
    executor, cloud, logged = _executor({})
    cloud.fail("create_nodes", KeyError("boom"))
    executor.launch("spot", 1)
    assert _settle(executor) == []
    assert any("KeyError" in line for line in logged)


# -- the simulator ----------------------------------------------------------------------
SIM_CONFIG = """\
cluster_name: sim
max_workers: 10
idle_timeout_minutes: 1
provider: {type: aws, region: us-east-1}
metadata: {launcher: {fallbacks: {spot: ondemand}}}
available_node_types:
  head: {node_config: {InstanceType: m5.large}, max_workers: 0}
  spot: {node_config: {InstanceType: m5.xlarge, InstanceMarketOptions: {MarketType: spot}}}
  ondemand: {node_config: {InstanceType: m5.xlarge}}
head_node_type: head
"""


def test_simulated_capacity_shortage_launches_the_fallback(
    write_config: Callable[..., Path], cli_runner: Callable[..., CliResult]
) -> None:
    config = write_config(SIM_CONFIG)
    trace = write_config(
        '{"t": 0, "resources": {"CPU": 4}, "count": 6, "duration_s": 600}\n', "trace.jsonl"
    )
    args = ("simulate", str(config), "--trace", str(trace), "--json", "--launch-delay-s", "5")
    plain = json.loads(cli_runner(*args).stdout)
    assert set(plain["node_hours"]) == {"head", "spot"} and plain["fallback_launches"] == {}
    short = cli_runner(*args, "--capacity", "spot=2")
    assert short.exit_code == 0, short.stderr
    report = json.loads(short.stdout)
    assert report["capacity_failures"] >= 1
    assert report["fallback_launches"] == {"ondemand": 4}
    assert report["tasks_never_placed"] == 0
    bad = cli_runner(*args, "--capacity", "spott=2")
    assert bad.exit_code == 2 and "no node type 'spott'" in bad.stderr


# -- the daemon's tick, with the in-memory provider (no head, so no Ray and no setup) ------
def _daemon(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capacity: Mapping[tuple[str, str], int],
    cloud_class: type[MemoryProvider] = MemoryProvider,
) -> tuple[Daemon, MemoryProvider]:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(
        CONFIG.replace("spot: {node_config: {}", "spot: {min_workers: 2, node_config: {}"),
        "fb.yaml",
    )
    cloud = cloud_class(config, capacity, default_zones=ZONES)
    return Daemon(cloud, config, clock=_Clock()), cloud


class _Clock:
    """The daemon's clock for its listing's age: time passes only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _later(daemon: Daemon, seconds: float) -> None:
    clock = daemon.clock
    assert isinstance(clock, _Clock)
    clock.now += seconds


def _tick(daemon: Daemon) -> None:
    daemon.tick()
    _settle(daemon.executor)


def test_daemon_replaces_spot_capacity_with_tagged_stand_ins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    daemon, cloud = _daemon(monkeypatch, tmp_path, {("ondemand", "zone-a"): 5})
    _tick(daemon)  # min_workers: 2 x spot, which has no capacity anywhere
    assert [n for n in cloud.held() if n.node_type == "spot"] == []
    _tick(daemon)  # spot is remembered as out: its fallback stands in
    stand_ins = [n for n in cloud.held() if n.node_type == "ondemand"]
    assert len(stand_ins) == 2 and all(n.tags[TAG_STANDS_IN_FOR] == "spot" for n in stand_ins)
    _tick(daemon)  # nothing more: the stand-ins count toward spot's min_workers
    assert len(cloud.held()) == 2
    state = json.loads(Path(STATE_FILE).expanduser().read_text())
    assert state["unavailable"] == {"spot": "capacity failure in zone-a, zone-b"}
    texts = [d["text"] for d in state["decisions"]]
    assert "fallback: spot: capacity failure in zone-a, zone-b, falling back to ondemand" in texts


@pytest.mark.parametrize("pool", [True, False])
def test_daemon_launches_again_at_once_where_a_termination_freed_a_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pool: bool
) -> None:
    daemon, cloud = _daemon(monkeypatch, tmp_path, {("spot", "zone-a"): 1})
    # The in-memory zone holds one node at a time, so a termination frees its room; True
    # says so, as a fixed pool of machines (on-prem) would; False: as a cloud would say.
    cloud.traits = dataclasses.replace(cloud.traits, terminating_frees_capacity=pool)
    _tick(daemon)  # min_workers 2: one machine made, then none left in either zone
    (first,) = cloud.held()
    assert daemon._unavailable() == {"spot": "capacity failure in zone-a, zone-b"}
    cloud.set_tags(first.id, {TAG_STATUS: NodeStatus.FAILED})
    _tick(daemon)  # its setup failed: terminated, and its machine is free again
    assert cloud.held() == []
    _tick(daemon)
    if pool:  # zone-a is tried again at once
        assert [n.node_type for n in cloud.held()] == ["spot"]
        assert _launches(cloud)[-1] == ("spot", 2, frozenset({"zone-b"}))
    else:  # a cloud's capacity failure is remembered for a while
        assert cloud.held() == [] and "spot" in daemon._unavailable()


def test_daemon_stops_launching_a_type_whose_setups_keep_failing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    daemon, cloud = _daemon(
        monkeypatch, tmp_path, {("spot", "zone-a"): 50, ("ondemand", "zone-a"): 50}
    )
    for _ in range(3):
        daemon.setup_backoff.failed("spot", time.monotonic())
    _tick(daemon)
    assert {n.node_type for n in cloud.held()} == {"ondemand"}  # spot waits; its fallback serves
    assert "3 setups failed in a row" in daemon._unavailable()["spot"]


def test_daemon_replaces_a_preempted_spot_worker_with_its_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    daemon, cloud = _daemon(
        monkeypatch, tmp_path, {("spot", "zone-b"): 2, ("ondemand", "zone-a"): 5}
    )
    _tick(daemon)
    assert sorted(n.node_type for n in cloud.held()) == ["spot", "spot"]
    _preempt(cloud, cloud.held())
    cloud.capacity["spot", "zone-a"] = 0
    _tick(daemon)  # the listing is younger than its max age: not read again, not seen yet
    assert all(n.state is NodeState.PREEMPTED for n in cloud.held())
    _later(daemon, LISTING_MAX_AGE_S)  # Ray's tick: seen no later than Ray's would
    _tick(daemon)  # both terminated; zone-b avoided, zone-a still open: spot is tried there
    _tick(daemon)  # zone-a has nothing either: now spot is out everywhere
    _tick(daemon)
    assert sorted(n.node_type for n in cloud.held()) == ["ondemand", "ondemand"]
    log = Path(STATE_FILE).expanduser().read_text()
    assert "was preempted in zone-b" in log


def test_idle_ticks_do_not_list_and_every_action_follows_a_fresh_listing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The daemon ticks every second but lists the provider only when the listing may have
    changed (its own launches and terminations), when it is LISTING_MAX_AGE_S old (Ray's
    tick), or right before it acts; an idle cluster costs one listing per 5 s, not per
    tick (issue 15: fewer API calls per tick than Ray's autoscaler)."""
    daemon, cloud = _daemon(monkeypatch, tmp_path, {("spot", "zone-a"): 5})
    daemon.listing.max_age_s = 60.0  # here only what the daemon itself does reads it
    cloud.fail("create_nodes", ProviderError("the API is down"))
    _tick(daemon)  # listed, then min_workers: 2 x spot, which fails
    _tick(daemon)  # spot waits (backoff): its fallback is launched, on a fresh listing; fails
    assert _order(cloud) == ["nodes", "create_nodes", "nodes", "create_nodes"]
    for _ in range(10):
        _tick(daemon)  # a launch ended (it might have made some): read once; then both wait
    assert _order(cloud)[4:] == ["nodes"]
    cloud.clear_failures()
    _later(daemon, 30.0)  # the backoff is over: a launch is due, on a listing read now
    _tick(daemon)
    assert _order(cloud)[5:] == ["nodes", "create_nodes"]
    _tick(daemon)  # the launch made nodes: read again to see them
    assert _order(cloud)[7:] == ["nodes"]
    for _ in range(10):
        _tick(daemon)
    assert _order(cloud)[8:] == []
    _later(daemon, 60.0)
    _tick(daemon)  # old: read again
    assert _order(cloud)[8:] == ["nodes"]
    cloud.set_tags(cloud.held()[0].id, {TAG_STATUS: NodeStatus.FAILED})
    _later(daemon, 60.0)
    _tick(daemon)  # a failed worker: terminated and replaced, after a listing
    assert _order(cloud)[9:] == ["nodes", "terminate_nodes", "create_nodes"]


def test_daemon_goes_on_launching_when_a_node_cannot_be_freed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    daemon, cloud = _daemon(monkeypatch, tmp_path, {("spot", "zone-a"): 5})
    # It cannot free any node (on-prem: a machine whose Ray would not stop).
    cloud.fail("terminate_nodes", ProviderError("could not stop Ray on n0: raylet (pid 7)"))
    _tick(daemon)
    assert [n.node_type for n in cloud.held()] == ["spot", "spot"]
    cloud.set_tags(cloud.held()[0].id, {TAG_STATUS: NodeStatus.FAILED})
    _later(daemon, LISTING_MAX_AGE_S)  # tagged outside the daemon: seen at its next listing
    _tick(daemon)  # the failed one cannot be freed; its replacement is launched all the same
    assert len(cloud.held()) == 3 and cloud.held()[0].status is NodeStatus.FAILED


def test_a_quota_failure_avoids_every_zone_of_the_type() -> None:
    executor, cloud, logged = _executor({("ondemand", "zone-a"): 5})
    cloud.fail(
        "create_nodes", CapacityError("spot", ("zone-a",), "VcpuLimitExceeded", scope="quota")
    )
    executor.launch("spot", 1)
    _settle(executor)
    assert executor.capacity.avoided_zones("spot", time.monotonic()) == {"zone-a", "zone-b"}
    assert any("spot: over its quota in zone-b" in line for line in logged)


def test_a_preemption_is_remembered_before_the_tick_plans_its_replacement(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spot taken back in every zone: the same tick launches the fallback, never the spot
    type into zones it has just been taken back in (which would fail, and double the wait)."""
    daemon, cloud = _daemon(
        monkeypatch,
        tmp_path,
        {("spot", "zone-a"): 1, ("spot", "zone-b"): 1, ("ondemand", "zone-a"): 5},
    )
    _tick(daemon)
    assert sorted((n.node_type, n.zone) for n in cloud.held()) == [
        ("spot", "zone-a"),
        ("spot", "zone-b"),
    ]
    _preempt(cloud, cloud.held())
    calls_before = len(_launches(cloud))
    _later(daemon, LISTING_MAX_AGE_S)
    _tick(daemon)
    assert [c[0] for c in _launches(cloud)[calls_before:]] == ["ondemand"]
    assert sorted(n.node_type for n in cloud.held()) == ["ondemand", "ondemand"]
    unavailable = daemon._unavailable()["spot"]
    assert unavailable == "preempted in zone-a, zone-b"


def test_a_reclaim_notice_launches_the_replacement_before_the_node_goes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Notice that spot workers will be taken back (as AWS and GCP give): the replacement
    (the fallback, spot being avoided) is launched at once, the noticed nodes run on until
    taken, and their reclaim then counts as the same preemption, not a second one."""
    daemon, cloud = _daemon(
        monkeypatch,
        tmp_path,
        {("spot", "zone-a"): 1, ("spot", "zone-b"): 1, ("ondemand", "zone-a"): 5},
    )
    _tick(daemon)
    spot = cloud.held()
    assert sorted(n.node_type for n in spot) == ["spot", "spot"]
    for node in spot:
        cloud.update(node.id, reclaim_at=time.time() + 120)
    _later(daemon, LISTING_MAX_AGE_S)
    _tick(daemon)
    assert sorted(n.node_type for n in cloud.held()) == ["ondemand", "ondemand", "spot", "spot"]
    assert all(n.node_type == "spot" for n in cloud.held() if n.reclaim_at)  # still running
    zones = ("zone-a", "zone-b")
    waits = {zone: daemon.executor.capacity.records["spot", zone].until for zone in zones}
    # Taken back: terminated and not replaced again; avoided no longer than after the notice.
    _preempt(cloud, [n for n in cloud.held() if n.reclaim_at])
    _later(daemon, LISTING_MAX_AGE_S)
    _tick(daemon)
    _tick(daemon)
    assert sorted(n.node_type for n in cloud.held()) == ["ondemand", "ondemand"]
    assert {z: daemon.executor.capacity.records["spot", z].until for z in zones} == waits


def test_the_work_on_a_noticed_node_is_demand_for_its_replacement() -> None:
    """What Ray runs on a node about to be taken back waits for room elsewhere (one bundle of
    its resources in use), so a cluster without min_workers launches its replacement too."""
    busy = RayNode("r1", "10.0.0.5", {"CPU": 4.0, "GPU": 1.0, "object_store_memory": 1e9},
                   {"CPU": 1.0, "GPU": 1.0, "object_store_memory": 5e8}, 0.0, True)  # fmt: skip
    other = RayNode("r2", "10.0.0.6", {"CPU": 4.0}, {"CPU": 0.0}, 0.0, True)
    demand = Demand(pending=(({"CPU": 1.0}, 2),), nodes=(busy, other))
    leaving = Node("w1", NodeKind.WORKER, "spot", "10.0.0.5", NodeState.RUNNING, reclaim_at=1.0)
    moved = with_work_of(demand, [leaving])
    assert moved.pending == (({"CPU": 1.0}, 2), ({"CPU": 3.0}, 1))
    unknown = dataclasses.replace(leaving, ip="10.9.9.9")  # no Ray node there: nothing to move
    assert with_work_of(demand, [unknown]) == demand


class _Recording(NoAccess):
    """Node access that records the nodes whose Ray the daemon stops (their commands go
    nowhere)."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self.ray_stopped: list[str] = []
        self.stopped = threading.Event()

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        return cast(CommandRunner, object())

    def stop_node_ray(self, node: Node, runner: CommandRunner, force: bool = False) -> str | None:
        self.ray_stopped.append(node.id)
        self.stopped.set()
        return None


class _Evacuated(MemoryProvider):
    """Its nodes' Ray can be stopped (recorded)."""

    def __init__(
        self, config: ClusterConfig, capacity: Mapping[tuple[str, str], int], **kw: Any
    ) -> None:
        super().__init__(config, capacity, **kw)
        self.access = self.recording = _Recording(config)


def test_a_noticed_node_s_ray_is_stopped_once_its_work_fits_elsewhere_and_it_is_left_to_the_reclaim(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Once the replacement has joined Ray with room for the noticed node's work, the daemon
    stops that node's Ray (so Ray moves the work now), once; the node, its Ray now dead, is
    not replaced as broken while its reclaim is due: the provider takes it."""
    daemon, cloud = _daemon(monkeypatch, tmp_path, {("spot", "zone-a"): 2}, _Evacuated)
    _tick(daemon)
    for i, n in enumerate(cloud.held(), 1):
        cloud.update(n.id, ip=f"10.0.0.{i}", state=NodeState.RUNNING)
        cloud.set_tags(n.id, {TAG_STATUS: NodeStatus.UP_TO_DATE})
    leaving = cloud.update(cloud.held()[0].id, reclaim_at=time.time() + 120)
    ray = [RayNode("r1", "10.0.0.1", {"CPU": 4.0}, {"CPU": 1.0}, 0.0, True),
           RayNode("r2", "10.0.0.2", {"CPU": 4.0}, {"CPU": 0.0}, 0.0, True)]  # fmt: skip
    monkeypatch.setattr(daemon, "_demand", lambda head: Demand(nodes=tuple(ray)))
    _later(daemon, LISTING_MAX_AGE_S)
    _tick(daemon)
    assert cloud.recording.ray_stopped == []  # no room for its 3 CPUs anywhere yet
    ray.append(RayNode("r3", "10.0.0.3", {"CPU": 4.0}, {"CPU": 4.0}, 0.0, True))  # joined
    _tick(daemon)
    assert cloud.recording.stopped.wait(10) and cloud.recording.ray_stopped == [leaving.id]
    ray[0] = dataclasses.replace(ray[0], alive=False)
    cloud.update(leaving.id, state=NodeState.DEAD)
    _later(daemon, LISTING_MAX_AGE_S)
    _tick(daemon)
    _tick(daemon)
    assert cloud.recording.ray_stopped == [leaving.id]
    assert leaving.id in {n.id for n in cloud.held()}  # not terminated: the reclaim is due
