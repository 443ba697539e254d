"""One launcher at a time per cluster on this machine: an advisory file lock."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from launcher.errors import ClusterBusyError
from launcher.paths import cluster_dir


class ClusterLock:
    """Held for the duration of `up` and `down`. A second holder waits (telling the user
    who holds it) up to `timeout_s`, then fails with ClusterBusyError."""

    def __init__(
        self,
        cluster_name: str,
        purpose: str,
        timeout_s: float = 900.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = cluster_dir(cluster_name) / "lock"
        self.cluster_name = cluster_name
        self.purpose = purpose
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self._handle: int | None = None

    def __enter__(self) -> ClusterLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout_s
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(self.path)
                if not told and self.on_wait:
                    self.on_wait(f"cluster {self.cluster_name} is busy ({holder}); waiting")
                    told = True
                if time.monotonic() > deadline:
                    os.close(handle)
                    raise ClusterBusyError(
                        f"cluster {self.cluster_name} is busy ({holder}) for more than "
                        f"{self.timeout_s:g} s; try again when it finishes"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(handle, 0)
        os.write(handle, f"{self.purpose} by pid {os.getpid()}".encode())
        self._handle = handle
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            os.close(self._handle)
            self._handle = None


def _read_holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "another launcher"
    except OSError:
        return "another launcher"
