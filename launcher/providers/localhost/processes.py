"""Find and stop this machine's processes of a localhost cluster, even without state files.

Three marks tie a process to a cluster, because Ray rewrites the process title of its
Python processes (setproctitle), which also wipes what /proc shows of their environment:
- LAUNCHER_CLUSTER_KEY / LAUNCHER_NODE_ID in the environment, which Ray's native daemons
  (raylet, gcs_server) and plain Python processes keep. The key is the cluster's own in its
  home (its name is not: another home or user may have a cluster of that name, and anyone
  may set LAUNCHER_CLUSTER);
- the session: every process started by one of a node's commands shares its session id,
  even Ray's workers, which take a process group of their own;
- for the cluster as a whole, a command line or open file under the cluster's Ray temp dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    session: int
    command: str
    tags: dict[str, str] = field(default_factory=dict)

    def tagged(self, key: str, node_id: str | None = None) -> bool:
        """Whether the process carries the cluster key `key` (and is of node `node_id`)."""
        if not key or self.tags.get("LAUNCHER_CLUSTER_KEY") != key:
            return False
        return node_id is None or self.tags.get("LAUNCHER_NODE_ID") == node_id


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _info(pid: int) -> ProcessInfo | None:
    stat = _read(_PROC / str(pid) / "stat").decode(errors="replace")
    if not stat:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()
        state, session = fields[0], int(fields[3])
    except (IndexError, ValueError):
        return None
    if state == "Z":
        return None
    tags = {}
    for item in _read(_PROC / str(pid) / "environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith(b"LAUNCHER_"):
            tags[key.decode(errors="replace")] = value.decode(errors="replace")
    command = _read(_PROC / str(pid) / "cmdline").replace(b"\0", b" ").decode(errors="replace")
    return ProcessInfo(pid, session, command.strip(), tags)


def snapshot() -> list[ProcessInfo]:
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            info = _info(int(entry.name))
            if info is not None:
                found.append(info)
    return found


def _protected() -> tuple[set[int], int]:
    """This process, its ancestors and its session: never stop the launcher itself."""
    protected = set()
    pid = os.getpid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        stat = _read(_PROC / str(pid) / "stat").decode(errors="replace")
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            break
    return protected, os.getsid(0)


def _uses_path(pid: int, prefix: str) -> bool:
    """Whether a process runs from, or has a file open under, `prefix`."""
    base = _PROC / str(pid)
    with contextlib.suppress(OSError):
        if os.readlink(base / "cwd").startswith(prefix):
            return True
    try:
        fds = list((base / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(prefix):
                return True
    return False


def node_processes(key: str, node_id: str) -> list[ProcessInfo]:
    """The processes of one node of the cluster with key `key`: those tagged with it, and
    everything in their sessions."""
    protected, own_session = _protected()
    processes = [p for p in snapshot() if p.pid not in protected]
    sessions = {p.session for p in processes if p.tagged(key, node_id)} - {own_session}
    return [p for p in processes if p.tagged(key, node_id) or p.session in sessions]


def cluster_processes(key: str, temp_dir: str) -> list[ProcessInfo]:
    """Every process of a cluster, found by its key, sessions or use of its Ray temp dir
    (which is the cluster's own: named after its home and user)."""
    protected, own_session = _protected()
    processes = [p for p in snapshot() if p.pid not in protected]
    sessions = {p.session for p in processes if p.tagged(key)} - {own_session}
    prefix = temp_dir.rstrip("/") + "/"
    return [
        p
        for p in processes
        if p.tagged(key)
        or p.session in sessions
        or prefix in p.command + " "
        or temp_dir in p.command
        or _uses_path(p.pid, prefix)
    ]


def is_alive(pid: int) -> bool:
    return _info(pid) is not None


def stop_processes(pids: Iterable[int], grace_s: float = 3.0) -> list[int]:
    """SIGTERM, then SIGKILL what is still alive after `grace_s`. Returns the pids stopped."""
    targets = [pid for pid in pids if is_alive(pid)]
    for pid in targets:
        _signal(pid, signal.SIGTERM)
    _wait_gone(targets, grace_s)
    for pid in targets:
        if is_alive(pid):
            _signal(pid, signal.SIGKILL)
    _wait_gone(targets, 2.0)
    return targets


def kill_processes(pids: Iterable[int]) -> list[int]:
    """SIGKILL at once, as when a machine goes away; waits (up to 2 s) until they are gone.
    Returns the pids killed."""
    targets = [pid for pid in pids if is_alive(pid)]
    for pid in targets:
        _signal(pid, signal.SIGKILL)
    _wait_gone(targets, 2.0)
    return targets


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_alive(p) for p in pids):
        time.sleep(0.05)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
