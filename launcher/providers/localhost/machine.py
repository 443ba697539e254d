"""What every localhost cluster on this machine shares, whatever its `LAUNCHER_HOME` or user:
the loopback addresses and ports its nodes are given.

Each home keeps its nodes' records under itself, so two homes (two users, two CI jobs) could
not see each other's nodes and were both given 127.0.0.2. So every node also leaves a claim
in one directory of the machine's (`/tmp/launcher-machine`, or `$LAUNCHER_MACHINE_DIR`): a
small world-readable file naming its address, its ports and the path of its record. A claim
whose record is gone (the node was removed, or its home deleted) is stale and ignored, so a
home wiped by hand frees its addresses. Claims are made and read under one lock of the
machine's, which also serialises `ray start` across clusters.

The directory is made sticky and world-writable (as /tmp is), so anyone may add claims and
only a claim's owner may remove it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ProviderError
from launcher.files import write_whole

DEFAULT_DIR = "/tmp/launcher-machine"
_SHARED_MODE = 0o1777


def machine_dir() -> Path:
    """The machine's shared directory, made if missing, refused if anyone could subvert it."""
    path = Path(os.environ.get("LAUNCHER_MACHINE_DIR") or DEFAULT_DIR)
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True)
        with contextlib.suppress(PermissionError):
            path.chmod(_SHARED_MODE)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ProviderError(f"{path} is not a directory; remove it (the launcher makes it)")
    if info.st_uid not in (0, os.getuid()) and not info.st_mode & stat.S_ISVTX:
        raise ProviderError(
            f"{path} belongs to uid {info.st_uid} and is not sticky, so its owner's files "
            f"could be replaced; remove it or set LAUNCHER_MACHINE_DIR to a directory of yours"
        )
    (path / "claims").mkdir(exist_ok=True)
    with contextlib.suppress(PermissionError):
        (path / "claims").chmod(_SHARED_MODE)
    return path


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """An exclusive lock of this machine's, the same for every home and user."""
    path = machine_dir() / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY)  # another user's lock file: flock needs no write
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Claim:
    record: str
    ip: str | None
    ports: tuple[int, ...]


def _claim_path(record: Path) -> Path:
    digest = hashlib.sha256(str(record.absolute()).encode()).hexdigest()[:24]
    return machine_dir() / "claims" / f"{os.getuid()}-{digest}.json"


def claim(record: Path, ip: str | None, ports: list[int]) -> None:
    """Say that the node whose record is `record` holds `ip` and `ports` (under the lock)."""
    data = {"record": str(record.absolute()), "ip": ip, "ports": sorted(ports)}
    write_whole(_claim_path(record), json.dumps(data), mode=0o644)


def release(record: Path) -> None:
    _claim_path(record).unlink(missing_ok=True)


def _gone(record: str) -> bool:
    """Whether a claim's record is surely gone (not merely unreadable to this user)."""
    try:
        os.stat(record)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def claims() -> list[Claim]:
    """The live claims of every node of every localhost cluster on this machine."""
    found = []
    for path in (machine_dir() / "claims").glob("*.json"):
        try:
            data = json.loads(path.read_text())
            record = str(data["record"])
            ports = tuple(int(p) for p in data.get("ports", ()))
            ip = data.get("ip")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _gone(record):
            with contextlib.suppress(OSError):
                path.unlink()  # only its owner can; others skip it each time
            continue
        found.append(Claim(record, str(ip) if ip else None, ports))
    return found
