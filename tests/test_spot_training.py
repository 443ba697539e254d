"""The spot training flow on this machine, end to end with real Ray: the shipped examples
(examples/tune_sweep.py, examples/train_run.py on examples/clusters/local.yaml) started with
`submit --start --stop`, a spot worker reclaimed mid-run by `kill-random-node --hard`, the
autoscaler's replacement, the work resumed from its checkpoints, no cluster left after.
Also `kill-random-node` without --hard and `dashboard` on a running cluster."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.paths import cluster_dir
from tests.cluster_helpers import (
    cluster_config,
    kill_cluster,
    leftover_processes,
    run,
    start,
    status,
    temp_dir_of,
    wait_for,
)

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "examples" / "clusters" / "local.yaml"
NAME = "spot-training"  # the example's cluster_name


@pytest.fixture
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    return home


@pytest.fixture
def example_cluster(launcher_home: Path) -> Iterator[Path]:
    yield CLUSTER
    run("down", "-y", str(CLUSTER), timeout=120)
    kill_cluster(NAME)


def _checkpoints(folder: Path, pattern: str) -> list[Path]:
    return [p for p in folder.glob(pattern) if p.is_dir()]


def _reclaim_a_worker(*notice: str) -> tuple[str, str]:
    """`kill-random-node --hard`: returns the reclaimed worker's id and IP."""
    killed = run("kill-random-node", str(CLUSTER), "--hard", "-y", *notice, timeout=180)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "Reclaimed worker" in killed.stdout and "(spot)" in killed.stdout
    found = re.search(r"Reclaimed worker (\S+) .* with IP (\S+)", killed.stdout)
    assert found, killed.stdout
    return found.group(1), found.group(2)


def _finish(process: subprocess.Popen[str]) -> str:
    output, _ = process.communicate(timeout=480)
    assert process.returncode == 0, output[-4000:]
    return output


def _assert_no_cluster_left() -> None:
    wait_for(lambda: not leftover_processes(NAME), 30, "the cluster's processes to exit")
    assert not (cluster_dir(NAME) / "localhost").exists()
    assert not Path(temp_dir_of(NAME)).exists()


def test_a_tune_sweep_resumes_the_trials_of_a_reclaimed_spot_worker(
    example_cluster: Path, tmp_path: Path
) -> None:
    storage, summary = tmp_path / "results", tmp_path / "summary.json"
    # The reclaim comes at step 5 (the second checkpoint); the lost trials resume there
    # and run their remaining steps, which are time and no further check (as is a step's
    # length: half a second, not the example's default second).
    steps = 15
    process = start(
        "submit", str(CLUSTER), str(REPO / "examples" / "tune_sweep.py"),
        "--start", "--stop", "--steps", str(steps), "--step-seconds", "0.5",
        "--storage-path", str(storage), "--summary", str(summary),
    )  # fmt: skip
    # Mid-sweep: every trial has two checkpoints (so the driver has heard of one).
    wait_for(
        lambda: len(_checkpoints(storage, "tune-sweep/objective_*/checkpoint_000001")) == 4,
        300,
        "every trial's second checkpoint",
    )
    _, killed_ip = _reclaim_a_worker()
    output = _finish(process)
    trials = json.loads(summary.read_text())
    assert len(trials) == 4
    for trial in trials:  # every trial ran all its steps
        assert trial["error"] is None and trial["last_step"] == steps - 1, trial
    lost = [t for t in trials if killed_ip in t["nodes"]]
    assert lost, f"no trial ran on the reclaimed worker {killed_ip}: {trials}"
    for trial in lost:  # resumed from a checkpoint on another node, not from step 0
        assert trial["resumed_from"] and min(trial["resumed_from"]) > 0, trial
        assert set(trial["nodes"]) - {killed_ip}, trial
    assert "Terminated" in output  # --stop took the cluster down
    _assert_no_cluster_left()


def test_a_ray_train_run_restarts_its_workers_from_the_last_checkpoint(
    example_cluster: Path, tmp_path: Path
) -> None:
    """With a reclaim notice, as clouds give before taking a spot machine: the replacement
    is up before the node goes."""
    storage, summary = tmp_path / "results", tmp_path / "summary.json"
    # Enough epochs that the run is still training when the reclaimed node's Ray is stopped
    # (5 s after the notice; an epoch takes ~2 s here: the second checkpoint is epoch 5 of
    # 20, so ~28 s are left); every epoch after the restart is time and no further check.
    epochs = 20
    process = start(
        "submit", str(CLUSTER), str(REPO / "examples" / "train_run.py"),
        "--start", "--stop", "--epochs", str(epochs), "--storage-path", str(storage),
        "--summary", str(summary),
    )  # fmt: skip
    # Two workers of 2 CPUs: one on each spot worker, so the reclaimed one held one of them.
    wait_for(
        lambda: len(_checkpoints(storage, "train-run/checkpoint_2*")) >= 2,
        300,
        "the run's second checkpoint",
    )
    killed_id, killed_ip = _reclaim_a_worker("--notice", "15")
    monitor = ""

    def replaced() -> bool:
        nonlocal monitor
        monitor = run("monitor", "--no-follow", str(CLUSTER), timeout=60).stdout
        return f"terminate {killed_id}: preempted" in monitor

    wait_for(replaced, 60, "the autoscaler to see the reclaimed worker gone")
    _finish(process)
    # The notice was acted on: the fallback launched and set up before the node was taken.
    lines = monitor.splitlines()
    notice = next(
        i for i, line in enumerate(lines) if f"{killed_id} (spot): reclaim notice" in line
    )
    taken = next(i for i, line in enumerate(lines) if f"terminate {killed_id}: preempted" in line)
    ready = [
        i for i, line in enumerate(lines) if re.search(r"w-\w+: up to date", line) and i > notice
    ]
    assert ready and ready[0] < taken, monitor
    assert any("launch 1 x on-demand" in line for line in lines[notice:taken]), monitor
    result = json.loads(summary.read_text())
    assert result["error"] is None and result["last_epoch"] == epochs - 1, result
    first, *restarts = result["starts"]
    assert first["epoch"] == 0
    assert restarts, f"training never restarted after {killed_ip} was reclaimed: {result}"
    assert restarts[0]["epoch"] > 0, result  # from the checkpoint, not from the start
    assert restarts[0]["time"] > first["time"]
    _assert_no_cluster_left()


DASHBOARD_HEAD = (
    "head_start_ray_commands:\n"
    "  - >-\n"
    "    ray start --head --node-ip-address=$LAUNCHER_NODE_IP --port=$LAUNCHER_RAY_PORT\n"
    "    --ray-client-server-port=$LAUNCHER_CLIENT_PORT --dashboard-port=$LAUNCHER_DASHBOARD_PORT\n"
    "    --dashboard-agent-listen-port=$LAUNCHER_AGENT_PORT --include-dashboard=true\n"
    "    --temp-dir=$LAUNCHER_TEMP_DIR --disable-usage-stats\n"
)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_dashboard_is_forwarded_and_a_worker_whose_ray_is_killed_is_replaced(
    launcher_home: Path, tmp_path: Path
) -> None:
    name = "tdashboard"
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config(name, extra=DASHBOARD_HEAD))
    try:
        up = run("up", "-y", str(path), timeout=240)
        assert up.returncode == 0, up.stderr
        port = _free_port()
        forward = start("dashboard", str(path), "--port", str(port))
        assert forward.stdout is not None
        line = forward.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=30) as got:
            assert got.status == 200 and "ray_version" in json.loads(got.read())
        forward.send_signal(signal.SIGINT)
        rest, _ = forward.communicate(timeout=60)
        assert forward.returncode == 0 and "Stopped forwarding" in rest, rest

        (before,) = [n for n in status(path)["nodes"] if n["kind"] == "worker"]
        killed = run("kill-random-node", str(path), "-y", timeout=120)
        assert killed.returncode == 0, killed.stderr
        assert f"Stopped Ray on worker {before['id']}" in killed.stdout, killed.stdout

        def replaced() -> bool:
            workers = [n for n in status(path)["nodes"] if n["kind"] == "worker"]
            return [w["status"] for w in workers] == ["up-to-date"] and workers[0]["id"] != (
                before["id"]
            )

        wait_for(replaced, 180, "the worker to be replaced")
    finally:
        run("down", "-y", str(path), timeout=120)
        kill_cluster(name)


def test_the_verbs_say_so_in_one_line_when_the_cluster_is_not_running(
    launcher_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config("tnotrunning"))
    for verb in (["kill-random-node", "-y"], ["kill-random-node", "--hard", "-y"], ["dashboard"]):
        result = run(*verb, str(path), timeout=60)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [
            f"error: cluster tnotrunning is not running; start it with `launcher up {path}`"
        ], result.stderr
