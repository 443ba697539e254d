"""Which listed machines an on-prem cluster uses: one small JSON record per machine in use,
kept on the head machine (`~/.launcher/onprem/CLUSTER/IP.json`, CLUSTER the exact cluster
name: two clusters are kept apart however alike their names are, since a name is one path
component of letters, digits, `-`, `_` and `.`; on a head whose file system ignores case,
`ML-prod` and `ml-prod` would share one directory).

The head holds the truth, so a laptop that is lost loses nothing: the laptop reads and
writes the records over SSH, the autoscaler on the head reads and writes them as files.
One file per machine means no read-modify-write of a shared file: claiming a machine is
an exclusive create, and a tag update rewrites only that machine's record (atomically).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from launcher.errors import ProviderError
from launcher.files import write_whole
from launcher.providers.onprem.spec import records_dir
from launcher.runners.ssh import SSHRunner

Record = dict[str, Any]


class Records(Protocol):
    def all(self) -> list[Record]:
        """Every record (machines in use by the cluster)."""
        ...

    def get(self, ip: str) -> Record | None:
        """The record of machine `ip`, or None when it is not in use."""
        ...

    def claim(self, record: Mapping[str, Any]) -> bool:
        """Create the record of `record["ip"]`; False when that machine is already in use.
        Any other failure (the records cannot be written) raises ProviderError."""
        ...

    def write(self, record: Mapping[str, Any]) -> None:
        """Replace the record of `record["ip"]`."""
        ...

    def remove(self, ip: str) -> None: ...

    def remove_all(self) -> bool:
        """Remove the cluster's records directory. Returns whether there was one."""
        ...


def _unrecorded(ip: str, why: str, where: str) -> ProviderError:
    return ProviderError(
        f"could not record that the cluster uses {ip} (in {where} on the head): {why}; "
        "make that directory writable by the SSH user, or free space on the head"
    )


def _encode(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _file_name(ip: str) -> str:
    if not ip or "/" in ip or ip.startswith("."):
        raise ProviderError(f"{ip!r} is not a machine address")
    return f"{ip}.json"


class FileRecords:
    """The records as files, on the head itself (used by the autoscaler there)."""

    def __init__(self, cluster_name: str) -> None:
        self.root = Path(records_dir(cluster_name)).expanduser()

    def all(self) -> list[Record]:
        found = []
        for path in sorted(self.root.glob("*.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # removed meanwhile, or being replaced
        return found

    def get(self, ip: str) -> Record | None:
        try:
            record: Record = json.loads((self.root / _file_name(ip)).read_text())
        except (OSError, ValueError):
            return None
        return record

    def claim(self, record: Mapping[str, Any]) -> bool:
        path = self.root / _file_name(record["ip"])
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            raise _unrecorded(record["ip"], exc.strerror or str(exc), str(self.root)) from exc
        with os.fdopen(fd, "w") as out:
            out.write(_encode(record))
        return True

    def write(self, record: Mapping[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / _file_name(record["ip"])
        write_whole(path, _encode(record))

    def remove(self, ip: str) -> None:
        (self.root / _file_name(ip)).unlink(missing_ok=True)

    def remove_all(self) -> bool:
        if not self.root.exists():
            return False
        for path in self.root.iterdir():
            path.unlink(missing_ok=True)
        self.root.rmdir()
        return True


class RemoteRecords:
    """The same records, read and written over SSH on the head (used by the laptop)."""

    def __init__(self, cluster_name: str, head: SSHRunner, head_ip: str) -> None:
        self.dir = records_dir(cluster_name).replace("~", "$HOME", 1)
        self.head = head
        self.head_ip = head_ip

    def _sh(self, command: str) -> tuple[int, str]:
        try:
            return self.head.capture(command)
        except OSError as exc:
            raise ProviderError(
                f"cannot reach the head machine {self.head_ip} to read which machines the "
                f"cluster uses: {exc}; check that it is on and sshd runs there"
            ) from exc

    def all(self) -> list[Record]:
        # One record per line (records are single-line JSON).
        _, output = self._sh(
            f'for f in "{self.dir}"/*.json; do [ -f "$f" ] && cat "$f" && echo; done; true'
        )
        found = []
        for line in output.splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found

    def get(self, ip: str) -> Record | None:
        _, output = self._sh(f'cat "{self.dir}"/{shlex.quote(_file_name(ip))} 2>/dev/null')
        try:
            record: Record = json.loads(output)
        except ValueError:
            return None
        return record

    def claim(self, record: Mapping[str, Any]) -> bool:
        path = f'"{self.dir}"/{shlex.quote(_file_name(record["ip"]))}'
        # Exit 0: claimed; 1: the record exists (in use); 2: anything else, said on stdout.
        code, output = self._sh(
            f'why=$(mkdir -p "{self.dir}" 2>&1) || {{ printf %s "$why"; exit 2; }}; '
            f"why=$( (set -C; printf %s {shlex.quote(_encode(record))} > {path}) 2>&1 ) "
            f'&& exit 0; [ -e {path} ] && exit 1; printf %s "$why"; exit 2'
        )
        if code not in (0, 1):
            raise _unrecorded(record["ip"], output.strip() or f"exit code {code}", self.dir)
        return code == 0

    def write(self, record: Mapping[str, Any]) -> None:
        name = shlex.quote(_file_name(record["ip"]))
        code, _ = self._sh(
            f'mkdir -p "{self.dir}" && printf %s {shlex.quote(_encode(record))} '
            f'> "{self.dir}"/.{name}.tmp && mv "{self.dir}"/.{name}.tmp "{self.dir}"/{name}'
        )
        if code != 0:
            raise ProviderError(f"could not write the record of {record['ip']} on the head")

    def remove(self, ip: str) -> None:
        self._sh(f'rm -f "{self.dir}"/{shlex.quote(_file_name(ip))}')

    def remove_all(self) -> bool:
        code, _ = self._sh(f'test -d "{self.dir}" && rm -rf "{self.dir}"')
        return code == 0
