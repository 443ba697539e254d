"""Copies to and from a pod as tar streams, with `rsync -a`'s meaning (as
launcher/runners/copy.py states it): a source directory ending in `/` copies its contents,
without it the directory itself; a file goes into a target that ends in `/` or is a
directory, else becomes the target; modes, times and symlinks are kept; `excludes` are
rsync `--exclude` patterns, matched against paths from the transfer's root (the source's
parent when the source names a directory without a trailing `/`).

A put streams a tar of the selected files (built here as it is sent, never whole in memory)
into `tar -x` in the pod; a get streams `tar -c` from the pod into a local extraction that
refuses entries leaving the destination. Owners are kept (by name, else by number) where
the receiving side is root, as rsync -a keeps them, else files belong to the receiver.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, cast

from launcher.runners.filters import rsync_excluded

BUFFER_BYTES = 1 << 20  # tar's own buffer, and the size of the pieces it writes

# `sh -c PUT_SCRIPT sh DEST NAME`: extract the tar on stdin so that entry NAME (a file)
# lands where rsync would put it: into DEST when DEST ends in / or is a directory, else as
# DEST itself (by way of a temporary directory beside it). For a directory (NAME empty) the
# tar's entries are laid out already and go into DEST, made if missing.
PUT_SCRIPT = """
x() { tar -x -p -f - -C "$1"; }
case "$1" in */) mkdir -p -- "$1" && x "$1"; exit $? ;; esac
if [ -z "$2" ] || [ -d "$1" ]; then mkdir -p -- "$1" && x "$1"; exit $?; fi
p=$(dirname -- "$1") && mkdir -p -- "$p" && t=$(mktemp -d "$p/.launcher-put.XXXXXX") || exit 1
x "$t" && mv -f -- "$t/$2" "$1"; s=$?; rm -rf -- "$t"; exit $s
"""

# `sh -c GET_SCRIPT sh SOURCE`: a tar of SOURCE on stdout, its entry named by the last
# part of SOURCE, or, when SOURCE ends in /, of its contents under `.`.
GET_SCRIPT = """
[ -e "$1" ] || [ -L "$1" ] || { echo "$1: no such file or directory" >&2; exit 2; }
case "$1" in
*/) cd -- "$1" && exec tar -c -f - . ;;
*) cd -- "$(dirname -- "$1")" && exec tar -c -f - -- "$(basename -- "$1")" ;;
esac
"""


@dataclass(frozen=True)
class PutPlan:
    """What a put sends: `name` is the file's entry ("" for a directory's tree)."""

    source: str
    top: str  # the archive name of the source itself ("." for a directory's contents)
    is_dir: bool

    @property
    def name(self) -> str:
        return "" if self.is_dir else self.top


def plan_put(source: str) -> PutPlan:
    try:
        mode = os.lstat(source).st_mode
    except FileNotFoundError:
        raise OSError(f"{source}: no such file or directory") from None
    is_dir = stat.S_ISDIR(mode) or (source.endswith("/") and os.path.isdir(source))
    if is_dir and source.endswith("/"):
        return PutPlan(source, ".", True)
    return PutPlan(source, posixpath.basename(source.rstrip("/")) or "/", is_dir)


def put_argv(plan: PutPlan, remote: str) -> list[str]:
    return ["sh", "-c", PUT_SCRIPT, "sh", remote, plan.name]


def get_argv(remote: str) -> list[str]:
    return ["sh", "-c", GET_SCRIPT, "sh", remote]


def _entries(plan: PutPlan, excludes: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """(local path, archive name) of everything a put sends, each directory before its
    contents; `excludes` matched as rsync does (from the transfer's root)."""
    root = plan.source.rstrip("/") or "/"
    if plan.top != "." and rsync_excluded(plan.top, excludes):
        return
    yield root, plan.top
    if not plan.is_dir:
        return
    prefix = "" if plan.top == "." else plan.top + "/"
    pending = [(root, prefix)]
    while pending:
        directory, relative = pending.pop()
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue  # removed meanwhile, or unreadable (rsync warns and goes on too)
        subdirs = []
        for name in names:
            rel = relative + name
            if rsync_excluded(rel, excludes):
                continue
            path = f"{directory}/{name}"
            yield path, rel
            if os.path.isdir(path) and not os.path.islink(path):
                subdirs.append((path, rel + "/"))
        pending.extend(reversed(subdirs))


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def write_tar(plan: PutPlan, excludes: tuple[str, ...], sink: Writable) -> int:
    """Write the put's tar to `sink` as it is built; return the number of entries."""
    count = 0
    with tarfile.open(
        fileobj=cast(IO[bytes], sink),  # stream mode only writes
        mode="w|",
        format=tarfile.PAX_FORMAT,
        bufsize=BUFFER_BYTES,
    ) as tar:
        for path, name in _entries(plan, excludes):
            count += _add(tar, path, name)
    return count


def _add(tar: tarfile.TarFile, path: str, name: str) -> int:
    try:
        info = tar.gettarinfo(path, arcname=name)
    except FileNotFoundError:
        return 0  # removed meanwhile
    if info is None:
        return 0  # a socket: rsync -a skips those too
    if info.islnk():  # rsync -a (without -H) copies hard links as separate files
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", os.lstat(path).st_size
    if info.isreg():
        with open(path, "rb") as data:
            tar.addfile(info, data)
    else:
        tar.addfile(info)
    return 1


class UnsafeArchive(OSError):
    """The pod's archive held an entry that would land outside the destination."""


def extract_tar(stream: Readable, remote: str, local: str) -> None:
    """Unpack the tar that GET_SCRIPT made of `remote` where `rsync -a remote local` would
    put it. Raises UnsafeArchive for an entry leaving the destination."""
    with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|", bufsize=BUFFER_BYTES) as tar:
        first = tar.next()
        if first is None:
            return
        placing = _Placing(remote.endswith("/"), local, first)
        members = placing.members(itertools.chain([first], iter(tar.next, None)))
        tar.extractall(placing.root, members=members, filter=placing.check)


class _Placing:
    """Where each entry of a get goes. The first entry is what was copied: a directory is
    laid out under the target as it is; a file goes into a target that ends in / or is a
    directory, else takes the target's name."""

    def __init__(self, contents: bool, local: str, first: tarfile.TarInfo) -> None:
        self.root = local.rstrip("/") or "/"
        self.file_name: str | None = None  # the file's new name, when it takes the target's
        into = contents or first.isdir() or local.endswith("/") or os.path.isdir(self.root)
        if not into:
            self.file_name = os.path.basename(self.root)
            self.root = os.path.dirname(self.root) or "."
        Path(self.root).mkdir(parents=True, exist_ok=True)

    def members(self, members: Iterator[tarfile.TarInfo]) -> Iterator[tarfile.TarInfo]:
        """The entries to extract; hard links are made here as copies of the file they
        name (rsync -a without -H copies each name of a file on its own)."""
        for member in members:
            if not member.islnk():
                yield member
                continue
            placed = self.check(member, self.root)
            source = os.path.join(self.root, _safe_name(member.linkname))
            if os.path.commonpath([os.path.realpath(source), os.path.realpath(self.root)]) != (
                os.path.realpath(self.root)
            ):
                raise UnsafeArchive(f"{member.name}: the archive leads outside {self.root}")
            shutil.copy2(source, os.path.join(self.root, placed.name), follow_symlinks=False)

    def check(self, member: tarfile.TarInfo, root: str) -> tarfile.TarInfo:
        """tarfile's extraction filter: the entry renamed, refused when it would land
        outside `root` (through `..` or a symlink met on the way); what is in its way (not
        a directory) removed, as rsync replaces it."""
        name = _safe_name(member.name)
        if self.file_name is not None:
            name = self.file_name
        real_root = os.path.realpath(root)
        parent = os.path.realpath(os.path.join(root, os.path.dirname(name)))
        if os.path.commonpath([real_root, parent]) != real_root:
            raise UnsafeArchive(f"{member.name}: the archive leads outside {root}")
        target = os.path.join(parent, os.path.basename(name))
        if name != "." and os.path.lexists(target) and not _is_real_dir(target):
            os.unlink(target)
        return member.replace(name=name, deep=False)


def _is_real_dir(path: str) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _safe_name(name: str) -> str:
    """An archive name made relative, refusing any that climb out (`..`)."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise UnsafeArchive(f"{name}: the archive leads outside the destination")
    return "/".join(parts) or "."
