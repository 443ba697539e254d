"""The autoscaler's Prometheus metrics (launcher/autoscaler/metrics.py): Ray's names, types and
labels, the values a daemon's ticks give them (in-memory provider: launches, a capacity
failure and its fallback, a reclaim), the endpoint bound to the head's address only, and
Ray's monitor's metrics turned off on the head."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from launcher.autoscaler.daemon import Daemon
from launcher.autoscaler.decide.demand import (
    Demand,
    RayNode,
    _forget_of,
    _metrics_address_of,
    decode,
    encode,
    request_line,
)
from launcher.autoscaler.endpoint import MetricsEndpoint
from launcher.autoscaler.metrics import AutoscalerMetrics, ClusterGauges, reason_kind
from launcher.autoscaler.telemetry import gauges_of
from launcher.autoscaler.timeline import Sample, TypeCount
from launcher.config.loader import parse_config
from launcher.providers.access import NodeAccess
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState, NodeStatus
from launcher.testing import MemoryProvider

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> tuple[Samples, dict[str, str]]:
    """(sample name, its labels but SessionName) -> value; and family name -> type."""
    text = generate_latest(registry).decode()
    values: Samples = {}
    types = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "SessionName"))
            values[s.name, labels] = s.value
    return values, types


def test_rays_families_are_served_with_rays_types_and_labels() -> None:
    from ray.autoscaler._private.prom_metrics import AutoscalerPrometheusMetrics

    ray = AutoscalerPrometheusMetrics(session_name="s")
    ours = AutoscalerMetrics(["head", "worker"])
    ray_families = {f.name: f for f in ray.registry.collect()}
    our_families = {f.name: f for f in ours.registry.collect()}
    served = {
        "autoscaler_active_nodes",
        "autoscaler_pending_nodes",
        "autoscaler_recently_failed_nodes",
        "autoscaler_cluster_resources",
        "autoscaler_pending_resources",
        "autoscaler_running_workers_nodes",
        "autoscaler_updating_nodes",
        "autoscaler_started_nodes",
        "autoscaler_stopped_nodes",
        "autoscaler_failed_create_nodes",
        "autoscaler_node_launch_exceptions",
        "autoscaler_successful_updates",
        "autoscaler_failed_updates",
        "autoscaler_update_loop_exceptions",
        "autoscaler_update_time_seconds",
        "autoscaler_worker_create_node_time_seconds",
        "autoscaler_worker_update_time_seconds",
    }
    left_out = {  # what does not apply here (metrics.py says why)
        "autoscaler_recovering_nodes",
        "autoscaler_failed_recoveries",
        "autoscaler_successful_recoveries",
        "autoscaler_reset_exceptions",
        "autoscaler_config_validation_exceptions",
        "autoscaler_drain_node_exceptions",
    }
    assert set(ray_families) == served | left_out  # a Ray that adds one fails here
    for name in served:
        theirs, mine = ray_families[name], our_families[name]
        assert mine.type == theirs.type, name
        ray_labels = {k for s in theirs.samples for k in s.labels} - {"le"}
        if not ray_labels:  # Ray's gauges by type or resource have no series until set
            ray_labels = {"SessionName", "NodeType" if "nodes" in name else "resource"}
        assert {k for s in mine.samples for k in s.labels} - {"le"} == ray_labels, name
        if theirs.type == "histogram":
            bounds = {s.labels["le"] for s in theirs.samples if "le" in s.labels}
            assert {s.labels["le"] for s in mine.samples if "le" in s.labels} == bounds
    assert all(name.startswith("launcher_") for name in set(our_families) - served)


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("below min_workers (0 < 2)", "min_workers"),
        ("below min_workers (0 < 2) of spot", "min_workers"),
        ("placement group 6eb3 (SPREAD, 16 bundles)", "placement_group"),
        ("3 pending bundle(s) of {CPU: 2}", "pending_demand"),
        ("request_resources asks for 2 x {CPU: 4}", "request_resources"),
        ("idle 61 s > 60 s", "idle"),
        ("preempted in zone-a", "preempted"),
        ("setup failed", "setup_failed"),
        ("spot: capacity failure in zone-a, zone-b, falling back to ondemand", "capacity"),
        ("spot: over its quota in zone-a; avoiding it for 120 s", "quota"),
        ("{GPU: 8} fits no node type", "fits_no_type"),
        ("something new", "other"),
    ],
)
def test_reasons_fall_into_a_few_kinds(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


CONFIG = """\
cluster_name: met
max_workers: 10
provider: {type: localhost}
metadata: {launcher: {fallbacks: {spot: [ondemand]}}}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  spot: {node_config: {simulated_spot: true}, resources: {CPU: 4, GPU: 1}, min_workers: 2}
  ondemand: {node_config: {}, resources: {CPU: 4}}
head_node_type: head
"""


def _tick(daemon: Daemon) -> None:
    daemon.round()  # as the daemon's loop runs it (timed, exceptions counted)
    daemon.wake.clear()
    while daemon.executor.pending():
        assert daemon.wake.wait(30)
        daemon.wake.clear()


def _value(values: Samples, name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_daemons_ticks_give_the_families_their_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(CONFIG, "met.yaml")
    cloud = MemoryProvider(config, {("spot", "zone-a"): 2, ("ondemand", "zone-a"): 5})
    cloud.default_zones = ("zone-a", "zone-b")
    daemon = Daemon(cloud, config)
    daemon.listing.max_age_s = 0.0
    _tick(daemon)  # min_workers: 2 x spot, launching
    values, _ = scrape(daemon.metrics.registry)
    assert _value(values, "autoscaler_pending_nodes", NodeType="spot") == 2  # launched now
    _tick(daemon)
    values, _ = scrape(daemon.metrics.registry)
    for node_type in ("head", "spot", "ondemand"):  # every type, 0 when it has none
        assert ("autoscaler_active_nodes", (("NodeType", node_type),)) in values
    assert _value(values, "autoscaler_pending_nodes", NodeType="spot") == 2  # not set up
    assert _value(values, "autoscaler_pending_resources", resource="GPU") == 2
    assert _value(values, "autoscaler_pending_resources", resource="CPU") == 8
    assert _value(values, "autoscaler_started_nodes_total") == 2
    assert _value(values, "launcher_decisions_total", action="launch", reason="min_workers") == 1
    spots = cloud.held()
    cloud.update(spots[0].id, state=NodeState.PREEMPTED)
    cloud.capacity["spot", "zone-a"] = 0
    for _ in range(4):
        _tick(daemon)
    values, types = scrape(daemon.metrics.registry)
    assert _value(values, "launcher_reclaims_total", NodeType="spot", how="preempted") == 1
    assert _value(values, "autoscaler_stopped_nodes_total") == 1  # the preempted one
    failures = _value(values, "launcher_capacity_failures_total", NodeType="spot", zone="zone-b")
    assert failures == 1
    assert _value(values, "autoscaler_failed_create_nodes_total") == 1
    assert _value(values, "autoscaler_node_launch_exceptions_total") == 1
    assert _value(values, "autoscaler_recently_failed_nodes", NodeType="spot") == 1
    fallback = _value(values, "launcher_fallback_nodes_total", NodeType="ondemand", for_type="spot")
    assert fallback == 1  # spot's min_workers: one stand-in for the one preempted
    assert _value(values, "autoscaler_pending_nodes", NodeType="ondemand") == 1
    assert _value(values, "autoscaler_update_time_seconds_count") == 6
    assert _value(values, "launcher_planner_seconds_count") == 6
    assert "launcher_cost_per_hour" not in types  # localhost nodes have no price
    assert types["autoscaler_started_nodes"] == "counter"


def test_failed_rounds_are_counted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(CONFIG, "met.yaml")
    cloud = MemoryProvider(config)
    cloud.fail("nodes", ZeroDivisionError("a bug"), times=2)
    daemon = Daemon(cloud, config)
    for _ in range(3):
        daemon.round()
    values, _ = scrape(daemon.metrics.registry)
    assert _value(values, "autoscaler_update_loop_exceptions_total") == 2
    assert _value(values, "autoscaler_update_time_seconds_count") == 3


def _node(node_id: str, node_type: str, status: NodeStatus) -> Node:
    kind = NodeKind.HEAD if node_type == "head" else NodeKind.WORKER
    tags = {TAG_STATUS: status.value}
    return Node(node_id, kind, node_type, "127.0.0.9", NodeState.RUNNING, tags)


def test_gauges_count_rays_resources_and_what_launching_nodes_bring() -> None:
    sample = Sample(
        1.0,
        {"head": TypeCount(1, 0), "w": TypeCount(2, 3)},
        {"CPU": 6.0},
        2,
        1.5,
    )
    up = NodeStatus.UP_TO_DATE
    nodes = [_node("h", "head", up), _node("a", "w", up), _node("b", "w", NodeStatus.SETTING_UP)]
    total = {"CPU": 2.0, "node:127.0.0.9": 1.0}
    demand = Demand(
        nodes=(
            RayNode("1", "127.0.0.9", total, {}, 0.0, True),
            RayNode("2", "127.0.0.8", total, {}, 0.0, True),
            RayNode("3", "127.0.0.7", total, {}, 0.0, False),  # dead: not counted
        )
    )
    declared: Mapping[str, Mapping[str, float]] = {"w": {"CPU": 2.0, "GPU": 1.0}}
    gauges = gauges_of(sample, nodes, demand, declared, updating=1)
    assert gauges == ClusterGauges(
        active={"head": 1, "w": 2},
        pending={"head": 0, "w": 3},
        running_workers=1,
        updating=1,
        cluster_resources={"CPU": 4.0, "node:127.0.0.9": 2.0},
        pending_resources={"CPU": 6.0, "GPU": 3.0},
        demand={"CPU": 6.0},
        infeasible=2,
        cost_per_hour=1.5,
    )
    metrics = AutoscalerMetrics(["head", "w"], ["GPU", "accel"])
    metrics.set_gauges(gauges)
    values, _ = scrape(metrics.registry)
    assert _value(values, "autoscaler_cluster_resources", resource="CPU") == 4
    assert ("autoscaler_cluster_resources", (("resource", "node:127.0.0.9"),)) not in values
    assert ("autoscaler_cluster_resources", (("resource", "accel"),)) in values
    assert _value(values, "launcher_cost_per_hour") == 1.5


def test_the_session_name_labels_every_series() -> None:
    metrics = AutoscalerMetrics(["head"])
    metrics.set_session("session_2026_x")
    text = generate_latest(metrics.registry).decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert series and all('SessionName="session_2026_x"' in line for line in series)


# -- the endpoint ----------------------------------------------------------------------------
def test_the_endpoint_serves_on_the_given_address_only(tmp_path: Path) -> None:
    logged: list[str] = []
    metrics = AutoscalerMetrics(["head"])
    endpoint = MetricsEndpoint(metrics.registry, 0, logged.append)
    try:
        address = endpoint.serve_on("127.0.0.7")
        assert address is not None and address.startswith("127.0.0.7:")
        assert endpoint.server is not None
        assert endpoint.server.socket.getsockname()[0] == "127.0.0.7"  # never 0.0.0.0
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as reply:
            assert b'autoscaler_active_nodes{NodeType="head"' in reply.read()
        assert endpoint.serve_on("127.0.0.7") == address  # already there: unchanged
        moved = endpoint.serve_on("127.0.0.8")
        assert moved is not None and moved.startswith("127.0.0.8:")
    finally:
        endpoint.close()
    assert any("serving the autoscaler's metrics at http://127.0.0.7:" in line for line in logged)


def test_a_taken_port_is_logged_once_and_tried_again_later() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.7", 0))
    taken.listen()
    now = [0.0]
    logged: list[str] = []
    port = taken.getsockname()[1]
    endpoint = MetricsEndpoint(AutoscalerMetrics([]).registry, port, logged.append, lambda: now[0])
    try:
        assert endpoint.serve_on("127.0.0.7") is None
        assert endpoint.serve_on("127.0.0.7") is None  # not tried again yet
        now[0] = 31.0
        assert endpoint.serve_on("127.0.0.7") is None  # tried again: still taken
        assert len(logged) == 1 and f"127.0.0.7:{port}" in logged[0]
        taken.close()
        now[0] = 62.0
        assert endpoint.serve_on("127.0.0.7") == f"127.0.0.7:{port}"
    finally:
        endpoint.close()
        taken.close()


# -- Ray's discovery, and Ray's monitor ------------------------------------------------------
def test_reads_carry_the_address_for_rays_discovery_and_bring_the_session() -> None:
    line = request_line(["i-1"], "127.0.0.7:44217")
    assert _forget_of(line) == ["i-1"] and _metrics_address_of(line) == "127.0.0.7:44217"
    assert _metrics_address_of(request_line(["i-1"])) is None
    assert _forget_of(request_line(["i-1"])) == ["i-1"]
    assert decode(encode(Demand(session="session_x"))).session == "session_x"


@pytest.mark.parametrize(("port", "off"), [(44217, True), (9100, True), (0, False)])
def test_the_heads_ray_start_turns_rays_monitors_metrics_off(port: int, off: bool) -> None:
    text = CONFIG.replace("{launcher: {", f"{{launcher: {{metrics_port: {port}, ")
    config = parse_config(text, "m.yaml")
    access = NodeAccess(config)
    head = _node("h", "head", NodeStatus.UP_TO_DATE)
    worker = _node("w", "spot", NodeStatus.UP_TO_DATE)
    assert ("AUTOSCALER_METRIC_PORT" in access.ray_start_env(head)) is off
    assert "AUTOSCALER_METRIC_PORT" not in access.ray_start_env(worker)
    assert config.metrics_port == port
