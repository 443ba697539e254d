"""Real Ray clusters on this machine: the lifecycle and its reliability guarantees."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.paths import cluster_dir
from launcher.providers.localhost.processes import snapshot
from tests.cluster_helpers import (
    cluster_config,
    interrupt,
    key_of,
    kill_cluster,
    leftover_processes,
    run,
    start,
    status,
    temp_dir_of,
    wait_for,
)


@pytest.fixture
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    return home


@pytest.fixture
def cluster(
    tmp_path: Path, launcher_home: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Path]]:
    name = "t" + request.node.name.replace("_", "-")[5:30].strip("-")
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config(name, extra="setup_commands: [echo ran >> ~/setup-count]\n"))
    yield name, path
    run("down", "-y", str(path), timeout=120)
    kill_cluster(name)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One cluster, up, shared by the tests that need a running cluster and leave it
    running: a worker replaced, the head's commands, a config change restarting the
    autoscaler (last: it changes the file). Each brought its own up and down (~8 s)."""
    tmp = tmp_path_factory.mktemp("running")
    name, path = "trunning", tmp / "cluster.yaml"
    path.write_text(cluster_config(name, extra="setup_commands: [echo ran >> ~/setup-count]\n"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        try:
            up = run("up", "-y", str(path))
            assert up.returncode == 0, up.stdout + up.stderr
            yield name, path
        finally:
            run("down", "-y", str(path), timeout=120)
            kill_cluster(name)


def _setup_count(name: str, node_id: str) -> int:
    count = cluster_dir(name) / "localhost" / "nodes" / node_id / "home" / "setup-count"
    return len(count.read_text().splitlines()) if count.exists() else 0


def _assert_gone(name: str) -> None:
    wait_for(lambda: not leftover_processes(name), 20, f"processes of {name} to exit")
    assert not cluster_dir(name).exists()
    assert not Path(temp_dir_of(name)).exists()


def test_up_twice_makes_one_head_and_reruns_no_setup(cluster: tuple[str, Path]) -> None:
    name, path = cluster
    first = run("up", "-y", str(path))
    assert first.returncode == 0, first.stderr
    assert "is up" in first.stdout
    second = run("up", "-y", str(path))
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stderr
    nodes = status(path)["nodes"]
    heads = [n for n in nodes if n["kind"] == "head"]
    workers = [n for n in nodes if n["kind"] == "worker"]
    assert len(heads) == 1 and len(workers) == 1
    assert all(n["status"] == "up-to-date" and n["state"] == "running" for n in nodes)
    assert _setup_count(name, heads[0]["id"]) == 1
    assert _setup_count(name, workers[0]["id"]) == 1
    # Ray sees both nodes with the declared resources.
    probe = run(
        "exec",
        str(path),
        "python -c 'import ray; ray.init(); print(int(ray.cluster_resources()[\"CPU\"]))'",
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert probe.stdout.strip().splitlines()[-1] == "4"


def test_interrupted_up_converges_and_down_leaves_nothing(cluster: tuple[str, Path]) -> None:
    name, path = cluster
    process = start("up", "-y", str(path))
    nodes_dir = cluster_dir(name) / "localhost" / "nodes"
    wait_for(lambda: nodes_dir.is_dir() and any(nodes_dir.iterdir()), 60, "the head to be created")
    time.sleep(1.0)  # in the middle of setting up the head
    assert interrupt(process) != 0
    again = run("up", "-y", str(path))
    assert again.returncode == 0, again.stderr
    nodes = status(path)["nodes"]
    assert [n["kind"] for n in nodes].count("head") == 1
    assert all(n["status"] == "up-to-date" for n in nodes)
    down = run("down", "-y", str(path))
    assert down.returncode == 0, down.stderr
    _assert_gone(name)


def test_two_ups_at_once_never_make_two_heads(cluster: tuple[str, Path]) -> None:
    _name, path = cluster
    first, second = start("up", "-y", str(path)), start("up", "-y", str(path))
    outputs = [p.communicate(timeout=240)[0] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    assert any("busy" in out for out in outputs)  # one waited for the other, and said so
    assert [n["kind"] for n in status(path)["nodes"]].count("head") == 1


def test_killed_worker_is_replaced(running: tuple[str, Path]) -> None:
    name, path = running
    worker = next(n for n in status(path)["nodes"] if n["kind"] == "worker")
    raylet = next(
        p for p in snapshot() if p.tagged(key_of(name), worker["id"]) and "raylet" in p.command
    )
    os.kill(raylet.pid, signal.SIGKILL)

    def replaced() -> bool:
        workers = [n for n in status(path)["nodes"] if n["kind"] == "worker"]
        return (
            len(workers) == 1
            and workers[0]["id"] != worker["id"]
            and workers[0]["status"] == "up-to-date"
        )

    wait_for(replaced, 90, "the autoscaler to replace the killed worker")
    log = run("monitor", "--no-follow", str(path)).stdout
    assert f"terminate {worker['id']}: Ray on it stopped" in log


def test_down_finds_processes_whose_state_was_lost(cluster: tuple[str, Path]) -> None:
    name, path = cluster
    assert run("up", "-y", str(path)).returncode == 0
    assert leftover_processes(name)
    # The state directory is lost (the autoscaler may write a file there meanwhile).
    shutil.rmtree(cluster_dir(name), ignore_errors=True)
    down = run("down", "-y", str(path))
    assert down.returncode == 0, down.stderr
    assert "leftover process" in down.stdout
    _assert_gone(name)


def test_submit_start_stop_returns_the_script_exit_code(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    name, path = cluster
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, ray\nray.init()\n"
        "print('cpus', int(ray.cluster_resources()['CPU']), 'args', sys.argv[1:])\n"
        "sys.exit(3)\n"
    )
    result = run("submit", "--start", "--stop", str(path), str(script), "a", "--b")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "cpus 4 args ['a', '--b']" in result.stdout
    _assert_gone(name)


def test_submit_interrupted_still_tears_down(cluster: tuple[str, Path], tmp_path: Path) -> None:
    name, path = cluster
    script = tmp_path / "long.py"
    script.write_text("import time\nprint('script-started', flush=True)\ntime.sleep(300)\n")
    process = start("submit", "--start", "--stop", str(path), str(script))
    assert process.stdout is not None
    for line in process.stdout:
        if "script-started" in line:
            break
    code = interrupt(process)
    assert code == 130
    _assert_gone(name)


def test_head_commands(running: tuple[str, Path], tmp_path: Path) -> None:
    name, path = running
    up = run("up", "-y", "--json", "--log-style", "record", str(path))
    assert up.returncode == 0, up.stderr
    summary = json.loads(up.stdout)
    head_ip = run("get-head-ip", str(path)).stdout.strip()
    assert head_ip.startswith("127.0.0.") and head_ip != "127.0.0.1"
    assert summary["cluster"] == name and summary["head"]["ip"] == head_ip
    assert json.loads(run("get-head-ip", "--json", str(path)).stdout) == {"head_ip": head_ip}
    workers = run("get-worker-ips", str(path)).stdout.split()
    assert len(workers) == 1 and workers[0] != head_ip
    listed = json.loads(run("get-worker-ips", "--json", str(path)).stdout)
    assert listed == {"worker_ips": workers}
    # Ray's flags: a command on the head's host; a file to every node.
    on_host = run("exec", "--run-env", "host", str(path), "echo here")
    assert on_host.returncode == 0 and on_host.stdout.strip().endswith("here")
    everywhere = tmp_path / "everywhere.txt"
    everywhere.write_text("all nodes")
    copied = run("rsync-up", "-A", str(path), str(everywhere), "~/everywhere.txt")
    assert copied.returncode == 0, copied.stderr
    assert "copied to the head and 1 worker(s)" in copied.stdout
    # Ray's logs of the head, then of the worker, as tail shows them.
    shown = run("logs", str(path), "--file", "raylet*", "--lines", "3")
    assert shown.returncode == 0, shown.stderr
    assert "==> raylet.out <==" in shown.stdout
    of_worker = run(
        "logs", str(path), "--node-ip", workers[0], "--file", "raylet.out", "--lines", "100000"
    )
    assert of_worker.returncode == 0
    assert f"node_manager address: {workers[0]}:" in of_worker.stdout
    bad = run("logs", str(path), "--file", "a;b")
    assert bad.returncode != 0 and "--file 'a;b'" in bad.stderr
    result = run("exec", str(path), "echo $RAY_ADDRESS; exit 7")
    assert result.returncode == 7
    assert result.stdout.strip().startswith(head_ip + ":")
    local = tmp_path / "data"
    local.mkdir()
    (local / "a.txt").write_text("hello")
    assert run("rsync-up", str(path), str(local) + "/", "~/data/").returncode == 0
    assert run("exec", str(path), "cat ~/data/a.txt").stdout.strip() == "hello"
    back = tmp_path / "back"
    assert run("rsync-down", str(path), "~/data/", str(back) + "/").returncode == 0
    assert (back / "a.txt").read_text() == "hello"
    monitor = run("monitor", "--no-follow", "--lines", "50", str(path))
    assert "autoscaler for cluster" in monitor.stdout
    table = run("status", str(path))
    assert "autoscaler running" in table.stdout and "up-to-date" in table.stdout


def test_changed_file_mount_reruns_setup(tmp_path: Path, launcher_home: Path) -> None:
    name = "tmounts"
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "f.txt").write_text("one")
    path = tmp_path / "cluster.yaml"
    path.write_text(
        cluster_config(
            name,
            min_workers=0,
            extra=(
                f"file_mounts: {{~/mounted: {mount}}}\n"
                "setup_commands: [cat ~/mounted/f.txt >> ~/setup-count]\n"
            ),
        )
    )
    try:
        assert run("up", "-y", str(path)).returncode == 0
        head = status(path)["nodes"][0]["id"]
        assert _setup_count(name, head) == 1
        (mount / "f.txt").write_text("two")
        assert run("up", "-y", str(path)).returncode == 0
        counted = cluster_dir(name) / "localhost" / "nodes" / head / "home" / "setup-count"
        assert counted.read_text() == "onetwo"
        assert run("up", "-y", "--restart-only", str(path)).returncode == 0
        assert counted.read_text() == "onetwo"  # --restart-only runs no setup
    finally:
        run("down", "-y", str(path))
        kill_cluster(name)


def test_up_refuses_containers_without_a_working_engine_and_creates_nothing(
    tmp_path: Path, launcher_home: Path
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config("tdocker", extra="docker: {image: rayproject/ray:2.60.0}\n"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bare = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}"}  # no engine
    result = run("up", "-y", str(path), env=bare)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "docker is not installed here" in line and "remove the docker section" in line
    assert not cluster_dir("tdocker").exists()
    # A docker client whose daemon does not answer (as on this project's test machines).
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    result = run("up", "-y", str(path), env=bare)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "`docker version` fails here (Cannot connect to the Docker daemon)" in line
    assert not cluster_dir("tdocker").exists()


def test_commands_on_a_cluster_that_is_not_up(tmp_path: Path, launcher_home: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config("tnone"))
    result = run("exec", str(path), "true")
    assert result.returncode == 1
    assert "is not running; start it with `launcher up" in result.stderr
    assert run("down", "-y", str(path)).stdout.strip() == "Nothing to take down."


def test_several_workers_start_at_once(tmp_path: Path, launcher_home: Path) -> None:
    # Concurrent `ray start`s on one machine race in Ray; the provider serialises them, so
    # no worker fails setup and is replaced (which would show in the autoscaler's log).
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config("tthree", min_workers=3))
    try:
        result = run("up", "-y", str(path))
        assert result.returncode == 0, result.stderr
        workers = [n for n in status(path)["nodes"] if n["kind"] == "worker"]
        assert len(workers) == 3 and len({n["ip"] for n in workers}) == 3
        assert "failed" not in run("monitor", "--no-follow", str(path)).stdout
    finally:
        run("down", "-y", str(path))
        kill_cluster("tthree")


def test_config_change_restarts_the_autoscaler_and_port_forward_works(
    running: tuple[str, Path], tmp_path: Path
) -> None:
    _name, path = running
    assert run("up", "-y", str(path)).returncode == 0
    path.write_text(path.read_text().replace("idle_timeout_minutes: 1", "idle_timeout_minutes: 2"))
    again = run("up", "-y", str(path))
    assert again.returncode == 0
    assert "autoscaler restarted" in again.stderr
    log = run("monitor", "--no-follow", str(path)).stdout
    assert log.count("autoscaler for cluster") == 2
    # -p: a port on this machine's 127.0.0.1 reaches the head while the command runs.

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = (
        "python -c \"import socket,os; s=socket.create_server((os.environ['LAUNCHER_NODE_IP'], "
        f"{port})); print('listening', flush=True); c,_=s.accept(); c.sendall(b'hello from head')\""
    )
    process = start("exec", "-p", str(port), str(path), server)
    assert process.stdout is not None
    for line in process.stdout:
        if "listening" in line:
            break
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        assert client.recv(100) == b"hello from head"
    assert process.wait(timeout=30) == 0
