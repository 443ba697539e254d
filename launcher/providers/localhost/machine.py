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
only a claim's owner may remove it; claims and the lock are made readable by all whatever
the umask. Its owner (the first user to run a localhost cluster here, or root) could remove
anyone's claims: a user who does not trust the others sets LAUNCHER_MACHINE_DIR to a
directory of their own (and then shares nothing with them).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ProviderError
from launcher.files import replacing

DEFAULT_DIR = "/tmp/launcher-machine"
_SHARED_MODE = 0o1777
LOCK_WAIT_S = 900.0  # a node's `ray start` holds the lock (up to ray_start_timeout_s); others queue


def machine_dir() -> Path:
    """The machine's shared directory, made if missing, refused if others could not use it
    or anyone but its owner could remove what is in it."""
    path = Path(os.environ.get("LAUNCHER_MACHINE_DIR") or DEFAULT_DIR)
    try:
        for shared in (path, path / "claims"):
            _shared_dir(shared)
    except OSError as exc:
        raise ProviderError(
            f"cannot use {path} for the addresses of this machine's localhost nodes "
            f"({exc.strerror or exc}); remove it, or set LAUNCHER_MACHINE_DIR to another directory"
        ) from exc
    return path


def _shared_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True)
        os.chmod(path, _SHARED_MODE)  # whatever the umask
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ProviderError(f"{path} is not a directory; remove it (the launcher makes it)")
    if info.st_uid == os.getuid() and info.st_mode & 0o7777 != _SHARED_MODE:
        os.chmod(path, _SHARED_MODE)
    elif info.st_mode & 0o7777 != _SHARED_MODE:
        raise ProviderError(
            f"{path} belongs to uid {info.st_uid} with mode {info.st_mode & 0o7777:o}, not "
            f"sticky and open to all (1777); remove it, or set LAUNCHER_MACHINE_DIR to another "
            "directory"
        )


@contextlib.contextmanager
def machine_lock(name: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """An exclusive lock of this machine's, the same for every home and user; waited on for
    at most `wait_s`, then refused with a line naming who may hold it."""
    path = machine_dir() / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, 0o644)  # readable by all (flock needs no write), whatever the umask
    except PermissionError:
        try:
            fd = os.open(path, os.O_RDONLY)  # another user's lock file
        except OSError as exc:
            raise ProviderError(f"cannot open {path}: {exc.strerror}; remove it") from exc
    try:
        _lock(fd, path, wait_s)
        yield
    finally:
        os.close(fd)


def _lock(fd: int, path: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if time.monotonic() > deadline:
            raise ProviderError(
                f"{path} stayed locked for {wait_s:g} s: another launcher on this machine is "
                f"starting a localhost node (see `fuser {path}`); try again when it is done"
            )
        time.sleep(0.05)


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
    path = _claim_path(record)
    with replacing(path, 0o644) as partial:
        os.chmod(partial, 0o644)  # readable by every user whatever the umask: claims are shared
        partial.write_text(json.dumps(data))


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
