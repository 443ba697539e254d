"""The pure parts of bounding what runs on nodes: which bound a step gets, the head address a
`ray start` joins, the failure line, when a silence is said, and the process-id report a
remote command gives before its output."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.cluster.head import HeadSession
from launcher.cluster.lifecycle import wait_for_min_workers, worker_failure
from launcher.config.loader import parse_config
from launcher.events import Event, Message
from launcher.providers.base import (
    TAG_STATUS,
    Node,
    NodeKind,
    NodeState,
    NodeStatus,
    ProviderTraits,
)
from launcher.runners.base import CommandResult
from launcher.runners.local import LocalProcessRunner
from launcher.runners.shell import PID_MARK, PidReport, reporting_pid
from launcher.updater.bounds import (
    MIN_TIMEOUT_S,
    Bound,
    command_problem,
    joins_address,
    ray_start_bound,
    setup_bound,
)
from launcher.updater.silence import next_check_s, silence_due
from launcher.updater.updater import FAILED_LINE, UPDATING_LINE

BASE = (
    "cluster_name: c\nprovider: {type: localhost}\n"
    "available_node_types: {head: {node_config: {}, resources: {}, max_workers: 0}}\n"
    "head_node_type: head\n"
)


def test_setup_is_unbounded_by_default_and_ray_start_is_bounded_as_a_whole() -> None:
    config = parse_config(BASE, "c.yaml")
    assert setup_bound(config) == Bound(None, "metadata.launcher.command_timeout_s")
    assert setup_bound(config, 7).timeout_s == 7  # the caller's own limit wins
    start = ray_start_bound(config)
    assert (start.timeout_s, start.per_command) == (300, False)
    bounded = parse_config(
        BASE + "metadata: {launcher: {command_timeout_s: 60, ray_start_timeout_s: 20}}\n", "c"
    )
    assert setup_bound(bounded).timeout_s == 60
    whole = ray_start_bound(bounded)
    deadline = whole.deadline(100.0)
    assert deadline == 120.0
    assert whole.timeout_for_next(105.0, deadline) == 15.0  # what is left of the step
    assert whole.timeout_for_next(125.0, deadline) == MIN_TIMEOUT_S
    each = setup_bound(bounded)
    assert each.deadline(100.0) is None and each.timeout_for_next(500.0, None) == 60


@pytest.mark.parametrize(
    ("command", "joined"),
    [
        ("ray start --address=$RAY_HEAD_IP:6379 --block", "10.0.0.1:6379"),
        ("ulimit -n 65536; ray start --address ${RAY_HEAD_IP}:1234", "10.0.0.1:1234"),
        ("ray start --address=$UNKNOWN:6379", "$UNKNOWN:6379"),
        ("ray start --head --port=6379", None),
        ("ray stop", None),
        ("echo --address=x", None),
    ],
)
def test_the_head_address_a_ray_start_joins(command: str, joined: str | None) -> None:
    assert joins_address(command, {"RAY_HEAD_IP": "10.0.0.1"}) == joined


def test_failure_lines() -> None:
    start = Bound(30, "metadata.launcher.ray_start_timeout_s", per_command=False)
    stopped = CommandResult(124, "(stopped after 30 s)", timed_out=True)
    assert command_problem("ray start --address=h:1", stopped, start, "h:1") == (
        "Ray did not join the head at h:1 within 30 s (metadata.launcher.ray_start_timeout_s); "
        "`ray start --address=h:1` was stopped. Check that Ray runs on the head and that this "
        "node reaches that address"
    )
    setup = Bound(5, "metadata.launcher.command_timeout_s")
    assert command_problem("pip install x", stopped, setup, None) == (
        "`pip install x` did not finish within 5 s (metadata.launcher.command_timeout_s) and "
        "was stopped"
    )
    exited = CommandResult(1, "connecting\nno GCS at h:1\n")
    assert command_problem("ray start --address=h:1", exited, start, "h:1") == (
        "`ray start --address=h:1` exited with 1 (joining the head at h:1): no GCS at h:1"
    )
    # A command's own exit code 124 is not a timeout.
    assert "exited with 124" in command_problem("x", CommandResult(124, ""), setup, None)


def test_a_silence_is_said_once_until_output_comes_again() -> None:
    assert not silence_due(last_output=0, now=9.9, after_s=10, warned=False)
    assert silence_due(last_output=0, now=10, after_s=10, warned=False)
    assert not silence_due(last_output=0, now=50, after_s=10, warned=True)
    assert next_check_s(last_output=0, now=4, after_s=10, warned=False) == 6
    assert next_check_s(last_output=0, now=50, after_s=10, warned=True) == 10


def test_the_process_report_is_found_after_what_an_rc_file_printed() -> None:
    report = PidReport()
    data = b"welcome from .bashrc\n" + PID_MARK + b"4242\nfirst\nsecond"
    out = b"".join(report.feed(data[i : i + 5]) for i in range(0, len(data), 5))
    assert (report.reported, report.pid) == (True, 4242)
    assert out + report.finish() == b"welcome from .bashrc\nfirst\nsecond"


@pytest.mark.parametrize("setsid", [None, True, False])
def test_a_command_reports_its_pid_and_whether_it_has_a_session_of_its_own(
    setsid: bool | None,
) -> None:
    """The first command of a runner asks the node whether setsid -w works (None); the
    runner then starts the next ones the way the report said, without asking."""
    if setsid is not False and shutil.which("setsid") is None:
        pytest.skip("setsid (util-linux) is not installed here")
    argv = reporting_pid(["sh", "-c", "echo pgid $(ps -o pgid= -p $$)"], setsid)
    ran = subprocess.run(argv, capture_output=True, check=True)
    report = PidReport()
    out = report.feed(ran.stdout) + report.finish()
    assert report.reported and report.pid is not None
    assert report.in_session is (setsid is not False)  # this machine has setsid
    group = int(out.split()[1])
    assert (group == report.pid) is (setsid is not False)  # a session (and group) of its own
    if setsid is not None:
        assert "setsid -w true" not in " ".join(argv)  # no probe once known


def test_a_report_without_the_session_word_still_gives_the_pid() -> None:
    report = PidReport()
    assert report.feed(PID_MARK + b"77\nrest") == b"rest"
    assert (report.pid, report.in_session) == (77, None)
    other = PidReport()
    assert other.feed(PID_MARK + b"78 s\n") == b""
    assert (other.pid, other.in_session) == (78, True)


def test_output_without_a_report_is_all_passed_on() -> None:
    report = PidReport()
    out = report.feed(b"one\ntwo\npart")
    assert out == b"one\ntwo\n" and out + report.finish() == b"one\ntwo\npart"
    assert (report.reported, report.pid) == (False, None)


def test_a_workers_failure_is_read_from_its_log_on_a_remote_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the autoscaler runs on the head (a machine of its own), the worker's log is
    there, under the head's ~/.launcher: read through the head's runner (here a local one
    whose home stands for the head's)."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "here"))
    head_home = tmp_path / "head-home"
    log = head_home / ".launcher" / "clusters" / "c" / "logs" / "10.0.0.5.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        f"{UPDATING_LINE}10.0.0.5\n$ ray start\n"
        f"{FAILED_LINE}starting Ray: Ray did not join the head at 10.0.0.4:6379\n"
        "$ ray stop --force\n"  # what removing the node ran after
    )
    runner = LocalProcessRunner(head_home, {}, tmp_path / "head.log")
    config = parse_config(BASE, "c.yaml")
    provider = SimpleNamespace(traits=ProviderTraits(installs_launcher_on_head=True))
    head = Node("10.0.0.4", NodeKind.HEAD, "head", "10.0.0.4", NodeState.RUNNING)
    session = HeadSession(config, provider, head, runner, {}, runner)  # type: ignore[arg-type]
    worker = Node("10.0.0.5", NodeKind.WORKER, "gpu", "10.0.0.5", NodeState.RUNNING)
    assert worker_failure(session, worker, False) == (
        "worker 10.0.0.5 (gpu) failed while starting Ray: Ray did not join the head at "
        "10.0.0.4:6379 (log on the head: ~/.launcher/clusters/c/logs/10.0.0.5.log); the "
        "autoscaler replaces failed workers: follow it with `launcher monitor c.yaml`"
    )
    with log.open("a") as more:
        more.write(f"{UPDATING_LINE}10.0.0.5\n$ pip install x\n")  # set up again, cut short
    assert worker_failure(session, worker, False) is None
    assert "10.0.0.5 (gpu) failed its setup (log on the head:" in (
        worker_failure(session, worker, True) or ""
    )


def test_a_failed_workers_log_is_read_once_while_it_stays_listed() -> None:
    """`up` polls every 0.25 s; on a remote head each read of a worker's log is an SSH
    round trip, and a worker stays listed failed until the autoscaler removes it."""
    config = parse_config(
        "cluster_name: once\nprovider: {type: localhost}\navailable_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  worker: {node_config: {}, resources: {CPU: 1}, min_workers: 1, max_workers: 2}\n"
        "head_node_type: head\n",
        "once.yaml",
    )

    def worker(node_id: str, status: NodeStatus) -> Node:
        return Node(
            node_id, NodeKind.WORKER, "worker", "127.0.0.9", NodeState.RUNNING, {TAG_STATUS: status}
        )

    listings = [[worker("w-1", NodeStatus.FAILED)]] * 6 + [[worker("w-2", NodeStatus.UP_TO_DATE)]]
    provider = SimpleNamespace(workers=lambda: listings.pop(0))
    reads: list[str] = []

    def why(node: Node, tagged: bool) -> str:
        reads.append(node.id)
        return f"worker {node.id} (worker) failed while starting Ray: no head"

    said: list[Event] = []
    ready = wait_for_min_workers(provider, config, said.append, 60, None, why)  # type: ignore[arg-type]
    assert [n.id for n in ready] == ["w-2"]
    assert reads == ["w-1"]
    warned = [e.text for e in said if isinstance(e, Message)]
    assert warned == ["worker w-1 (worker) failed while starting Ray: no head"]
