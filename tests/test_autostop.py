"""Autostop: the idle detector (fake clock), its settings and sessions on the head, bad
input, and end to end on this machine: a cluster started with `up -i 0.25 --down` takes
itself down 15 s after its job ends, with no command from here; `list` then shows it gone and
`cost-report` includes it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.autoscaler.decide.demand import JOBS_UNKNOWN, Demand, RayNode
from launcher.autoscaler.decide.idle import IdleTimer, busy_reasons, due
from launcher.autoscaler.observe.head_files import open_sessions, process_start, read_autostop
from launcher.cluster.ops import marked_session, wrap_session
from launcher.config.loader import parse_config
from launcher.config.model import Autostop
from launcher.ledger.store import read_record
from launcher.paths import cluster_dir
from tests.cluster_helpers import (
    cluster_config,
    kill_cluster,
    leftover_processes,
    run,
    temp_dir_of,
    wait_for,
)

REPO = Path(__file__).resolve().parent.parent
IDLE_NODE = RayNode("n1", "127.0.0.2", {"CPU": 2.0}, {"CPU": 2.0}, 30.0, True)
BUSY_NODE = RayNode("n2", "127.0.0.3", {"CPU": 2.0}, {"CPU": 1.0}, 0.0, True)


def test_the_cluster_is_idle_only_when_nothing_of_ray_s_runs_or_waits_and_no_session_is_open() -> (
    None
):
    assert busy_reasons(Demand(nodes=(IDLE_NODE,)), 0) == ()
    assert busy_reasons(None, 0) == ("Ray's state cannot be read",)
    assert busy_reasons(Demand(nodes=(IDLE_NODE, BUSY_NODE)), 0) == ("work running on 1 node(s)",)
    assert busy_reasons(Demand(pending=(({"CPU": 1.0}, 3),)), 0) == (
        "3 task(s) or actor(s) waiting",
    )
    assert busy_reasons(Demand(jobs=("01000000",)), 0) == ("1 Ray job(s) running",)
    assert busy_reasons(Demand(jobs=(JOBS_UNKNOWN,)), 0) == (JOBS_UNKNOWN,)
    assert busy_reasons(Demand(actors=2), 0) == ("2 actor(s) alive",)  # even with no resources
    assert busy_reasons(Demand(actors=-1), 0) == ("the actor table could not be read",)
    assert busy_reasons(Demand(), 0, launching=1) == ("1 node(s) being launched or set up",)
    assert busy_reasons(Demand(constraints=({"CPU": 8.0},)), 2) == (
        "resources requested with request_resources",
        "2 exec/attach/submit session(s) open",
    )


def test_idle_time_counts_from_the_last_busy_tick_and_autostop_is_due_after_n_minutes() -> None:
    timer = IdleTimer()
    setting = Autostop(idle_minutes=10)
    assert timer.update(("1 Ray job(s) running",), 100.0) == 0.0
    assert timer.update((), 130.0) == 0.0  # idle from here
    assert timer.update((), 130.0 + 599) == 599 and not due(setting, 599)
    assert due(setting, timer.update((), 130.0 + 600))
    assert timer.update(("1 exec/attach/submit session(s) open",), 800.0) == 0.0
    assert timer.update((), 900.0) == 0.0  # busy again in between: counting starts over
    assert not due(None, 10**6)
    paused = IdleTimer()
    paused.update((), 0.0)
    assert paused.update((), 100.0) == 100.0
    assert paused.update(("Ray's state cannot be read",), 120.0) == 100.0  # paused, not reset
    assert paused.update(("Ray's state cannot be read",), 150.0) == 100.0
    assert paused.update((), 160.0) == 110.0  # counts on from where it was
    assert due(Autostop(idle_minutes=0), 0.0)


def test_the_head_s_setting_overrides_the_config_s_and_can_cancel_it(tmp_path: Path) -> None:
    configured = Autostop(30, down=False)
    path = tmp_path / "autostop.json"
    assert read_autostop(str(path), configured) == configured
    path.write_text('{"idle_minutes": 5, "down": true}')
    assert read_autostop(str(path), configured) == Autostop(5, down=True)
    path.write_text('{"cancelled": true}')
    assert read_autostop(str(path), configured) is None
    path.write_text("not json")
    assert read_autostop(str(path), configured) == configured


def test_sessions_count_while_their_shell_runs_and_stale_ones_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / str(os.getpid())).write_text("")
    (tmp_path / str(gone.pid)).write_text("")
    assert open_sessions(str(tmp_path)) == 1
    assert not (tmp_path / str(gone.pid)).exists()
    assert open_sessions(str(tmp_path / "none")) == 0


def test_a_session_file_whose_pid_was_reused_is_stale(tmp_path: Path) -> None:
    """The marker holds its shell's start time: a process given the same pid later (a
    stale file after a crash) does not keep the cluster busy."""
    started = process_start(os.getpid())
    assert started is not None
    (tmp_path / str(os.getpid())).write_text(f"{os.getpid()} {int(started) + 1}\n")
    assert open_sessions(str(tmp_path)) == 0
    assert not (tmp_path / str(os.getpid())).exists()
    (tmp_path / str(os.getpid())).write_text(f"{os.getpid()} {started}\n")
    assert open_sessions(str(tmp_path)) == 1


def test_the_session_shell_marks_itself_with_its_start_time(tmp_path: Path) -> None:
    folder = str(tmp_path / "sessions")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from launcher.autoscaler.observe.head_files import open_sessions; "
        f"print(open_sessions({folder!r}))"
    )
    count = f"{sys.executable} -c {shlex.quote(code)}"
    shown = subprocess.run(
        ["bash", "-c", marked_session(count, folder)], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == "1"  # its own marker, with its start time, counts
    assert not list(Path(folder).iterdir())  # and is gone with the shell


@pytest.mark.parametrize("engine", ["tmux", "screen"])
def test_a_command_run_detached_counts_as_a_session_while_it_runs(
    tmp_path: Path, engine: str
) -> None:
    """`exec --tmux/--screen`: the shell that starts the session ends at once; the command
    inside counts until it ends (the shell left open after it does not)."""
    if shutil.which(engine) is None:
        pytest.skip(f"{engine} is not installed here (scripts/test installs it)")
    folder = str(tmp_path / "sessions")
    go = tmp_path / "go"
    wrapped, name = wrap_session(
        f"while [ ! -e {go} ]; do sleep 0.1; done",
        screen=engine == "screen",
        tmux=engine == "tmux",
        folder=folder,
    )
    env = {**os.environ, "TMUX_TMPDIR": str(tmp_path), "SCREENDIR": str(tmp_path / "screens")}
    (tmp_path / "screens").mkdir(mode=0o700)
    try:
        subprocess.run(["bash", "-c", marked_session(wrapped, folder)], env=env, check=True)
        wait_for(lambda: open_sessions(folder) == 1, 30, "the detached command's session")
        go.touch()
        wait_for(lambda: open_sessions(folder) == 0, 30, "the session to end with its command")
    finally:
        stop = ["tmux", "kill-session", "-t", str(name)]
        if engine == "screen":
            stop = ["screen", "-S", str(name), "-X", "quit"]
        subprocess.run(stop, env=env, capture_output=True, check=False)


def test_extra_screen_args_reach_screen(tmp_path: Path) -> None:
    """`submit --screen --extra-screen-args '-c RC -L -Logfile F'`: screen logs the session
    to F (RC has it flush the log at once, not every 10 s)."""
    if shutil.which("screen") is None:
        pytest.skip("screen is not installed here (scripts/test installs it)")
    log = tmp_path / "screen.log"
    rc = tmp_path / "screenrc"
    rc.write_text("logfile flush 0\n")
    wrapped, name = wrap_session(
        "echo hello-from-screen; sleep 2",
        screen=True,
        tmux=False,
        folder=str(tmp_path / "sessions"),
        screen_args=f"-c {rc} -L -Logfile {log}",
    )
    env = {**os.environ, "SCREENDIR": str(tmp_path / "screens")}
    (tmp_path / "screens").mkdir(mode=0o700)
    try:
        subprocess.run(["bash", "-c", wrapped], env=env, check=True, cwd=tmp_path)
        wait_for(
            lambda: log.is_file() and "hello-from-screen" in log.read_text(errors="replace"),
            30,
            "screen's log of the session",
        )
    finally:
        quit_ = ["screen", "-S", str(name), "-X", "quit"]
        subprocess.run(quit_, env=env, capture_output=True, check=False)


def test_autostop_config_key_is_validated() -> None:
    base = cluster_config("as-config")
    config = parse_config(
        base + "metadata: {launcher: {autostop: {idle_minutes: 15, down: true}}}\n", "c.yaml"
    )
    assert config.autostop == Autostop(15, down=True)
    assert parse_config(base, "c.yaml").autostop is None
    from launcher.errors import ConfigError

    with pytest.raises(ConfigError) as bad:
        parse_config(base + "metadata: {launcher: {autostop: {idle_minutes: -1}}}\n", "c.yaml")
    assert "idle_minutes" in str(bad.value.problems[0].path)


@pytest.fixture
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    return home


def test_bad_autostop_input_gets_one_clear_line(tmp_path: Path, launcher_home: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(cluster_config("as-bad"))
    for args, expected in [
        (("-i", "ten"), "-i ten: idle minutes must be a number"),
        (("-i", "-1"), "-i -1: idle minutes must be 0 or more"),
        ((), "give -i N"),
        (("-i", "5", "--cancel"), "--cancel takes no -i"),
        (("-i", "5"), "cluster as-bad is not running; start it with `launcher up"),
    ]:
        result = run("autostop", str(config), *args, timeout=60)
        assert result.returncode != 0 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    missing = run("autostop", str(tmp_path / "nope.yaml"), "-i", "5", timeout=60)
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1, missing.stderr
    up_bad = run("up", "-y", str(config), "--down", timeout=60)
    assert up_bad.returncode == 2 and "--down needs -i" in up_bad.stderr
    assert not (launcher_home / "clusters" / "as-bad" / "localhost").exists()


NAME = "autostop-e2e"
JOB = """\
import time
import ray

ray.init()


@ray.remote(num_cpus=1)
def work(i):
    time.sleep(1)
    return i


assert sorted(ray.get([work.remote(i) for i in range(4)])) == [0, 1, 2, 3]
print("JOB-DONE", flush=True)
"""


@pytest.fixture
def autostop_cluster(tmp_path: Path, launcher_home: Path) -> Iterator[Path]:
    config = tmp_path / "autostop.yaml"
    config.write_text(cluster_config(NAME, min_workers=1))
    yield config
    run("down", "-y", str(config), timeout=120)
    kill_cluster(NAME)


def test_a_cluster_takes_itself_down_once_idle_after_its_job_ends(
    autostop_cluster: Path, tmp_path: Path
) -> None:
    config = autostop_cluster
    # 15 s idle: long enough to tell from at once (a tick, then a down of ~3 s), short
    # enough for CI.
    up = run("up", "-y", "-i", "0.25", "--down", str(config), timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "Autostop: down after 0.25 min idle" in up.stdout
    job = tmp_path / "job.py"
    job.write_text(JOB)
    submitted = run("submit", str(config), str(job), timeout=300)
    assert submitted.returncode == 0 and "JOB-DONE" in submitted.stdout, submitted.stdout
    job_ended = time.time()
    shown = run("status", str(config), timeout=60)
    assert "Autostop: down after 0.25 min idle;" in shown.stdout, shown.stdout
    # From here on, nothing is asked of the cluster: only files on this machine are read.
    wait_for(
        lambda: (record := read_record(NAME)) is not None and record.state == "gone",
        240,
        "the cluster to take itself down",
    )
    wait_for(lambda: not leftover_processes(NAME), 60, "the cluster's processes to exit")
    assert not (cluster_dir(NAME) / "localhost").exists()
    assert not Path(temp_dir_of(NAME)).exists()
    record = read_record(NAME)
    assert record is not None and "autostop (down after 0.25 min idle)" in record.state_note
    assert record.state_since - job_ended >= 12, record.state_since - job_ended  # idle 15 s
    assert all(not n.running for n in record.nodes.values())
    listed = run("list", "--json", timeout=60)
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "gone" and row["cost_so_far_text"] == "free"
    assert "1 gone" in run("list", timeout=60).stdout
    report = run("cost-report", "--json", timeout=60)
    (cluster,) = json.loads(report.stdout)["clusters"]
    assert cluster["name"] == NAME and cluster["cost_text"] == "free"
    kinds = {r["node_type"] for r in cluster["rows"]}
    assert kinds == {"head", "worker"}
    assert all(r["node_hours"] > 15 / 3600 for r in cluster["rows"])
    again = run("autostop", str(config), "-i", "5", timeout=60)
    assert again.returncode != 0 and "is not running" in again.stderr
