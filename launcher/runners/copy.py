"""Copying files to and from a node over SSH, by SFTP on the open connection or by rsync,
with the same meaning (`rsync -a` rules: a source directory ending in `/` copies its
contents, without it the directory itself; modes, times and symlinks kept; `excludes` are
rsync `--exclude` patterns, matched against names, or against paths when they hold a `/`).

Which one is cheaper depends on the size of the copy: rsync starts an OpenSSH client that
makes a connection of its own (a key exchange and a login: ~0.2 s of CPU and a dozen round
trips), then skips unchanged files; SFTP costs a few round trips per file on the connection
already open. `sftp_is_cheaper` decides from the copy's size and the connection's round
trip time.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from launcher.runners.filters import rsync_excluded

if TYPE_CHECKING:
    from launcher.runners.paramiko_lib import paramiko
    from launcher.runners.ssh_target import SSHTarget

# The cost model behind the choice (round trips on the open connection against a new one).
SFTP_TRIPS_PER_FILE = 4  # open, chmod, utime, close (the writes are pipelined)
SFTP_TRIPS_PER_DIR = 4  # stat or mkdir, listing, chmod, utime
RSYNC_TRIPS = 12  # TCP, key exchange, login, session, and rsync's own exchange
RSYNC_START_S = 0.1  # the OpenSSH client's process, key exchange and login, in CPU
SFTP_MAX_BYTES = 8 << 20  # above this, rsync's skipping of unchanged files pays
SFTP_MAX_ENTRIES = 1000  # a tree bigger than this goes by rsync without asking


@dataclass(frozen=True)
class CopySize:
    files: int  # regular files and symlinks
    dirs: int
    bytes: int

    @property
    def sftp_trips(self) -> int:
        return SFTP_TRIPS_PER_FILE * self.files + SFTP_TRIPS_PER_DIR * self.dirs


def sftp_is_cheaper(size: CopySize | None, round_trip_s: Callable[[], float]) -> bool:
    """Whether SFTP on the open connection beats a new rsync connection for a copy of
    `size` (None: bigger than we count). The connection's round trip time is asked only
    when the copy takes more round trips than rsync's start does."""
    if size is None or size.bytes > SFTP_MAX_BYTES:
        return False
    if size.sftp_trips <= RSYNC_TRIPS:
        return True  # fewer round trips, and no new connection: cheaper at any latency
    trip = round_trip_s()
    return size.sftp_trips * trip <= RSYNC_START_S + RSYNC_TRIPS * trip


def local_copy_size(source: str, excludes: tuple[str, ...]) -> CopySize | None:
    """What copying local `source` moves (None when over SFTP_MAX_ENTRIES or
    SFTP_MAX_BYTES: counting stops there)."""
    try:
        top = os.lstat(source)
    except OSError:
        return CopySize(0, 0, 0)  # the copy itself reports what is wrong
    if not stat.S_ISDIR(top.st_mode):
        return CopySize(1, 0, top.st_size)
    files, dirs, size = 0, 1, 0
    pending = [(source.rstrip("/") or "/", "")]
    while pending:
        directory, relative = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            rel = f"{relative}/{entry.name}" if relative else entry.name
            if rsync_excluded(rel, excludes):
                continue
            if entry.is_dir(follow_symlinks=False):
                dirs += 1
                pending.append((entry.path, rel))
            else:
                files += 1
                size += entry.stat(follow_symlinks=False).st_size
            if files + dirs > SFTP_MAX_ENTRIES or size > SFTP_MAX_BYTES:
                return None
    return CopySize(files, dirs, size)


def remote_copy_size(sftp: paramiko.SFTPClient, source: str) -> CopySize | None:
    """The same for `source` on the node (one listing per directory)."""
    try:
        top = sftp.lstat(source)
    except OSError:
        return CopySize(0, 0, 0)
    if not stat.S_ISDIR(top.st_mode or 0):
        return CopySize(1, 0, top.st_size or 0)
    files, dirs, size = 0, 1, 0
    pending = [source.rstrip("/") or "/"]
    while pending:
        directory = pending.pop()
        for entry in sftp.listdir_attr(directory):
            if stat.S_ISDIR(entry.st_mode or 0):
                dirs += 1
                pending.append(f"{directory}/{entry.filename}")
            else:
                files += 1
                size += entry.st_size or 0
            if files + dirs > SFTP_MAX_ENTRIES or size > SFTP_MAX_BYTES:
                return None
    return CopySize(files, dirs, size)


def rsync_available() -> bool:
    return shutil.which("rsync") is not None and shutil.which("ssh") is not None


def ssh_command(target: SSHTarget, known_hosts: Path) -> list[str]:
    """An OpenSSH client command line with the runner's settings and pinned host keys."""
    args = [
        "ssh",
        "-p",
        str(target.port),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        # A host that stops answering mid-copy (or mid-attach) ends the connection within
        # a minute instead of holding it for ever.
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=4",
        "-o",
        "LogLevel=ERROR",
    ]
    if target.key_path:
        args += ["-i", str(Path(target.key_path).expanduser()), "-o", "IdentitiesOnly=yes"]
    if target.proxy_command:
        args += ["-o", f"ProxyCommand={target.proxy_command}"]
    return args


def copy_over_rsync(
    target: SSHTarget,
    known_hosts: Path,
    source: str,
    destination: str,
    excludes: tuple[str, ...],
    *,
    up: bool,
) -> None:
    remote = f"{target.user}@{_bracket(target.host)}:"
    src, dst = (source, remote + destination) if up else (remote + source, destination)
    if not up:
        Path(destination.rstrip("/") or "/").parent.mkdir(parents=True, exist_ok=True)
    args = [
        "rsync",
        "-a",
        "-e",
        shlex.join(ssh_command(target, known_hosts)),
        *(f"--exclude={pattern}" for pattern in excludes),
        src,
        dst,
    ]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"rsync {src} {dst} failed: {result.stderr.strip()}")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def copy_over_sftp(
    sftp: paramiko.SFTPClient,
    source: str,
    destination: str,
    excludes: tuple[str, ...],
    *,
    up: bool,
) -> None:
    side = _Sides(sftp, up)
    src_stat = side.src_lstat(source)
    if src_stat is None:
        raise OSError(f"{source}: no such file or directory")
    if stat.S_ISDIR(src_stat.st_mode or 0):
        root = destination.rstrip("/") or "/"
        if not source.endswith("/"):
            root = f"{root}/{PurePosixPath(source.rstrip('/')).name}"
        side.makedirs(root)
        side.copy_tree(source.rstrip("/"), root, "", excludes)
        side.set_meta(root, src_stat)
        return
    target = destination
    dst_stat = side.dst_stat(destination)
    if destination.endswith("/") or (dst_stat is not None and stat.S_ISDIR(dst_stat.st_mode or 0)):
        side.makedirs(destination.rstrip("/") or "/")
        target = f"{destination.rstrip('/')}/{PurePosixPath(source).name}"
    else:
        side.makedirs(str(PurePosixPath(destination).parent))
    side.copy_entry(source, target, src_stat)


class _Sides:
    """The source and destination ends of an SFTP copy, one local, one remote."""

    def __init__(self, sftp: paramiko.SFTPClient, up: bool) -> None:
        self.sftp = sftp
        self.up = up

    def src_lstat(self, path: str) -> os.stat_result | paramiko.SFTPAttributes | None:
        try:
            return os.lstat(path) if self.up else self.sftp.lstat(path)
        except FileNotFoundError:
            return None

    def dst_stat(self, path: str) -> os.stat_result | paramiko.SFTPAttributes | None:
        try:
            return self.sftp.stat(path) if self.up else os.stat(path)
        except FileNotFoundError:
            return None

    def entries(self, path: str) -> list[tuple[str, os.stat_result | paramiko.SFTPAttributes]]:
        """A source directory's entries with their lstat, by name (one listing remotely)."""
        if not self.up:
            listed = [(a.filename, a) for a in self.sftp.listdir_attr(path)]
            return sorted(listed, key=lambda pair: pair[0])
        found: list[tuple[str, os.stat_result | paramiko.SFTPAttributes]] = []
        for name in sorted(os.listdir(path)):
            entry = self.src_lstat(f"{path}/{name}")
            if entry is not None:  # removed meanwhile
                found.append((name, entry))
        return found

    def makedirs(self, path: str) -> None:
        """`mkdir -p`: one round trip when `path` exists, else one more per missing level."""
        if not self.up:
            Path(path).mkdir(parents=True, exist_ok=True)
            return
        try:
            self.sftp.stat(path)
            return
        except FileNotFoundError:
            pass
        parent = str(PurePosixPath(path).parent)
        if parent != path:
            self.makedirs(parent)
        self.mkdir(path)

    def mkdir(self, path: str) -> None:
        """A directory whose parent exists (one round trip when it is new)."""
        if not self.up:
            Path(path).mkdir(exist_ok=True)
            return
        try:
            self.sftp.mkdir(path)
        except OSError:
            entry = self.sftp.stat(path)  # made meanwhile, or there before: fine if a directory
            if not stat.S_ISDIR(entry.st_mode or 0):
                raise

    def copy_tree(self, src: str, dst: str, relative: str, excludes: tuple[str, ...]) -> None:
        for name, entry in self.entries(src):
            rel = f"{relative}/{name}" if relative else name
            if rsync_excluded(rel, excludes):
                continue
            if stat.S_ISDIR(entry.st_mode or 0):
                self.mkdir(f"{dst}/{name}")
                self.copy_tree(f"{src}/{name}", f"{dst}/{name}", rel, excludes)
                self.set_meta(f"{dst}/{name}", entry)
            else:
                self.copy_entry(f"{src}/{name}", f"{dst}/{name}", entry)

    def copy_entry(
        self, src: str, dst: str, entry: os.stat_result | paramiko.SFTPAttributes
    ) -> None:
        mode = entry.st_mode or 0
        if stat.S_ISLNK(mode):
            link = os.readlink(src) if self.up else self.sftp.readlink(src)
            self._remove(dst)
            if self.up:
                self.sftp.symlink(str(link), dst)
            else:
                os.symlink(str(link), dst)
            return
        if self.up:
            self.sftp.put(src, dst, confirm=False)  # a failed write raises; no stat after
        else:
            self.sftp.get(src, dst)
        self.set_meta(dst, entry)

    def set_meta(self, path: str, entry: os.stat_result | paramiko.SFTPAttributes) -> None:
        mode = stat.S_IMODE(entry.st_mode or 0)
        times = (int(entry.st_atime or 0), int(entry.st_mtime or 0))
        if self.up:
            self.sftp.chmod(path, mode)
            self.sftp.utime(path, times)
        else:
            os.chmod(path, mode)
            os.utime(path, times)

    def _remove(self, path: str) -> None:
        try:
            if self.up:
                self.sftp.remove(path)
            else:
                os.remove(path)
        except OSError:  # nothing there to replace
            pass
