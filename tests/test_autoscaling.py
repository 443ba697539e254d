"""The autoscaler on real Ray: scaling on pending demand, placement groups, request_resources,
and idle workers leaving; its Prometheus metrics scraped as Ray's discovery lists them."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from launcher.autoscaler.timeline import Reclaim, read_timeline_files
from launcher.providers.localhost.spec import ray_temp_dir, state_dir
from tests.cluster_helpers import kill_cluster, run, start, status, wait_for

CONFIG = """\
cluster_name: {name}
max_workers: 3
idle_timeout_minutes: 0.1
provider: {{type: localhost}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {{}}, resources: {{CPU: 2}}, min_workers: 0, max_workers: 3}}
head_node_type: head
"""


@pytest.fixture
def cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    name = "a" + request.node.name.replace("_", "-")[5:28].strip("-")
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG.format(name=name))
    assert run("up", "-y", str(path)).returncode == 0
    yield path
    run("down", "-y", str(path))
    kill_cluster(name)


@pytest.fixture(scope="class")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cluster for the tests of `TestInTurnOnOneCluster`, up once and down once (each
    brought its own up and down, ~9 s): each test starts, as on a fresh cluster, with the
    head alone (no worker, nothing pending), which the test before leaves."""
    tmp = tmp_path_factory.mktemp("shared")
    path = tmp / "cluster.yaml"
    path.write_text(CONFIG.format(name="ainturn"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAUNCHER_HOME", str(tmp / "home"))
        try:
            up = run("up", "-y", str(path))
            assert up.returncode == 0, up.stdout + up.stderr
            yield path
        finally:
            run("down", "-y", str(path))
            kill_cluster("ainturn")


def _workers(path: Path) -> list[dict[str, object]]:
    return [n for n in status(path)["nodes"] if n["kind"] == "worker"]


def _submit(path: Path, tmp_path: Path, code: str) -> str:
    script = tmp_path / "job.py"
    script.write_text(code)
    result = run("submit", str(path), str(script), timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


class TestInTurnOnOneCluster:
    """In this order on one cluster (`shared`): the infeasible demand first (it needs a
    cluster that never had a worker), then the pending tasks, whose workers are gone again
    before it ends, then the placement group, which launches its two workers from none."""

    def test_infeasible_demand_launches_nothing(self, shared: Path, tmp_path: Path) -> None:
        done = tmp_path / "seen"  # the job holds its infeasible task until the test saw the log
        script = tmp_path / "job.py"
        script.write_text(
            "import os, ray, time\nray.init()\n"
            "@ray.remote(num_cpus=64)\ndef f():\n    return 1\n"
            "ref = f.remote()\ndeadline = time.time() + 240\n"
            f"while not os.path.exists({str(done)!r}) and time.time() < deadline:\n"
            "    time.sleep(0.2)\nprint('waited')\n"
        )
        job = start("submit", str(shared), str(script))
        try:

            def logged() -> bool:
                text = run("monitor", "--no-follow", str(shared)).stdout
                return "fit no node type" in text

            wait_for(logged, 180, "the autoscaler to log the infeasible demand")
            state = status(shared)
            assert state["nodes"] and all(n["kind"] == "head" for n in state["nodes"])
        finally:
            done.touch()
            out, _ = job.communicate(timeout=240)
        assert job.returncode == 0 and "waited" in out, out

    def test_pending_tasks_bring_workers_that_leave_when_idle(
        self, shared: Path, tmp_path: Path
    ) -> None:
        assert _workers(shared) == []
        out = _submit(
            shared,
            tmp_path,
            (
                "import ray, time\nray.init()\n"
                "@ray.remote(num_cpus=2)\n"
                "def f():\n"  # holds its worker until a second one is up, however slow
                "    deadline = time.time() + 120\n"
                "    while sum(n['Alive'] for n in ray.nodes()) < 3 and time.time() < deadline:\n"
                "        time.sleep(0.5)\n"
                "    time.sleep(2)\n    return ray.get_runtime_context().get_node_id()\n"
                "print('nodes', len(set(ray.get([f.remote() for _ in range(4)]))))\n"
            ),
        )
        assert "nodes 2" in out or "nodes 3" in out  # the head has 1 CPU: workers ran them
        text = run("status", str(shared)).stdout
        assert "pending bundle(s) of {CPU: 2}" in text  # the decision and its reason
        wait_for(lambda: _workers(shared) == [], 90, "idle workers to be removed")
        log = run("monitor", "--no-follow", str(shared)).stdout
        assert "idle" in log and "> 6 s" in log

    def test_strict_spread_gets_distinct_nodes(self, shared: Path, tmp_path: Path) -> None:
        assert _workers(shared) == []
        out = _submit(
            shared,
            tmp_path,
            (
                "import ray\nfrom ray.util.placement_group import placement_group, "
                "placement_group_table\nray.init()\n"
                "pg = placement_group([{'CPU': 1}] * 3, strategy='STRICT_SPREAD')\n"
                "ray.get(pg.ready(), timeout=120)\n"
                "nodes = placement_group_table(pg)['bundles_to_node_id'].values()\n"
                "print('distinct', len(set(nodes)))\n"
            ),
        )
        assert "distinct 3" in out
        assert len(_workers(shared)) == 2  # the head and two workers, no more


def test_request_resources_scales_up_ahead_of_demand(cluster: Path, tmp_path: Path) -> None:
    _submit(
        cluster,
        tmp_path,
        (
            "import ray\nfrom ray.autoscaler.sdk import request_resources\nray.init()\n"
            "request_resources(bundles=[{'CPU': 2}, {'CPU': 2}])\n"
        ),
    )

    def two_ready() -> bool:
        workers = _workers(cluster)
        return len(workers) == 2 and all(w["status"] == "up-to-date" for w in workers)

    wait_for(two_ready, 90, "request_resources to bring two workers")


FALLBACK_CONFIG = """\
cluster_name: {name}
max_workers: 3
idle_timeout_minutes: 0.2
provider: {{type: localhost}}
metadata: {{launcher: {{fallbacks: {{spot: [ondemand]}}, metrics_port: {port}}}}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  spot: {{node_config: {{simulated_capacity: 1, simulated_spot: true}}, resources: {{CPU: 2}},
         max_workers: 3, priority: 1}}
  ondemand: {{node_config: {{}}, resources: {{CPU: 2}}, max_workers: 3}}
head_node_type: head
# With Ray's dashboard, which writes Ray's Prometheus discovery file.
head_start_ray_commands:
  - >-
    ray start --head --node-ip-address=$LAUNCHER_NODE_IP --port=$LAUNCHER_RAY_PORT
    --ray-client-server-port=$LAUNCHER_CLIENT_PORT --dashboard-port=$LAUNCHER_DASHBOARD_PORT
    --dashboard-agent-listen-port=$LAUNCHER_AGENT_PORT --dashboard-host=$LAUNCHER_NODE_IP
    --temp-dir=$LAUNCHER_TEMP_DIR --disable-usage-stats
"""

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(address: str) -> Series:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _get(series: Series, name: str, **labels: str) -> float:
    """The value of the series `name` with `labels` (and any SessionName); 0 when none."""
    for (found, have), value in series.items():
        if found == name and set(labels.items()) <= have:
            return value
    return 0.0


def _discovered(name: str) -> list[str]:
    """The targets Ray's Prometheus discovery file lists for cluster `name`'s session."""
    path = Path(ray_temp_dir(name)) / "session_latest" / "prom_metrics_service_discovery.json"
    try:
        return [t for group in json.loads(path.read_text()) for t in group["targets"]]
    except (OSError, ValueError):
        return []


def _free_port() -> int:
    with socket.socket() as probe:  # free on every address, so on the head's
        probe.bind(("0.0.0.0", 0))
        port: int = probe.getsockname()[1]
        return port


def test_capacity_failure_falls_back_to_the_next_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    path = tmp_path / "cluster.yaml"
    port = _free_port()
    path.write_text(FALLBACK_CONFIG.format(name="afallback", port=port))
    assert run("up", "-y", str(path)).returncode == 0
    try:
        _submit(  # demand that stays until two 2-CPU workers exist
            path,
            tmp_path,
            (
                "import ray\nfrom ray.autoscaler.sdk import request_resources\nray.init()\n"
                "request_resources(bundles=[{'CPU': 2}, {'CPU': 2}])\n"
            ),
        )

        def spot_and_fallback_ready() -> bool:
            workers = _workers(path)
            return sorted(str(w["node_type"]) for w in workers) == ["ondemand", "spot"] and all(
                w["status"] == "up-to-date" for w in workers
            )

        wait_for(spot_and_fallback_ready, 120, "one spot worker and one fallback worker")
        log = run("monitor", "--no-follow", str(path)).stdout
        assert "spot: capacity failure in localhost" in log
        assert "spot: capacity failure in localhost, falling back to ondemand" in log
        _metrics_tell_what_the_cluster_did(path, port)
    finally:
        run("down", "-y", str(path))
        kill_cluster("afallback")


def _metrics_tell_what_the_cluster_did(path: Path, port: int) -> None:
    """Issue 30: the autoscaler's metrics, scraped where Ray's discovery says, count what the
    cluster did (a capacity failure, its fallback, launches for demand, then a worker
    reclaimed), with our node types; no other target Ray lists reports them."""
    head = next(n for n in status(path)["nodes"] if n["kind"] == "head")
    ours = f"{head['ip']}:{port}"
    wait_for(lambda: ours in _discovered("afallback"), 60, f"Ray's discovery to list {ours}")
    for target in _discovered("afallback"):  # nodes' exporters, the dashboard's, ours
        if target != ours:
            assert not [k for k in _scrape(target) if k[0] == "autoscaler_active_nodes"], target

    def both_workers_active() -> bool:  # the head lists nodes every 5 s: `status` may lead
        scraped = _scrape(ours)
        return all(
            _get(scraped, "autoscaler_active_nodes", NodeType=t) == 1 for t in ("spot", "ondemand")
        )

    wait_for(both_workers_active, 60, "the metrics to count the spot and the fallback worker")
    series = _scrape(ours)
    assert _get(series, "autoscaler_active_nodes", NodeType="spot") == 1
    assert _get(series, "autoscaler_active_nodes", NodeType="ondemand") == 1
    assert _get(series, "autoscaler_active_nodes", NodeType="head") == 1
    assert not [k for k in series if k[0] == "autoscaler_active_nodes" and "node_" in str(k)]
    assert _get(series, "autoscaler_started_nodes_total") == 2
    assert _get(series, "autoscaler_failed_create_nodes_total") >= 1
    assert _get(series, "launcher_capacity_failures_total", NodeType="spot", zone="localhost") >= 1
    assert _get(series, "launcher_fallback_nodes_total", NodeType="ondemand", for_type="spot") >= 1
    assert _get(series, "launcher_decisions_total", action="launch", reason="request_resources")
    assert _get(series, "autoscaler_cluster_resources", resource="CPU") == 5
    sessions = {dict(k[1]).get("SessionName") for k in series}
    assert sessions == {(Path(ray_temp_dir("afallback")) / "session_latest").resolve().name}
    killed = run("kill-random-node", str(path), "--hard", "-y")
    assert killed.returncode == 0, killed.stderr
    node_type = "spot" if "(spot)" in killed.stdout else "ondemand"
    how = "preempted" if node_type == "spot" else "gone"  # only spot is simulated_spot

    def reclaim_counted() -> bool:
        reclaims = _scrape(ours)
        return _get(reclaims, "launcher_reclaims_total", NodeType=node_type, how=how) == 1

    wait_for(reclaim_counted, 60, f"the {node_type} worker's reclaim ({how}) to be counted")
    home = Path(state_dir("afallback")) / "nodes" / str(head["id"]) / "home"
    events = read_timeline_files(home / ".launcher" / "head" / "timeline.jsonl")
    assert [(e.node_type, e.how) for e in events if isinstance(e, Reclaim)] == [(node_type, how)]
