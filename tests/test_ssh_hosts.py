"""Isolated test hosts behave as separate machines, seen through the launcher's SSH runner."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import IsolatedHost, isolated_hosts, make_key
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return make_key(tmp_path / "id_ed25519")


@pytest.fixture
def two(key: Path) -> Iterator[list[IsolatedHost]]:
    with isolated_hosts(key, "127.0.6.241", 2) as hosts:
        yield hosts


def _runner(host: IsolatedHost, key: Path, tmp_path: Path, **kw: object) -> SSHRunner:
    target = SSHTarget(host.ip, host.user, key_path=str(key))
    log = tmp_path / f"{host.ip}.log"
    return SSHRunner(target, KnownHosts(tmp_path / "known_hosts"), log, **kw)  # type: ignore[arg-type]


def _output(runner: SSHRunner, command: str) -> list[str]:
    lines: list[str] = []
    result = runner.run(command, echo=lines.append)
    assert result.ok, result.output_tail
    return lines


def _mounted_here(root: Path) -> list[str]:
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in mounts if str(root) in line]


def test_each_host_has_its_own_home_tmp_and_shm_and_the_venv(
    two: list[IsolatedHost], key: Path, tmp_path: Path
) -> None:
    name = f"marker-{uuid.uuid4().hex}"
    for host in two:
        runner = _runner(host, key, tmp_path)
        assert _output(runner, "true") == []  # the login shell prints nothing of its own
        write = f"for d in ~ /tmp /dev/shm; do echo {host.ip} > $d/{name}; done"
        assert _output(runner, write) == []
    for host in two:
        runner = _runner(host, key, tmp_path)
        seen = _output(runner, f"echo $HOME; cat ~/{name} /tmp/{name} /dev/shm/{name}")
        assert seen == ["/root", host.ip, host.ip, host.ip]
        for where in (f"~/{name}", f"/root/{name}", name, f"/tmp/{name}", f"/dev/shm/{name}"):
            assert host.path(where).read_text() == f"{host.ip}\n"
        assert host.path(f"~/{name}") == host.home / name
        venv_bin = Path(sys.executable).parent
        tools = _output(runner, "command -v python3 ray pip")
        assert tools == [str(venv_bin / tool) for tool in ("python3", "ray", "pip")]
        imports = "import ray, yaml, paramiko, sys; print(sys.prefix)"
        assert _output(runner, f"python3 -c '{imports}'") == [sys.prefix]
        assert _mounted_here(host.root) == []  # the host's mounts stay in its namespace
    for box_dir in ("/root", "/tmp", "/dev/shm"):
        assert not (Path(box_dir) / name).exists()


def test_processes_are_per_host_survive_dropped_sessions_and_die_with_the_host(
    two: list[IsolatedHost], key: Path, tmp_path: Path
) -> None:
    first, second = two
    runner = _runner(first, key, tmp_path)
    other = _runner(second, key, tmp_path)
    assert runner.run("nohup sleep 1000 >/dev/null 2>&1 &").ok
    daemon = "setsid sh -c 'nohup sleep 1001 >/dev/null 2>&1 &' </dev/null >/dev/null 2>&1"
    assert runner.run(daemon).ok  # double-forked into a session of its own, like Ray's
    processes = "ps -e -o pid=,args="
    assert any(line.endswith("sleep 1000") for line in _output(runner, processes))
    seen_by_other = _output(other, processes)
    assert not any("sleep 100" in line for line in seen_by_other)
    pid, args = seen_by_other[0].split(None, 1)
    assert pid == "1" and args.startswith(f"sshd: /usr/sbin/sshd -D -e -f {second.root}")
    assert other.run("pkill -f 'sleep 100'; true").ok  # reaches nothing on the first host

    def sleeps() -> list[int]:
        found = []
        for pid in first.processes():
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                    found.append(pid)
        return found

    deadline = time.monotonic() + 10  # until both have become `sleep` (exec is not awaited)
    while len(sleeps()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sleeps()) == 2
    assert first.drop_sessions() >= 1  # the runner's connection
    assert len(sleeps()) == 2  # commands started in the dropped session live on
    assert len([line for line in _output(runner, processes) if "sleep 100" in line]) == 2
    pids = sleeps()
    first.stop()
    first.stop()  # idempotent
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert first.processes() == []
    assert runner.check_ready() is not None  # powered off: refused
    assert _output(other, "echo still up") == ["still up"]
    first.start()  # boots again with home and /tmp kept, and nothing running
    assert not any("sleep" in line for line in _output(runner, processes))


def test_a_host_refuses_connections_until_started_and_is_deleted_when_closed(
    key: Path, tmp_path: Path
) -> None:
    with isolated_hosts(key, "127.0.6.243", 1, start=False) as (host,):
        runner = _runner(host, key, tmp_path, connect_timeout_s=1.0)
        problem = runner.check_ready()
        assert problem is not None and "refused" in problem
        host.start()
        assert runner.check_ready() is None
        old_key = Path(f"{host.host_key}.pub").read_text()
        host.new_host_key()
        assert Path(f"{host.host_key}.pub").read_text() != old_key
        assert host.running
        root = host.root
    assert not root.exists()
