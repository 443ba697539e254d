"""What the head's own files say: the autostop setting in force (written by `launcher
autostop`) and the exec/attach/submit sessions open on the head."""

from __future__ import annotations

import json
import os
from pathlib import Path

from launcher.config.model import Autostop


def read_autostop(path: str, configured: Autostop | None) -> Autostop | None:
    """The autostop in force: set on the head by `launcher autostop` (or cancelled there),
    else the config's."""
    try:
        raw = json.loads(Path(path).expanduser().read_text())
    except (OSError, ValueError):
        return configured
    if not isinstance(raw, dict):
        return configured
    if raw.get("cancelled"):
        return None
    try:
        return Autostop(float(raw["idle_minutes"]), bool(raw.get("down", False)))
    except (KeyError, TypeError, ValueError):
        return configured


def open_sessions(directory: str) -> int:
    """exec/attach/submit sessions open on the head: files named by the process id of each
    session's shell, whose process still runs (a stale file is removed). A file also holds
    the process's start time (`marked_session`), so a pid reused since is not taken for the
    session's shell."""
    folder = Path(directory).expanduser()
    count = 0
    for entry in folder.glob("*"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            entry.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass  # another user's process: it runs
        try:
            marked = entry.read_text().split()
        except OSError:
            marked = []
        started = process_start(pid)
        if len(marked) > 1 and started is not None and marked[1] != started:
            entry.unlink(missing_ok=True)  # that shell ended; another process has its pid
            continue
        count += 1
    return count


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot, /proc/PID/stat's 22nd field), or
    None when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(") ", 1)[-1].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None
