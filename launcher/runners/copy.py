"""Copying files to and from a node over SSH: rsync when both ends have it, else SFTP with
the same meaning (`rsync -a` rules: a source directory ending in `/` copies its contents,
without it the directory itself; modes, times and symlinks kept; `excludes` are rsync
`--exclude` patterns, matched against names, or against paths when they hold a `/`)."""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

    from launcher.runners.ssh import SSHTarget


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


def _excluded(relative: str, excludes: tuple[str, ...]) -> bool:
    """rsync's rule: a pattern starting with `/` is anchored at the copy's root, another
    pattern holding a `/` matches the end of the path, a plain one matches the name."""
    name = relative.rsplit("/", 1)[-1]
    for pattern in excludes:
        stripped = pattern.strip("/")
        if pattern.startswith("/"):
            if fnmatch.fnmatch(relative, stripped):
                return True
        elif "/" in stripped:
            if fnmatch.fnmatch(relative, stripped) or fnmatch.fnmatch(relative, "*/" + stripped):
                return True
        elif fnmatch.fnmatch(name, stripped):
            return True
    return False


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

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path) if self.up else self.sftp.listdir(path))

    def makedirs(self, path: str) -> None:
        if not self.up:
            Path(path).mkdir(parents=True, exist_ok=True)
            return
        parts = PurePosixPath(path).parts
        for index in range(1, len(parts) + 1):
            partial = str(PurePosixPath(*parts[:index]))
            try:
                self.sftp.stat(partial)
            except FileNotFoundError:
                self.sftp.mkdir(partial)

    def copy_tree(self, src: str, dst: str, relative: str, excludes: tuple[str, ...]) -> None:
        for name in self.listdir(src):
            rel = f"{relative}/{name}" if relative else name
            if _excluded(rel, excludes):
                continue
            entry = self.src_lstat(f"{src}/{name}")
            if entry is None:
                continue
            if stat.S_ISDIR(entry.st_mode or 0):
                self.makedirs(f"{dst}/{name}")
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
            self.sftp.put(src, dst)
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
