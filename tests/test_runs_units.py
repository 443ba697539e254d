"""Recovering runs without a cluster: the run's record, the supervisor's decisions, what it
does when a head cannot be replaced, and `launcher jobs` / `submit --recover` input checks."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli.main import cli
from launcher.config.loader import Overrides, parse_config
from launcher.errors import LauncherError
from launcher.events import ignore
from launcher.paths import cluster_dir
from launcher.providers.access import NoAccess
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState, NodeStatus
from launcher.runners.base import CommandRunner
from launcher.runs import decide, recovery, store
from launcher.runs.model import LEASE_S, Attempt, AttemptEnd, Lease, Recovery, Run, RunState
from launcher.runs.supervisor import Supervisor
from launcher.testing import MemoryProvider

CONFIG = """
cluster_name: units
provider: {type: localhost}
available_node_types:
  head: {node_config: {simulated_spot: true}, resources: {CPU: 0}, max_workers: 0}
  head-od: {node_config: {}, resources: {CPU: 0}, max_workers: 0}
  worker: {node_config: {}, resources: {CPU: 2}, min_workers: 0, max_workers: 2}
head_node_type: head
metadata:
  launcher:
    fallbacks: {head: [head-od]}
    recover: {max_restarts_on_errors: 1, storage_path: /shared/results}
"""


@pytest.fixture(autouse=True)
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))
    return home


def _run(**changes: object) -> Run:
    base = Run(
        id="r-abc123",
        cluster_name="units",
        config_path="/x/cluster.yaml",
        script="train.py",
        args=("--steps", "4"),
        created_at=1000.0,
        storage_path="/shared/results",
        max_restarts_on_errors=0,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _node(state: NodeState, kind: NodeKind = NodeKind.HEAD) -> Node:
    return Node("h-1", kind, "head", "127.0.0.2", state)


# -- the record ---------------------------------------------------------------------------
def test_a_run_reads_back_as_it_was_written() -> None:
    run = _run(
        state=RunState.RECOVERING,
        attempts=(Attempt(1, "h-1", 1010.0, 1030.0, None, AttemptEnd.HEAD_LOST, 512),),
        recoveries=(Recovery("h-1", "preempted: taken back", 1031.0, phases={"ray_up": 4.5}),),
        supervisor=Lease("laptop", 42, 1032.0),
        updated_at=1032.0,
    )
    assert Run.from_json(run.to_json()) == run
    with pytest.raises(ValueError):
        Run.from_json('{"id": "r-1"}')
    with pytest.raises(ValueError):
        Run.from_json("[1, 2]")


def test_time_lost_counts_the_gaps_between_attempts_and_an_open_one() -> None:
    run = _run(
        attempts=(
            Attempt(1, "h-1", 100.0, 160.0, None, AttemptEnd.HEAD_LOST),
            Attempt(2, "h-2", 190.0, 300.0, None, AttemptEnd.HEAD_LOST),
        ),
        state=RunState.RECOVERING,
    )
    assert run.time_lost(now=320.0) == pytest.approx(30.0 + 20.0)
    ended = dataclasses.replace(run, state=RunState.FAILED)
    assert ended.time_lost(now=999.0) == pytest.approx(30.0)


def test_a_lease_lapses_with_its_heartbeat_or_its_process() -> None:
    mine = Lease.mine(2000.0)
    assert mine.is_mine() and mine.live(2000.0 + LEASE_S / 2)
    assert not mine.live(2000.0 + LEASE_S + 1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process
    gone = dataclasses.replace(mine, pid=child.pid)
    assert not gone.live(2000.0)
    assert dataclasses.replace(mine, host="elsewhere", pid=child.pid).live(2000.0)


def test_runs_are_kept_outside_the_cluster_directory(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    run = _run()
    store.keep_script(run, script)
    store.save(run)
    assert cluster_dir("units") not in store.run_dir("units", run.id).parents
    assert store.load("units", run.id) == run
    assert store.script_path(run).read_text() == "print('hi')\n"
    assert [r.id for r in store.local_runs("units")] == [run.id]
    assert store.load("units", "r-none") is None


# -- decisions ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "silent", "lost"),
    [
        (None, 0.0, True),
        (_node(NodeState.PREEMPTED), 0.0, True),
        (_node(NodeState.DEAD), 0.0, True),
        (_node(NodeState.STOPPED), 0.0, True),
        (_node(NodeState.RUNNING), 59.0, False),
        (_node(NodeState.RUNNING), 60.0, True),
        (_node(NodeState.PENDING), 0.0, False),
    ],
)
def test_when_a_head_counts_as_lost(head: Node | None, silent: float, lost: bool) -> None:
    assert (decide.head_lost(head, silent, 60.0) is not None) is lost


@pytest.mark.parametrize(
    ("code", "cancelled", "nodes_lost", "output", "end"),
    [
        (0, False, False, "", AttemptEnd.SUCCEEDED),
        (0, True, False, "", AttemptEnd.CANCELLED),
        (1, False, False, "ValueError: bad", AttemptEnd.USER_ERROR),
        (1, False, True, "ValueError: bad", AttemptEnd.NODE_LOST),
        (None, False, False, "", AttemptEnd.NODE_LOST),
        (1, False, False, "ray.exceptions.NodeDiedError: node x died", AttemptEnd.NODE_LOST),
        (1, False, False, "The actor died because its node has died.", AttemptEnd.NODE_LOST),
    ],
)
def test_how_an_attempt_ended(
    code: int | None, cancelled: bool, nodes_lost: bool, output: str, end: AttemptEnd
) -> None:
    assert decide.attempt_end(code, cancelled, nodes_lost, output) is end


def test_the_users_failure_is_restarted_only_as_often_as_allowed() -> None:
    one = (Attempt(1, "h-1", 1.0, 2.0, 3, AttemptEnd.USER_ERROR),)
    first = decide.after_attempt(_run(attempts=one), AttemptEnd.USER_ERROR, 3)
    assert not first.again and first.state is RunState.FAILED  # the default: 0 restarts
    assert "script's own failure" in first.why and "exited 3" in first.why
    allowed = _run(attempts=one, max_restarts_on_errors=2, restarts_on_errors=1)
    again = decide.after_attempt(allowed, AttemptEnd.USER_ERROR, 3)
    assert again.again and again.counts_as_error
    spent = dataclasses.replace(allowed, restarts_on_errors=2)
    assert not decide.after_attempt(spent, AttemptEnd.USER_ERROR, 3).again
    # A lost node is always recoverable, whatever the count.
    for end in (AttemptEnd.NODE_LOST, AttemptEnd.HEAD_LOST):
        lost = decide.after_attempt(spent, end, None)
        assert lost.again and not lost.counts_as_error


def test_a_driver_failing_as_if_a_node_were_lost_with_none_lost_is_not_restarted_for_ever() -> None:
    def ended(number: int, saw: bool) -> Attempt:
        return Attempt(number, "h-1", 1.0, 2.0, 1, AttemptEnd.NODE_LOST, saw_node_lost=saw)

    unexplained = tuple(ended(n, False) for n in range(1, decide.UNEXPLAINED_LOSSES + 1))
    assert decide.after_attempt(_run(attempts=unexplained), AttemptEnd.NODE_LOST, 1).again
    over = (*unexplained, ended(decide.UNEXPLAINED_LOSSES + 1, False))
    stop = decide.after_attempt(_run(attempts=over), AttemptEnd.NODE_LOST, 1)
    assert not stop.again and stop.state is RunState.FAILED and "no node was seen lost" in stop.why
    seen = (*unexplained, ended(decide.UNEXPLAINED_LOSSES + 1, True))  # a real loss: always
    assert decide.after_attempt(_run(attempts=seen), AttemptEnd.NODE_LOST, 1).again


def test_a_reclaimed_spot_head_comes_back_as_its_fallback_unless_told() -> None:
    assert decide.new_head_type("head", ("head-od",), preempted=True, same=False) == "head-od"
    assert decide.new_head_type("head", ("head-od",), preempted=True, same=True) == "head"
    assert decide.new_head_type("head", ("head-od",), preempted=False, same=False) == "head"
    assert decide.new_head_type("head", (), preempted=True, same=False) == "head"


def test_a_recovery_keeps_running_workers_only() -> None:
    def worker(node_id: str, state: NodeState, status: str) -> Node:
        tags = {"launcher-node-status": status}
        return Node(node_id, NodeKind.WORKER, "worker", "127.0.0.3", state, tags)

    nodes = [
        _node(NodeState.PREEMPTED),
        worker("w-up", NodeState.RUNNING, "up-to-date"),
        worker("w-dead-ray", NodeState.DEAD, "up-to-date"),
        worker("w-taken", NodeState.PREEMPTED, "up-to-date"),
        worker("w-failed", NodeState.RUNNING, "update-failed"),
    ]
    assert [n.id for n in recovery.adoptable(nodes)] == ["w-up", "w-dead-ray"]


# -- the supervisor when a head cannot come back ------------------------------------------
def _supervisor(tmp_path: Path) -> Supervisor:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    config = parse_config(CONFIG, str(path))
    said: list[str] = []
    run = _run(
        state=RunState.RECOVERING,
        config_path=str(path),
        attempts=(Attempt(1, "h-1", 1.0, 2.0, None, AttemptEnd.HEAD_LOST),),
        recoveries=(Recovery("h-1", "it is no longer listed", 2.0),),
    )
    supervisor = Supervisor(run, config, Overrides(), said.append, said.append, ignore)
    supervisor.said = said  # type: ignore[attr-defined]
    return supervisor


def test_a_head_that_cannot_be_replaced_ends_the_run_in_one_line_keeping_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = _supervisor(tmp_path)
    calls: list[float] = []

    def fails(*args: object, ready_timeout_s: float = 0.0, **kwargs: object) -> None:
        calls.append(ready_timeout_s)
        raise LauncherError("the head machine 10.0.0.5 did not answer over SSH within 60 s")

    monkeypatch.setattr(recovery, "replace_head", fails)
    traits = dataclasses.replace(supervisor.provider.traits, replaces_lost_head=False)
    monkeypatch.setattr(supervisor.provider, "traits", traits)
    ended = supervisor.supervise()
    assert ended.state is RunState.FAILED
    assert calls == [60.0]  # one try, with a short wait for the machine
    assert "\n" not in ended.message
    assert "cannot be replaced here" in ended.message and "did not answer" in ended.message
    assert "storage is kept at /shared/results" in ended.message
    assert store.load("units", ended.id) == ended and ended.supervisor is None


def test_a_recovery_records_the_new_head_its_type_and_the_kept_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = _supervisor(tmp_path)
    asked: list[str] = []

    def replaces(*args: object, **kwargs: object) -> recovery.Replaced:
        head_type = str(args[5])
        asked.append(head_type)
        phase = args[7]
        for name in ("old_head_gone", "head_launched", "ray_up"):
            phase(name)  # type: ignore[operator]
        new = Node("h-2", NodeKind.HEAD, head_type, "127.0.0.9", NodeState.RUNNING)
        return recovery.Replaced(new, ("w-1", "w-2"))

    monkeypatch.setattr(recovery, "replace_head", replaces)
    monkeypatch.setattr(
        Supervisor, "_start_attempt", lambda self: self._finish(RunState.SUCCEEDED, "done")
    )
    preempted = dataclasses.replace(
        supervisor.run, recoveries=(Recovery("h-1", "preempted: taken back", 2.0),)
    )
    supervisor.run = preempted
    ended = supervisor.supervise()
    assert asked == ["head-od"]
    (done,) = ended.recoveries
    assert done.new_head == "h-2" and done.new_head_type == "head-od"
    assert done.adopted == ("w-1", "w-2")
    assert list(done.phases) == ["old_head_gone", "head_launched", "ray_up"]


def _worker(node_id: str, status: NodeStatus, state: NodeState = NodeState.RUNNING) -> Node:
    return Node(node_id, NodeKind.WORKER, "w", "127.0.0.7", state, {TAG_STATUS: status.value})


def test_kept_workers_are_waited_for_until_up_to_date_failed_or_gone() -> None:
    adopted = ("w-1", "w-2", "w-3")
    nodes = [
        _worker("w-1", NodeStatus.STARTING_RAY),
        _worker("w-2", NodeStatus.UP_TO_DATE),
        _worker("w-3", NodeStatus.FAILED),
        _worker("w-4", NodeStatus.UNINITIALIZED),  # not kept: not waited for
    ]
    seen = recovery.rejoining(nodes, adopted)
    assert seen.waiting == ("w-1",) and seen.rejoined == ("w-2",)
    nodes[0] = _worker("w-1", NodeStatus.STARTING_RAY, NodeState.PREEMPTED)  # taken back
    seen = recovery.rejoining(nodes, adopted)
    assert seen.waiting == () and seen.rejoined == ("w-2",)


def test_the_rejoin_of_kept_workers_is_noted_once_after_the_driver_started(
    tmp_path: Path,
) -> None:
    """The driver starts on the new head at once; the supervisor notes later, from its
    listings, when the kept workers were in and which of them rejoined."""
    supervisor = _supervisor(tmp_path)
    done = Recovery("h-1", "gone", time.time() - 5, "h-2", "head", ("w-1", "w-2"), {}, 1.0)
    supervisor.run = dataclasses.replace(supervisor.run, recoveries=(done,))
    said: list[str] = []
    supervisor.say = said.append
    supervisor._note_rejoined(
        [_worker("w-1", NodeStatus.UP_TO_DATE), _worker("w-2", NodeStatus.SETTING_UP)]
    )
    assert "workers_rejoined" not in supervisor.run.recoveries[-1].phases
    supervisor._note_rejoined([_worker("w-1", NodeStatus.UP_TO_DATE)])  # w-2 gone
    (noted,) = supervisor.run.recoveries
    assert noted.adopted == ("w-1",) and noted.phases["workers_rejoined"] >= 5
    assert said and "w-2 did not rejoin" in said[-1]
    assert store.load("units", supervisor.run.id) == supervisor.run
    supervisor._note_rejoined([])  # noted once
    assert supervisor.run.recoveries == (noted,)


# -- the commands' input checks -----------------------------------------------------------
def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_jobs_name_a_run_or_cluster_that_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    code, out = _invoke("jobs", "logs", str(path))
    assert code == 1 and "has no runs" in out
    code, out = _invoke("jobs", "list", str(path))
    assert code == 0 and "has no runs" in out
    store.save(_run(state=RunState.SUCCEEDED, ended_at=1100.0, config_path=str(path)))
    code, out = _invoke("jobs", "list", "--json", str(path))
    assert code == 0
    (listed,) = json.loads(out)
    assert listed["id"] == "r-abc123" and listed["state"] == "succeeded"
    code, out = _invoke("jobs", "cancel", str(path), "r-abc123", "-y")
    assert code == 1 and "already ended (succeeded)" in out
    ran = _run(
        state=RunState.SUCCEEDED,
        config_path=str(path),
        attempts=(
            Attempt(1, "h-1", 1.0, 2.0, None, AttemptEnd.HEAD_LOST),
            Attempt(2, "h-2", 3.0, 4.0, 0, AttemptEnd.SUCCEEDED),
        ),
    )
    store.save(ran)
    store.append_log("units", ran.id, store.attempt_banner(1, "h-1", "") + b"one\n")
    store.append_log("units", ran.id, store.attempt_banner(2, "h-2", " (after head lost)"))
    store.append_log("units", ran.id, b"two\nthree\n")
    code, out = _invoke("jobs", "logs", "--json", str(path), ran.id)
    assert code == 0
    attempts = json.loads(out)["attempts"]
    assert [(a["number"], a["output"], a["end"]) for a in attempts] == [
        (1, "one\n", "head lost"),
        (2, "two\nthree\n", "succeeded"),
    ]
    code, out = _invoke("jobs", "logs", str(path), "r-other")
    assert code == 1 and "has no run r-other" in out


def test_submit_refuses_recover_options_without_recover_and_relative_storage(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(CONFIG.split("metadata:", maxsplit=1)[0])
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code, out = _invoke("submit", str(plain), str(script), "--detach")
    assert code == 2 and "go with --recover" in out
    code, out = _invoke("submit", str(plain), str(script), "--recover", "--recover-storage", "res")
    assert code == 2 and "is relative" in out
    code, out = _invoke("submit", str(plain), str(script), "--recover", "--tmux")
    assert code == 2 and "do not go with --recover" in out


def test_status_names_a_run_nobody_supervises_and_how_to_take_it_up(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG)
    store.save(_run(state=RunState.RECOVERING, config_path=str(path)))
    store.save(_run(id="r-ended", state=RunState.SUCCEEDED, config_path=str(path)))
    code, out = _invoke("status", str(path))
    assert code == 0, out
    assert "Run r-abc123 (train.py): recovering (unsupervised)" in out
    assert f"launcher jobs supervise {path} r-abc123" in out
    assert "r-ended" not in out
    code, out = _invoke("status", "--json", str(path))
    assert code == 0 and json.loads(out)["runs"] == [
        {"id": "r-abc123", "state": "recovering (unsupervised)", "script": "train.py"}
    ]


def test_a_scripts_own_storage_path_option_is_the_scripts(tmp_path: Path) -> None:
    """`--storage-path` after SCRIPT goes to the script (Tune scripts take it), not to
    `submit`: without a cluster the submit gets as far as finding none."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(CONFIG.split("metadata:", maxsplit=1)[0])
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code, out = _invoke("submit", str(plain), str(script), "--storage-path", "/x/results")
    assert code == 1 and "is not running" in out, out


def test_kept_workers_old_ray_is_killed_side_by_side_without_waiting_for_the_unreached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each kept worker's old Ray is killed at once (force); one that does not answer is
    named, not waited for beyond the bound."""
    config = parse_config(CONFIG, str(tmp_path / "cluster.yaml"))
    hang = threading.Event()
    forced: list[tuple[str, bool]] = []

    class Access(NoAccess):
        def stop_node_ray(
            self, node: Node, runner: CommandRunner, force: bool = False
        ) -> str | None:
            forced.append((node.id, force))
            if node.id == "w-hung":
                hang.wait(60)
            return "raylet (pid 7) still running" if node.id == "w-left" else None

    provider = MemoryProvider(config)
    provider.access = Access(config)

    monkeypatch.setattr(recovery, "node_runner", lambda *args: object())
    workers = [_worker(i, NodeStatus.UNINITIALIZED) for i in ("w-ok", "w-left", "w-hung")]
    try:
        problems = recovery.kill_orphaned_ray(config, provider, workers, wait_s=0.5)
        assert not hang.is_set()  # returned while the hung one still hangs
    finally:
        hang.set()
    assert sorted(forced) == [("w-hung", True), ("w-left", True), ("w-ok", True)]
    assert dict(problems) == {
        "w-left": "raylet (pid 7) still running",
        "w-hung": "not reached within 0.5 s",
    }
