"""The SSH command runner against real sshd hosts on loopback addresses."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import SSHHost, authorize, clean_home, ensure_user, make_key, user_home
from launcher import secret_env
from launcher.errors import HostKeyError, LauncherError
from launcher.runners.copy import (
    SFTP_MAX_BYTES,
    CopySize,
    local_copy_size,
    sftp_is_cheaper,
)
from launcher.runners.filters import filter_excludes
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")

MakeHost = Callable[..., SSHHost]


@pytest.fixture(scope="module")
def user() -> str:
    return ensure_user()


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return make_key(tmp_path / "id_ed25519")


@pytest.fixture
def hosts(tmp_path: Path, user: str, key: Path) -> Iterator[MakeHost]:
    started: list[SSHHost] = []
    clean_home(user)
    authorized = authorize(user, Path(str(key) + ".pub").read_text(), tmp_path)

    def make(number: int, start: bool = True) -> SSHHost:
        host = SSHHost(f"127.0.5.{number}", tmp_path / f"host{number}", user, authorized)
        started.append(host)
        if start:
            host.start()
        return host

    yield make
    for host in started:
        host.stop()
    clean_home(user)


def _runner(host: SSHHost, key: Path, tmp_path: Path, **kw: object) -> SSHRunner:
    target = SSHTarget(host.ip, host.user, key_path=str(key))
    return SSHRunner(target, KnownHosts(tmp_path / "known_hosts"), tmp_path / "node.log", **kw)  # type: ignore[arg-type]


def test_runs_commands_on_one_reused_connection_with_env_as_data(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    host = hosts(2)
    runner = _runner(host, key, tmp_path)
    assert runner.check_ready() is None
    lines: list[str] = []
    tricky = 'it\'s $HOME; `id`; "quoted" \\ $(rm -rf /)'
    result = runner.run(
        'echo "$VALUE"; echo second >&2; exit 3', {"VALUE": tricky}, echo=lines.append
    )
    assert result.exit_code == 3
    assert lines == [tricky, "second"]  # stdout and stderr in order, nothing expanded
    assert runner.run("true").ok
    transport = runner._client.get_transport() if runner._client else None
    assert transport is not None
    assert runner.run("true").ok and runner._client.get_transport() is transport  # reused
    log = (tmp_path / "node.log").read_text()
    assert tricky in log and "job control" not in log
    with pytest.raises(ValueError, match="not valid"):
        runner.run("true", {"BAD NAME": "x"})


def test_stdin_reaches_the_command_and_no_command_line(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    """`--env`'s values go on the command's standard input: with and without a timeout
    (whose wrapper reports the process group first)."""
    host = hosts(2)
    runner = _runner(host, key, tmp_path)
    data = secret_env.script({"SECRET": "stdin-only-value"})
    command = (
        secret_env.LOAD_FROM_STDIN
        + 'echo "${#SECRET}"; ps -ww -eo args | grep -c "stdin[-]only[-]value"; true'
    )
    for timeout in (None, 30.0):
        lines: list[str] = []
        assert runner.run(command, stdin=data, timeout=timeout, echo=lines.append).ok
        assert lines == ["16", "0"], lines
    assert "stdin-only-value" not in (tmp_path / "node.log").read_text()


def test_timeout_stops_a_command(hosts: MakeHost, key: Path, tmp_path: Path) -> None:
    """And kills it on the host: closing its channel left it running (sshd sends no hangup
    to a command without a terminal)."""
    host = hosts(2)
    runner = _runner(host, key, tmp_path)
    result = runner.run("echo before; sleep 300 & echo $! > ~/pid; wait", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert result.output_tail.splitlines() == ["before", "(stopped after 1 s)"]
    pid = int((user_home(host.user) / "pid").read_text())  # the hosts share this machine
    try:
        assert _ends(pid), "the timed-out command still runs on the host"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert runner.run("echo still fine").ok
    # The first timed command taught the runner that the host has setsid: the next one
    # starts in a session of its own without asking, and is still stopped whole.
    assert runner._setsid is True
    again = runner.run("sleep 301 & echo $! > ~/pid2; wait", timeout=1)
    assert again.timed_out
    second = int((user_home(host.user) / "pid2").read_text())
    try:
        assert _ends(second), "the second timed-out command still runs on the host"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(second, signal.SIGKILL)


def test_a_command_whose_time_ran_out_before_it_started_is_not_started(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    """A retry after a dropped connection reused the spent deadline: the command started,
    was seen late at once, and ran on with no process to kill."""
    host = hosts(2)
    runner = _runner(host, key, tmp_path)
    result = runner.run("touch ~/started", timeout=0)
    assert result.timed_out and "not started" in result.output_tail
    assert not (user_home(host.user) / "started").exists()
    assert runner.run("echo still fine").ok


def _ends(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat_line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat_line.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def test_host_key_is_recorded_then_a_changed_key_is_refused(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    host = hosts(3)
    runner = _runner(host, key, tmp_path)
    assert runner.check_ready() is None
    known = (tmp_path / "known_hosts").read_text()
    assert known.startswith("127.0.5.3 ssh-ed25519 ")
    assert stat.S_IMODE((tmp_path / "known_hosts").stat().st_mode) == 0o600
    host.new_host_key()
    again = _runner(host, key, tmp_path)
    with pytest.raises(HostKeyError) as caught:
        again.check_ready()
    assert "host key changed" in str(caught.value) and "ssh-keygen -R '127.0.5.3'" in str(
        caught.value
    )
    KnownHosts(tmp_path / "known_hosts").forget("127.0.5.3")  # the way out the message names
    assert _runner(host, key, tmp_path).check_ready() is None


def test_a_new_machine_at_a_known_address_is_pinned_afresh(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    """A cloud node that takes over a gone node's address is another machine: its key is
    recorded as its own, not refused as changed; its own key is then held to."""
    host = hosts(5)
    assert _runner(host, key, tmp_path, node="i-gone").check_ready() is None
    host.new_host_key()  # the instance is gone; a new one has its address
    runner = _runner(host, key, tmp_path, node="i-new")
    assert runner.check_ready() is None
    known = (tmp_path / "known_hosts").read_text()
    assert "launcher-node=i-gone" not in known and "launcher-node=i-new" in known
    # OpenSSH (rsync's transport) agrees with the file as it now is.
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("x")
    runner.copy_method = "rsync"
    runner.put(str(tree) + "/", "~/tree/")
    assert runner.run("cat ~/tree/f").ok
    host.new_host_key()  # the same instance with another key: refused
    with pytest.raises(HostKeyError):
        _runner(host, key, tmp_path, node="i-new").check_ready()


def test_refused_then_up_and_never_up(hosts: MakeHost, key: Path, tmp_path: Path) -> None:
    late = hosts(4, start=False)
    runner = _runner(late, key, tmp_path, connect_timeout_s=1.0)
    problem = runner.check_ready()
    assert problem is not None and "127.0.5.4" in problem and "refused" in problem
    threading.Timer(1.0, late.start).start()
    deadline = time.monotonic() + 15
    while runner.check_ready() is not None:
        assert time.monotonic() < deadline, "host never came up"
        time.sleep(0.2)
    assert runner.run("echo up").ok


def test_a_missing_key_file_is_said_at_once_not_retried(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    """A key that is not on this machine (`jobs list` from a second machine) is one line
    naming the file and the fix, at once: it is not a dropped connection to try again
    (three attempts and 2 + 4 + 8 s of backoff per node and command, before)."""
    host = hosts(5)
    runner = _runner(host, tmp_path / "no-such-key", tmp_path)
    result = runner.run("echo never")
    assert result.exit_code == 255 and "no-such-key" in result.output_tail
    assert "is not on this machine" in result.output_tail
    assert "auth.ssh_private_key" in result.output_tail
    with pytest.raises(FileNotFoundError, match="no-such-key"):
        runner.capture("true")
    with pytest.raises(LauncherError, match="no-such-key"):
        runner.check_ready()  # waiting for the node cannot bring the key
    assert "attempt 1 of" not in (tmp_path / "node.log").read_text()  # never retried
    assert runner.run("true", env={"K": key.name}).exit_code == 255  # the key is elsewhere


def test_dropped_connection_mid_command_is_reconnected_and_rerun(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    host = hosts(5)
    runner = _runner(host, key, tmp_path)
    assert runner.run("rm -f ~/count").ok
    threading.Timer(1.5, host.drop_sessions).start()
    result = runner.run("echo run >> ~/count; sleep 3; echo finished")
    assert result.ok and "finished" in result.output_tail
    runs = (user_home(host.user) / "count").read_text().splitlines()
    assert runs == ["run", "run"]  # the interrupted run, and the one that finished
    assert "lost" in (tmp_path / "node.log").read_text()


def _tree(root: Path) -> dict[str, tuple[str, int, str]]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", 0, os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir", stat.S_IMODE(path.stat().st_mode), "")
        else:
            out[rel] = ("file", stat.S_IMODE(path.stat().st_mode), path.read_text())
    return out


def test_rsync_and_sftp_copies_give_the_same_result(
    hosts: MakeHost, key: Path, tmp_path: Path
) -> None:
    host = hosts(6)
    source = tmp_path / "project"
    (source / "pkg" / "data").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "data" / "big.ckpt").write_text("weights")
    (source / "notes.txt").write_text("notes")
    (source / "link").symlink_to("run.sh")
    # rsync_filter: .gitignore files, at the root and below it
    (source / ".gitignore").write_text("# comment\n*.log\nbuild/\n/top-only.txt\n")
    (source / "top-only.txt").write_text("ignored at the root")
    (source / "pkg" / "top-only.txt").write_text("kept: the rule is anchored at the root")
    (source / "pkg" / ".gitignore").write_text("data/local.txt\n")
    (source / "pkg" / "data" / "local.txt").write_text("ignored below pkg")
    (source / "pkg" / "x.log").write_text("ignored anywhere")
    (source / "pkg" / "build").mkdir()
    (source / "pkg" / "build" / "out.o").write_text("ignored directory")
    (source / "build.txt").write_text("kept: build/ matches directories only")
    filtered = filter_excludes(source, (".gitignore",))
    assert filtered == (
        "/top-only.txt",
        "/pkg/x.log",
        "/pkg/build",
        "/pkg/data/local.txt",
    )
    home = user_home(host.user)
    results = {}
    for mode in ("rsync", "sftp", "auto"):
        runner = _runner(host, key, tmp_path)
        runner.copy_method = mode
        runner.put(str(source) + "/", f"~/{mode}/contents/", excludes=("*.ckpt",))
        runner.put(str(source) + "/", f"~/{mode}/filtered/", excludes=filtered)
        runner.put(str(source), f"~/{mode}/itself")
        runner.put(str(source / "notes.txt"), f"~/{mode}/single/renamed.txt")
        runner.put(str(source / "notes.txt"), f"~/{mode}/intodir/")
        back = tmp_path / f"back-{mode}"
        runner.get(f"~/{mode}/contents/", str(back) + "/")
        results[mode] = (_tree(home / mode), _tree(back))
    assert results["rsync"] == results["sftp"] == results["auto"]
    remote, back = results["sftp"]
    assert "contents/pkg/data/big.ckpt" not in remote and "contents/pkg/mod.py" in remote
    assert "itself/project/run.sh" in remote and remote["itself/project/run.sh"][1] == 0o755
    assert remote["single/renamed.txt"][2] == "notes" and "intodir/notes.txt" in remote
    assert back["link"] == ("link", 0, "run.sh")
    kept = {name for name in remote if name.startswith("filtered/")}
    assert kept == {
        "filtered/.gitignore",
        "filtered/build.txt",
        "filtered/link",
        "filtered/notes.txt",
        "filtered/run.sh",
        "filtered/pkg",
        "filtered/pkg/.gitignore",
        "filtered/pkg/mod.py",
        "filtered/pkg/data",
        "filtered/pkg/top-only.txt",
        "filtered/pkg/data/big.ckpt",
    }


def test_small_copies_go_over_sftp_and_big_or_distant_ones_by_rsync(tmp_path: Path) -> None:
    asked: list[float] = []

    def round_trip(seconds: float) -> Callable[[], float]:
        def measured() -> float:
            asked.append(seconds)
            return seconds

        return measured

    one_file = CopySize(files=1, dirs=0, bytes=300_000)
    assert sftp_is_cheaper(one_file, round_trip(0.2))  # fewer round trips than rsync's start
    assert asked == []  # so the latency was not even asked
    many = CopySize(files=200, dirs=10, bytes=1_000_000)
    assert sftp_is_cheaper(many, round_trip(0.0001))  # a LAN: 840 quick round trips
    assert not sftp_is_cheaper(many, round_trip(0.05))  # far away: one rsync is cheaper
    assert not sftp_is_cheaper(CopySize(1, 0, SFTP_MAX_BYTES + 1), round_trip(0.0001))
    assert not sftp_is_cheaper(None, round_trip(0.0001))  # too big to count

    tree = tmp_path / "tree"
    (tree / "sub" / "deep").mkdir(parents=True)
    (tree / "a.txt").write_text("a" * 10)
    (tree / "sub" / "b.txt").write_text("b" * 20)
    (tree / "sub" / "skip.log").write_text("x" * 1000)
    (tree / "sub" / "deep" / "c.txt").write_text("c" * 30)
    (tree / "link").symlink_to("a.txt")
    assert local_copy_size(str(tree) + "/", ("*.log",)) == CopySize(4, 3, 60 + 5)
    assert local_copy_size(str(tree) + "/", ("/sub",)) == CopySize(2, 1, 15)
    assert local_copy_size(str(tree / "a.txt"), ()) == CopySize(1, 0, 10)
    (tree / "big").write_bytes(b"0" * (SFTP_MAX_BYTES + 1))
    assert local_copy_size(str(tree), ()) is None  # counting stops: rsync
