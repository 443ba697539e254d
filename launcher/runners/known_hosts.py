"""The cluster's known_hosts file: host keys recorded on first contact, checked after.

The file is in OpenSSH's format, so the `ssh` and `rsync` the launcher runs read it too.
A key may also name the machine it belongs to: `ADDRESS TYPE KEY launcher-node=ID` (OpenSSH
and paramiko take what follows the key as a comment). Cloud providers give a terminated
machine's address to the next one they start, so a key recorded for node A is not held
against node B at the same address: connecting to B drops the keys recorded for other
nodes there and records B's on first contact. A key recorded without a node (a fixed
machine of an on-prem cluster, or a node without an identity) is checked strictly: a
changed key is refused until the user forgets it.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.files import write_whole
from launcher.runners.paramiko_lib import paramiko

NODE_MARK = "launcher-node="


@dataclass(frozen=True)
class Entry:
    """One line of the file that names a host key."""

    names: tuple[str, ...]
    key: paramiko.PKey
    node: str | None
    line: str


def parse_line(line: str) -> Entry | None:
    """The entry on `line`, or None for blank, comment, marker or unreadable lines."""
    text = line.strip()
    if not text or text.startswith(("#", "@")):
        return None
    try:
        parsed = paramiko.hostkeys.HostKeyEntry.from_line(text)
    except (paramiko.SSHException, ValueError):
        return None
    if parsed is None or parsed.key is None:
        return None
    node = next(
        (f[len(NODE_MARK) :] for f in text.split()[3:] if f.startswith(NODE_MARK)),
        None,
    )
    return Entry(tuple(parsed.hostnames), parsed.key, node or None, text)


class KnownHosts:
    """The known_hosts file at `path`; every change is made under a lock file beside it, so
    concurrent launchers (or the autoscaler's threads) never lose each other's lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def entry_name(host: str, port: int = 22) -> str:
        return host if port == 22 else f"[{host}]:{port}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with (self.path.parent / (self.path.name + ".lock")).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def _write(self, lines: list[str]) -> None:
        """Replace the file whole (a reader without the lock never sees half of it)."""
        write_whole(self.path, "".join(line + "\n" for line in lines), mode=0o600)

    def keys_for(self, name: str, node: str | None = None) -> list[paramiko.PKey]:
        """The keys `name` may present when it is `node`: those recorded for `node` and
        those recorded without a node. Keys recorded there for other nodes are dropped
        from the file (those machines are gone: their address was given to `node`)."""
        with self._locked():
            lines = self._lines()
            kept: list[str] = []
            keys: list[paramiko.PKey] = []
            for line in lines:
                entry = parse_line(line)
                if entry is None or name not in entry.names:
                    kept.append(line)
                elif node is not None and entry.node is not None and entry.node != node:
                    continue  # another machine's key at this address
                else:
                    kept.append(line)
                    keys.append(entry.key)
            if len(kept) != len(lines):
                self._write(kept)
            return keys

    def record(self, name: str, key: paramiko.PKey, node: str | None = None) -> None:
        """Add `name`'s key (as `node`'s) unless a key the caller would check against is
        already recorded for it (then that check decides)."""
        with self._locked():
            lines = self._lines()
            for line in lines:
                entry = parse_line(line)
                if entry is not None and name in entry.names and entry.node in (None, node):
                    return
            mark = f" {NODE_MARK}{node}" if node else ""
            self._write([*lines, f"{name} {key.get_name()} {key.get_base64()}{mark}"])

    def forget(self, name: str) -> None:
        """Drop every key recorded for `name` (what `ssh-keygen -R` does)."""
        self._drop(lambda entry: name in entry.names)

    def forget_nodes(self, nodes: Collection[str]) -> None:
        """Drop the keys recorded as any of `nodes`', at any address (those machines are
        gone)."""
        self._drop(lambda entry: entry.node in nodes)

    def _drop(self, matches: Callable[[Entry], bool]) -> None:
        # Most removals find nothing to drop (no SSH to those nodes yet, or no file): look
        # first without the lock; a file is only ever replaced whole, so a read sees a whole
        # one, and a line added meanwhile is for a node that is not going away.
        if not any((e := parse_line(line)) and matches(e) for line in self._lines()):
            return
        with self._locked():
            lines = self._lines()
            kept = [line for line in lines if not ((e := parse_line(line)) and matches(e))]
            if len(kept) != len(lines):
                self._write(kept)
