"""Where cluster records are kept: `$LAUNCHER_HOME/records/NAME.json`, one per cluster,
kept after `down` (the cost report reads them).

The same files serve the autoscaler on a head node: there `$LAUNCHER_HOME` is the head's
own (`~/.launcher`), and `launcher` here reads the head's copy (`head_record`) and merges it
into its own; on the localhost provider the head shares this machine's `$LAUNCHER_HOME`, so
both write the one file. Writers hold a lock on the file while they read, change and write.
A record holds the cluster's whole config (and so any credentials it names): the files are
0600 in a 0700 directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from launcher.files import write_whole
from launcher.ledger.record import ClusterRecord, from_json, to_json
from launcher.paths import launcher_home, named_file

HEAD_RECORDS_DIR = "~/.launcher/records"  # on a head whose $LAUNCHER_HOME is its own


def records_dir() -> Path:
    return launcher_home() / "records"


def record_path(name: str) -> Path:
    return named_file(records_dir(), name, ".json")


def parse_record(text: str | None) -> ClusterRecord | None:
    """A record as `cat` printed it (the head's copy); None for anything else."""
    try:
        return from_json(json.loads(text or ""))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def head_record_path(name: str) -> str:
    """The head's copy of `name`'s record, for a shell there."""
    return f"{HEAD_RECORDS_DIR}/{record_path(name).name}"


def read_record(name: str) -> ClusterRecord | None:
    return _read(record_path(name))


def read_all() -> list[ClusterRecord]:
    found = (_read(p) for p in sorted(records_dir().glob("*.json")))
    return [r for r in found if r is not None]


def _read(path: Path) -> ClusterRecord | None:
    try:
        return parse_record(path.read_text())
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)  # one an earlier version made open
    fd = os.open(path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_record(
    name: str, change: Callable[[ClusterRecord | None], ClusterRecord | None]
) -> ClusterRecord | None:
    """Read the record of `name`, change it, write it back (atomically, under a lock).
    `change` gets None for a cluster not recorded yet, and returns None to leave it be."""
    path = record_path(name)
    with _locked(path):
        current = _read(path)
        if current is None and path.exists():
            # Not readable as a record (written by another version?): kept aside, not
            # overwritten, so no history is lost.
            path.replace(path.with_name(f"{path.name}.unreadable-{int(time.time())}"))
        changed = change(current)
        if changed is not None:
            # One line: read back by `cat`.
            write_whole(path, json.dumps(to_json(changed)), mode=0o600)
    return changed
