"""Find and stop this machine's processes by the launcher tags in their environment.

Every process of a localhost node (Ray's own daemons and the workers they start) inherits
LAUNCHER_CLUSTER and LAUNCHER_NODE_ID, so they can be found even when state files are lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class TaggedProcess:
    pid: int
    cluster: str
    node_id: str | None
    command: str


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith(b"LAUNCHER_"):
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _command(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _protected() -> set[int]:
    """This process and its ancestors: never stop the launcher that is doing the stopping."""
    protected = set()
    pid = os.getpid()
    while pid > 1 and pid not in protected:
        protected.add(pid)
        try:
            stat = (_PROC / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return protected


def tagged_processes(cluster: str, node_id: str | None = None) -> list[TaggedProcess]:
    found = []
    protected = _protected()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in protected:
            continue
        env = _environ(int(entry.name))
        if env.get("LAUNCHER_CLUSTER") != cluster:
            continue
        if node_id is not None and env.get("LAUNCHER_NODE_ID") != node_id:
            continue
        found.append(
            TaggedProcess(
                int(entry.name), cluster, env.get("LAUNCHER_NODE_ID"), _command(int(entry.name))
            )
        )
    return found


def is_alive(pid: int) -> bool:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is as good as gone


def stop_processes(pids: Iterable[int], grace_s: float = 3.0) -> list[int]:
    """SIGTERM, then SIGKILL what is still alive after `grace_s`. Returns the pids stopped."""
    targets = [pid for pid in pids if is_alive(pid)]
    for pid in targets:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_alive(p) for p in targets):
        time.sleep(0.05)
    for pid in targets:
        if is_alive(pid):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(is_alive(p) for p in targets):
        time.sleep(0.05)
    return targets


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
