"""One attempt's output as the supervisor follows it from the head: each line into the
run's log here and to the terminal, counted so the next follower starts where it ended."""

from __future__ import annotations

import threading
from collections.abc import Callable

from launcher.runs import store


class Follower:
    """One attempt's output as it is followed: each line into the run's log and to `echo`,
    and how many bytes that was since last asked."""

    def __init__(self, cluster_name: str, run_id: str, echo: Callable[[str], None]) -> None:
        self.cluster_name = cluster_name
        self.run_id = run_id
        self.echo = echo
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._bytes = 0
        self.stale = False  # set once the attempt no longer counts it

    def line(self, text: str) -> None:
        if self.stale:
            return
        data = (text + "\n").encode("utf-8", errors="replace")
        with self._lock:
            store.append_log(self.cluster_name, self.run_id, data)
            self._bytes += len(data)
        self.echo(text)

    def take_bytes(self) -> int:
        with self._lock:
            taken, self._bytes = self._bytes, 0
        return taken
