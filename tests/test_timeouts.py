"""Nothing the updater runs waits for ever (issue 25, part 4): setup commands stop at
`command_timeout_s`, Ray start commands at `ray_start_timeout_s` (naming the head address
they tried), a long silence is said, and a stopped command's processes are gone.

The local-process runner and the localhost provider's nodes (no Ray cluster is started); one
test runs a real `ray start --address` against a port where nothing listens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.cluster.head import connect
from launcher.cluster.lifecycle import wait_for_min_workers, worker_failure
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NodeUpdateError
from launcher.events import Event, Message, NodeProgress, ignore
from launcher.paths import node_log
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeStatus
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.runners.local import LocalProcessRunner
from launcher.updater.updater import FAILED_LINE, UPDATING_LINE, NodeUpdater, UpdateOptions

RAY = str(Path(sys.executable).parent / "ray")


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process `pid` has ended (or is a zombie) within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# -- the local-process runner -------------------------------------------------------------


def test_local_timeout_kills_the_command_tree(tmp_path: Path) -> None:
    runner = LocalProcessRunner(tmp_path, {}, tmp_path / "node.log")
    result = runner.run("sleep 300 & echo $! > pid; wait", timeout=0.5)
    pid = int((tmp_path / "pid").read_text())
    try:
        assert result.timed_out and result.exit_code == 124
        assert _gone(pid)
    finally:
        _kill(pid)


def test_local_timeout_is_not_held_up_by_a_process_that_keeps_the_output_open(
    tmp_path: Path,
) -> None:
    """A process that left the command's process group (a daemon) and still holds its
    output open: the runner waited for it to close the pipe, long past the timeout."""
    runner = LocalProcessRunner(tmp_path, {}, tmp_path / "node.log")
    started = time.monotonic()
    result = runner.run("setsid sleep 60 & echo $! > pid; sleep 60", timeout=0.5)
    pid = int((tmp_path / "pid").read_text())
    try:
        assert result.timed_out
        assert time.monotonic() - started < 30  # was 60 s: until the daemon ended
    finally:
        _kill(pid)


# -- the updater, on localhost nodes ------------------------------------------------------


def _config(tmp_path: Path, launcher: str, min_workers: int = 0, **commands: str) -> ClusterConfig:
    lines = [
        "cluster_name: bounded",
        "provider: {type: localhost}",
        "available_node_types:",
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}",
        f"  worker: {{node_config: {{}}, resources: {{CPU: 1}}, min_workers: {min_workers}, "
        "max_workers: 1}",
        "head_node_type: head",
        f"metadata: {{launcher: {{{launcher}}}}}",
        *(f"{key}: [{value!r}]" for key, value in commands.items()),
    ]
    return parse_config("\n".join(lines) + "\n", str(tmp_path / "bounded.yaml"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class Cluster:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.provider = LocalhostProvider(config)
        self.provider.bootstrap()
        self.head = self._create("head", NodeKind.HEAD)
        self.worker = self._create("worker", NodeKind.WORKER)
        self.events: list[Event] = []

    def _create(self, type_name: str, kind: NodeKind) -> Node:
        made = self.provider.create_nodes(self.config.node_types[type_name], kind, 1, {})
        return made[0]

    def update_worker(self) -> NodeUpdater:
        options = UpdateOptions(cwd=Path.cwd(), ready_timeout_s=10)
        updater = NodeUpdater(
            self.provider, self.config, self.worker, self.head, options, self.events.append
        )
        updater.run()
        return updater

    def worker_status(self) -> NodeStatus:
        return next(n for n in self.provider.nodes() if n.id == self.worker.id).status

    def close(self) -> None:
        self.provider.terminate_nodes([self.head.id, self.worker.id])


@pytest.fixture
def cluster_of(home: Path) -> Iterator[type[Cluster]]:
    made: list[Cluster] = []

    class Tracked(Cluster):
        def __init__(self, config: ClusterConfig) -> None:
            super().__init__(config)
            made.append(self)

    yield Tracked
    for cluster in made:
        cluster.close()


def test_a_setup_command_past_command_timeout_s_is_stopped_and_reported(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    config = _config(
        tmp_path,
        "command_timeout_s: 1",
        setup_commands="sleep 300 & echo $! > ~/pid; wait",
        worker_start_ray_commands="true",
    )
    cluster = cluster_of(config)
    started = time.monotonic()
    with pytest.raises(NodeUpdateError) as caught:
        cluster.update_worker()
    assert time.monotonic() - started < 60
    log = node_log(config.cluster_name, cluster.worker.id)
    error = caught.value
    assert (error.node_id, error.stage, error.log_path) == (
        cluster.worker.id,
        "running setup commands",
        str(log),
    )
    assert "did not finish within 1 s (metadata.launcher.command_timeout_s)" in str(error)
    assert str(log) in str(error) and cluster.worker.id in str(error)
    pid = int((cluster.provider.nodes_dir / cluster.worker.id / "home" / "pid").read_text())
    try:
        assert _gone(pid)
    finally:
        _kill(pid)
    assert cluster.worker_status() is NodeStatus.FAILED
    last = log.read_text().splitlines()[-1]
    assert last.startswith(FAILED_LINE + "running setup commands: `sleep 300")
    failed = [e for e in cluster.events if isinstance(e, NodeProgress) and e.failed]
    assert failed and failed[-1].stage == "failed while running setup commands"


def test_a_silent_command_is_said_once_in_its_log_and_to_the_user(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    config = _config(
        tmp_path,
        "silence_warning_s: 0.3",
        setup_commands="echo starting; sleep 1.5; echo done",
        worker_start_ray_commands="true",
    )
    cluster = cluster_of(config)
    cluster.update_worker()  # no bound on setup commands by default: it finishes
    warnings = [e for e in cluster.events if isinstance(e, Message) and e.level == "warning"]
    assert len(warnings) == 1, warnings
    text = warnings[0].text
    log = node_log(config.cluster_name, cluster.worker.id)
    assert cluster.worker.id in text and "running setup commands" in text
    assert "has printed nothing for 0.3 s" in text and str(log) in text
    lines = log.read_text().splitlines()
    said = [n for n, line in enumerate(lines) if "has printed nothing" in line]
    assert len(said) == 1 and lines.index("starting") < said[0] < lines.index("done")
    assert cluster.worker_status() is NodeStatus.UP_TO_DATE


def _dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: nothing listens there


def test_ray_start_to_a_head_without_ray_fails_within_the_bound_naming_the_address(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    """A real `ray start --address` to a port where no GCS listens waits for ever (it was
    seen in "starting ray" for over 7 minutes)."""
    port = _dead_port()
    start = (
        f"{RAY} start --address=$RAY_HEAD_IP:{port} --node-ip-address=$LAUNCHER_NODE_IP "
        "--disable-usage-stats & echo $! > ~/pid; wait"
    )
    config = _config(tmp_path, "ray_start_timeout_s: 6", worker_start_ray_commands=start)
    cluster = cluster_of(config)
    started = time.monotonic()
    with pytest.raises(NodeUpdateError) as caught:
        cluster.update_worker()
    assert time.monotonic() - started < 90
    address = f"{cluster.head.ip}:{port}"
    message = str(caught.value)
    assert caught.value.stage == "starting Ray"
    assert f"Ray did not join the head at {address} within 6 s" in message
    assert "metadata.launcher.ray_start_timeout_s" in message
    pid = int((cluster.provider.nodes_dir / cluster.worker.id / "home" / "pid").read_text())
    try:
        assert _gone(pid)  # the `ray start` process
    finally:
        _kill(pid)
    assert cluster.worker_status() is NodeStatus.FAILED


def test_up_ends_at_a_failed_worker_naming_it_its_stage_and_log(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    """`up` waited for min_workers until its own limit (600 s) and then said only that the
    workers were not ready. Now the first failure is a warning (the autoscaler replaces the
    worker), and the replacement failing too ends the wait with its line."""
    config = _config(
        tmp_path,
        "ray_start_timeout_s: 30",
        min_workers=1,
        worker_start_ray_commands="echo cannot reach the GCS; exit 1",
    )
    cluster = cluster_of(config)
    first = cluster.worker
    with pytest.raises(NodeUpdateError):
        cluster.update_worker()  # as the autoscaler on the head does
    cluster.worker = cluster._create("worker", NodeKind.WORKER)  # its replacement
    with pytest.raises(NodeUpdateError):
        cluster.update_worker()
    session = connect(config, cluster.provider, cluster.head, any_status=True)
    started = time.monotonic()
    said: list[Event] = []
    try:
        with pytest.raises(LauncherError) as caught:
            wait_for_min_workers(
                cluster.provider,
                config,
                said.append,
                60,
                None,
                functools.partial(worker_failure, session),
            )
    finally:
        cluster.provider.terminate_nodes([first.id])
    assert time.monotonic() - started < 30
    warned = [e.text for e in said if isinstance(e, Message) and e.level == "warning"]
    assert len(warned) == 1 and warned[0].startswith(f"worker {first.id} (worker) failed while")
    message = str(caught.value)
    log = node_log(config.cluster_name, cluster.worker.id)
    assert message.startswith(f"worker {cluster.worker.id} (worker) failed while starting Ray: ")
    assert message.endswith("(2 workers of type worker failed)")
    assert "`echo cannot reach the GCS; exit 1` exited with 1: cannot reach the GCS" in message
    assert f"full log: {log}" in message and "launcher monitor" in message
    assert "\n" not in message


def test_a_failed_worker_the_autoscaler_already_removed_still_ends_up(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    """The autoscaler terminates a failed worker on its next tick: `up`, looking a moment
    later, saw only that it was gone, and waited on, saying only 'workers not ready'. Now it
    says the failure, and names it when the wait ends."""
    config = _config(tmp_path, "", min_workers=1, worker_start_ray_commands="echo no head; exit 1")
    cluster = cluster_of(config)
    with pytest.raises(NodeUpdateError):
        cluster.update_worker()
    as_seen = dataclasses.replace(cluster.worker, tags={TAG_STATUS: NodeStatus.STARTING_RAY})
    cluster.provider.terminate_nodes([cluster.worker.id])  # as the autoscaler does
    session = connect(config, cluster.provider, cluster.head, any_status=True)
    why = functools.partial(worker_failure, session)
    said: list[Event] = []
    with pytest.raises(LauncherError) as caught:
        wait_for_min_workers(cluster.provider, config, said.append, 2, [as_seen, cluster.head], why)
    (warned,) = [e.text for e in said if isinstance(e, Message) and e.level == "warning"]
    assert warned.startswith(f"worker {cluster.worker.id} (worker) failed while ")
    assert "`echo no head; exit 1` exited with 1: no head" in warned
    assert str(caught.value).startswith("workers not ready after 2 s (0 of 1); the last failure: ")
    assert warned in str(caught.value)


def test_a_worker_that_vanished_without_failing_is_waited_for(
    tmp_path: Path, cluster_of: type[Cluster]
) -> None:
    """A worker preempted during its setup is not a failure: its log ends mid-update."""
    config = _config(tmp_path, "", min_workers=1, worker_start_ray_commands="true")
    cluster = cluster_of(config)
    cluster.update_worker()
    log = node_log(config.cluster_name, cluster.worker.id)
    with log.open("a") as lines:
        lines.write(f"{UPDATING_LINE}{cluster.worker.id}\n$ sleep 1000\n")  # cut short
    as_seen = dataclasses.replace(cluster.worker, tags={TAG_STATUS: NodeStatus.SETTING_UP})
    cluster.provider.terminate_nodes([cluster.worker.id])
    session = connect(config, cluster.provider, cluster.head, any_status=True)
    why = functools.partial(worker_failure, session)
    with pytest.raises(LauncherError, match="workers not ready after 1 s"):
        wait_for_min_workers(cluster.provider, config, ignore, 1, [as_seen, cluster.head], why)
